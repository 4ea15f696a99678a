"""The seeds of one node classifier trained as one model: a seed dimension ``S`` (Chapter 14).

A reproduction reports a mean over seeds, and on Cora one seed of a GAT is a
few thousand small operations per epoch.  Here ``S`` copies of one model of
:mod:`course_lib.gat` (:class:`~course_lib.gat.MLP`, :class:`~course_lib.gat.GCN`,
:class:`~course_lib.gat.GAT` with GAT or GATv2 layers), each built and so
initialised after its own seed, are stacked into one: every weight gets a
leading seed dimension, every activation is ``[N, S, ...]``, and one epoch
trains all ``S`` copies at once.  The copies never mix: seed ``s`` reads only
slice ``s`` of every weight, gets its own dropout masks, and its loss is
summed with the others', so its gradient is its own.

* The first layer's sparse features are one block-diagonal matrix
  :func:`block_features` ``[N S, S F_in]`` (row ``i S + s`` holds node ``i``'s
  features in the columns of seed ``s``), so dropping its stored values drops
  each seed's features independently, and one sparse product serves all seeds.
* The heads of a layer and the seeds are independent in the same way, so the
  attention layers run with ``[E, S, h]`` scores through the same
  :func:`course_lib.gat.segment_softmax`, eqs. (14.2)-(14.5).
* :func:`fit_stacked` trains with full-batch Adam and one of two stopping rules,
  applied to every seed separately (a seed that has stopped keeps its kept
  weights; the others go on): ``"gat"``, the GAT paper's code
  (:class:`course_lib.gat_training.PaperEarlyStopping`), or ``"gcn"``, Kipf &
  Welling (2017), section 5.3: stop when the validation loss has not decreased
  for ``patience`` (10) consecutive epochs, keep the last weights.

Shapes: ``N`` nodes, ``E`` edges, ``F_in`` features, ``S`` seeds, ``h`` heads,
``d`` features per head, ``K`` classes.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib import gat, sparse
from course_lib.gat_training import FitResult, Masks
from course_lib.sparse import SparseFeatures

__all__ = ["block_features", "StackedNodeModel", "fit_stacked"]


def block_features(x: Tensor, seeds: int) -> SparseFeatures:
    """``x`` [N, F_in] repeated on the diagonal of a sparse [N S, S F_in] matrix, row ``i S + s``.

    ``block @ W`` with ``W`` [S F_in, out] (seed ``s``'s weights in rows
    ``s F_in .. (s + 1) F_in``) gives, viewed as [N, S, out], ``x W_s`` for every seed.
    """
    x = x.to_dense() if isinstance(x, SparseFeatures) else x
    x = x.to_dense() if x.layout != torch.strided else x
    n, f = x.shape
    rows, cols = x.nonzero().T  # row-major                                         [nnz]
    vals = x[rows, cols]
    s = torch.arange(seeds, device=x.device)
    big_rows = (rows[:, None] * seeds + s).flatten()  # node-major, then seed        [nnz S]
    big_cols = (cols[:, None] + s * f).flatten()
    big_vals = vals[:, None].expand(-1, seeds).flatten()
    shape = (n * seeds, seeds * f)
    perm = torch.argsort(big_cols * shape[0] + big_rows)  # x^T's row-major order
    with sparse._building_csr():
        coo = torch.sparse_coo_tensor(
            torch.stack([big_rows, big_cols]), big_vals, shape, check_invariants=False
        )
        csr = coo.coalesce().to_sparse_csr()
        csr_t = coo.t().coalesce().to_sparse_csr()
    return SparseFeatures(None, _parts=(csr, csr_t, perm))


def _linear(x: Tensor | SparseFeatures, weight: Tensor, bias: Tensor | None) -> Tensor:
    """Seed ``s``'s ``x_s W_s^T + b_s``: ``x`` [N, S, F_in] or :func:`block_features`,
    ``weight`` [S, out, F_in], ``bias`` [S, out] -> [N, S, out]."""
    seeds, out, f = weight.shape
    if isinstance(x, SparseFeatures):
        y = sparse.linear(x, weight.permute(1, 0, 2).reshape(out, seeds * f)).view(-1, seeds, out)
    else:
        y = torch.einsum("nsi,soi->nso", x, weight)
    return y if bias is None else y + bias


class StackedNodeModel(nn.Module):
    """``S`` models of :mod:`course_lib.gat` (one class, one configuration) as one.

    ``StackedNodeModel(models)``: the weights of ``models[s]`` become slice ``s``
    of each stacked parameter.  ``forward(x, edge_index) -> logits [N, S, K]``,
    ``x`` from :func:`block_features` (sparse) or a dense [N, F_in] tensor.  :meth:`weights` / :meth:`load_weights`
    copy all parameters (for early stopping); :meth:`layer_parameters` lists
    the first layer's parameters (Kipf's weight decay applies to them only).
    """

    def __init__(self, models: list[nn.Module]) -> None:
        super().__init__()
        kinds = {(type(m), repr(m)) for m in models}
        if not models or len(kinds) != 1:
            raise ValueError("StackedNodeModel: give models of one class and configuration")
        first = models[0]
        if not isinstance(first, gat.MLP | gat.GCN | gat.GAT):
            raise ValueError(f"StackedNodeModel: unknown model {type(first).__name__}")
        self.kind, self.dropout, self.seeds = type(first), first.dropout, len(models)
        if isinstance(first, gat.GAT):
            self.layer_kind = type(first.conv1)  # its attention dropout is first.dropout too
            self.heads = (first.conv1.heads, first.conv2.heads)
            self.dims = (first.conv1.out_features, first.conv2.out_features)
        states = [m.state_dict() for m in models]
        self.names = list(states[0])
        self.params = nn.ParameterList(
            nn.Parameter(torch.stack([st[k] for st in states]).detach().clone()) for k in self.names
        )

    def p(self, name: str) -> Tensor:
        return self.params[self.names.index(name)]

    def layer_parameters(self, prefix: str) -> list[nn.Parameter]:
        return [p for n, p in zip(self.names, self.params, strict=True) if n.startswith(prefix)]

    def weights(self) -> list[Tensor]:
        return [p.detach().clone() for p in self.params]

    def load_weights(self, weights: list[Tensor], which: Tensor) -> None:
        """Copy ``weights`` into the seeds where ``which`` [S] is True."""
        with torch.no_grad():
            for p, w in zip(self.params, weights, strict=True):
                p[which] = w[which]

    def _drop(self, x):
        return sparse.dropout(x, self.dropout, self.training)

    def _attention(self, i: int, x, edge_index: Tensor, num_nodes: int) -> Tensor:
        """Layer ``conv{i+1}`` of every seed, eqs. (14.2)-(14.5): [N, S, h d] or [N, S, d]."""
        pre, heads, d = f"conv{i + 1}.", self.heads[i], self.dims[i]
        src, dst = gat.add_self_loops(edge_index, int(num_nodes))
        shape = (-1, self.seeds, heads, d)
        if self.layer_kind is gat.GATLayer:
            wx = _linear(x, self.p(pre + "lin.weight"), None).view(shape)  # W x  [N, S, h, d]
            a_src, a_dst = (
                self.p(pre + n).view(1, self.seeds, heads, d) for n in ("att_src", "att_dst")
            )
            scores = (wx * a_src).sum(-1)[src] + (wx * a_dst).sum(-1)[dst]  # (14.2) [E, S, h]
            e, x_j = F.leaky_relu(scores, 0.2), wx[src]
        else:  # GATv2, (14.5)
            x_src = _linear(x, self.p(pre + "lin_l.weight"), self.p(pre + "lin_l.bias")).view(shape)
            x_dst = _linear(x, self.p(pre + "lin_r.weight"), self.p(pre + "lin_r.bias")).view(shape)
            x_j = x_src[src]  #                                                     [E, S, h, d]
            att = self.p(pre + "att").view(1, self.seeds, heads, d)
            e = (F.leaky_relu(x_j + x_dst[dst], 0.2) * att).sum(-1)  #               [E, S, h]
        alpha = gat.segment_softmax(e, dst, num_nodes)  # (14.3)                     [E, S, h]
        alpha = sparse.dropout(alpha, self.dropout, self.training)
        out = x_j.new_zeros(num_nodes, *x_j.shape[1:])
        out = out.index_add_(0, dst, x_j * alpha.unsqueeze(-1))  # (14.4)         [N, S, h, d]
        out = out.flatten(2) if i == 0 else out.mean(2)  # concatenate / average the heads
        return out + self.p(pre + "bias")

    def _gcn(self, i: int, x, edge_index: Tensor, num_nodes: int) -> Tensor:
        """Layer ``conv{i+1}`` of every seed, eq. (14.1): [N, S, out]."""
        src, dst = gat.add_self_loops(edge_index, num_nodes)
        degree = torch.bincount(dst, minlength=num_nodes).to(self.params[0].dtype)
        norm = (degree.rsqrt()[src] * degree.rsqrt()[dst])[:, None, None]  # [E, 1, 1]
        wx = _linear(x, self.p(f"conv{i + 1}.lin.weight"), None)  #            [N, S, out]
        out = torch.zeros_like(wx).index_add_(0, dst, wx[src] * norm)
        return out + self.p(f"conv{i + 1}.bias")

    def forward(self, x: SparseFeatures | Tensor, edge_index: Tensor) -> Tensor:
        if isinstance(x, SparseFeatures):  # block_features(x, S)             [N S, S F_in]
            num_nodes = x.shape[0] // self.seeds
        else:  # dense [N, F_in], the same for every seed                     [N, S, F_in]
            num_nodes, x = x.shape[0], x.unsqueeze(1).expand(-1, self.seeds, -1)
        x = self._drop(x)
        if self.kind is gat.MLP:
            h = F.relu(_linear(x, self.p("lin1.weight"), self.p("lin1.bias")))
            return _linear(self._drop(h), self.p("lin2.weight"), self.p("lin2.bias"))
        if self.kind is gat.GCN:
            h = F.relu(self._gcn(0, x, edge_index, num_nodes))
            return self._gcn(1, self._drop(h), edge_index, num_nodes)
        h = F.elu(self._attention(0, x, edge_index, num_nodes))
        return self._attention(1, self._drop(h), edge_index, num_nodes)


# ---------------------------------------------------------------------------
# Training every seed at once, each with its own early stopping
# ---------------------------------------------------------------------------


def _losses_and_accuracies(logits: Tensor, y: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-seed cross-entropy and accuracy on the nodes of ``mask``: [S] each."""
    lg = logits[mask]  #                                                      [n, S, K]
    target = y[mask][:, None].expand(-1, lg.shape[1])  #                      [n, S]
    loss = F.cross_entropy(lg.permute(0, 2, 1), target, reduction="none").mean(0)
    return loss, (lg.argmax(-1) == target).float().mean(0)


def fit_stacked(
    model: StackedNodeModel,
    x: SparseFeatures,
    edge_index: Tensor,
    y: Tensor,
    masks: Masks,
    *,
    lr: float,
    weight_decay: float,
    max_epochs: int,
    patience: int,
    stopping: str = "gat",
    decay_first_layer_only: bool = False,
) -> list[FitResult]:
    """Train every seed of ``model`` (full batch, Adam with L2 ``weight_decay``); a result per seed.

    ``x`` is :func:`block_features`; ``masks = (train, val, test)``.  Each epoch
    is one step on the sum of the seeds' training losses, then the validation
    loss and accuracy of every seed (no dropout).  Each seed stops by itself:

    * ``stopping="gat"``: the GAT paper's rule
      (:class:`course_lib.gat_training.PaperEarlyStopping`): stop after
      ``patience`` epochs in which neither the loss reached a new minimum nor
      the accuracy a new maximum; keep the weights of the last epoch that
      improved both;
    * ``stopping="gcn"``: Kipf & Welling's: stop after ``patience`` consecutive
      epochs without a new minimum of the validation loss; keep the last weights.

    With ``decay_first_layer_only`` the weight decay applies to the first
    layer's parameters only (Kipf & Welling).  Training ends when every seed
    has stopped or after ``max_epochs``.  ``FitResult.seconds`` is the wall time
    of the whole stacked run, the same for every seed.
    """
    if stopping not in ("gat", "gcn"):
        raise ValueError(f"fit_stacked: stopping must be 'gat' or 'gcn', got {stopping!r}")
    train_mask, val_mask, test_mask = masks
    first = model.layer_parameters("conv1." if model.kind is not gat.MLP else "lin1.")
    rest = [p for p in model.params if all(p is not q for q in first)]
    groups = [{"params": first, "weight_decay": weight_decay}]
    groups.append({"params": rest, "weight_decay": 0.0 if decay_first_layer_only else weight_decay})
    opt = torch.optim.Adam(groups, lr=lr)
    seeds, device = model.seeds, model.params[0].device
    best_loss = torch.full((seeds,), float("inf"), device=device)
    best_acc, wait = (
        torch.zeros(seeds, device=device),
        torch.zeros(seeds, dtype=torch.long, device=device),
    )
    stopped = torch.zeros(seeds, dtype=torch.bool, device=device)
    best_epoch, epochs = torch.zeros_like(wait), torch.zeros_like(wait)
    kept = model.weights()
    start = time.perf_counter()
    for epoch in range(max_epochs):
        model.train()
        loss, _ = _losses_and_accuracies(model(x, edge_index), y, train_mask)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()  # the seeds' losses share no weight: each gets its own gradient
        opt.step()
        model.eval()
        with torch.no_grad():
            val_loss, val_acc = _losses_and_accuracies(model(x, edge_index), y, val_mask)
        active = ~stopped
        epochs += active.long()
        better_loss, better_acc = val_loss <= best_loss, val_acc >= best_acc
        if stopping == "gat":  # reset the wait if either improved, keep when both did
            improved, keep = better_loss | better_acc, better_loss & better_acc & active
        else:  # Kipf & Welling: wait for a lower loss, keep the last weights
            improved, keep = val_loss < best_loss, active
        for k, p in zip(kept, model.params, strict=True):
            k[keep] = p.detach()[keep]
        best_epoch = torch.where(keep, epoch, best_epoch)
        best_loss = torch.where(active, torch.minimum(best_loss, val_loss), best_loss)
        best_acc = torch.where(active, torch.maximum(best_acc, val_acc), best_acc)
        wait = torch.where(active & improved, 0, wait + active.long())
        stopped |= wait >= patience
        if bool(stopped.all()):
            break
    seconds = time.perf_counter() - start
    model.load_weights(kept, torch.ones_like(stopped))
    model.eval()
    with torch.no_grad():
        logits = model(x, edge_index)
    test_acc = _losses_and_accuracies(logits, y, test_mask)[1].tolist()
    val_acc = _losses_and_accuracies(logits, y, val_mask)[1].tolist()
    return [
        FitResult(test_acc[s], val_acc[s], int(best_epoch[s]), int(epochs[s]), seconds)
        for s in range(seeds)
    ]
