"""One encoder-decoder per sequence length, all trained as one model (Chapter 1).

Chapter 1 trains the GRU encoder-decoder of eqs. (1.13)-(1.15),
:class:`course_lib.seq2seq.Seq2Seq`, on the copy task at several lengths ``T``: one
model per length, with the same initial weights, the same training budget and the
same random stream of batches.  Here the ``K`` models are the members of one
:class:`course_lib.ensemble.Stacked` model and train together with :func:`course_lib.ensemble.train_stacked` (AdamW and
gradient clipping per member), member ``k`` on its own length ``lengths[k]`` and its
own batches.  Each update is the one that ``K`` separate
:func:`course_lib.training.train` runs on the same batches would make (tested to 1e-5
over 4 steps at toy sizes, ``tests/test_by_length.py``); over hundreds of steps the
rounding differences grow, so one seed's accuracies after training can differ from
those of separate runs by a few points.  The motivation was time: Chapter 1's
training cell took about 51 s with seven separate runs and about 22 s as one stacked
model (measured once, back to back, on one loaded core of a 2-core AMD EPYC).

The members' sequences have different lengths, so they do not fit in one tensor
``[K, B, T]``.  The time steps are *packed*, as ``torch.nn.utils.rnn.PackedSequence``
packs the sequences of one batch: with the members ordered from the longest length
to the shortest, step ``t`` holds the rows of the members still running
(``T_k > t``), a prefix of that order, and the rows of all steps are concatenated,
``R = sum_k T_k`` rows of ``B`` sequences each.  Each member's last state is its
own (taken at its own last step), and no work goes to padding; the values equal the
separate runs' to float32 rounding.

* :class:`CopyByLength`: the batches of the ``K`` members (``next_batch``) and their
  losses, one per member (``loss``), the two functions :func:`train_stacked` takes.

The GRU of the packed steps, eqs. (1.8)-(1.11) in PyTorch's convention (as
:func:`course_lib.rnn.gru_cell`), has its backward pass written out (backpropagation
through time by hand): one matrix product per step for the state's gradient, and the
weights' gradients of all steps in one batched product at the end.  It is checked
against autograd through ``rnn.gru_cell`` in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.ensemble import Stacked
from course_lib.seq2seq import make_batch

__all__ = ["CopyByLength"]


class _PackedGRU(torch.autograd.Function):
    """A GRU, eqs. (1.8)-(1.11), over packed steps; members ordered longest first.

    ``gi`` [R, B, 3H]: ``W_i* x_t + b_i*`` of every packed row (step ``t``'s rows are
    members ``0 .. active[t] - 1``); ``h0`` [K, B, H]; ``weight_hh`` [K, 3H, H];
    ``bias_hh`` [K, 3H]; ``rows`` [R], the member of each row.  Returns every state
    [R, B, H] (packed as ``gi``) and each member's last state [K, B, H].
    """

    @staticmethod
    def forward(ctx: Any, gi: Tensor, h0: Tensor, weight_hh: Tensor, bias_hh: Tensor,
                rows: Tensor, active: tuple[int, ...]) -> tuple[Tensor, Tensor]:  # fmt: skip
        hidden = h0.shape[-1]
        h, last = h0, []  # the running members' states; the finished members' last states
        w_t, b = weight_hh.transpose(1, 2), bias_hh.unsqueeze(1)  # [K, H, 3H], [K, 1, 3H]
        # what the backward pass needs, for every packed row: h_{t-1}, r_t, z_t, and the
        # factors that do not depend on the gradient (written step by step, small tensors)
        prev, r_all, z_all, states, d_cand, f_r, f_z = (
            gi.new_empty(*gi.shape[:2], hidden) for _ in range(7)
        )  # each [R, B, H]
        start = 0
        for g, n in zip(gi.split(active), active, strict=True):
            i, start = slice(start, start + n), start + n
            if n < h.shape[0]:  # the members n .. are done: keep their last state
                last.append(h[n:])
                h = h[:n]
            prev[i] = h
            gh = torch.baddbmm(b[:n], h, w_t[:n])  # W_h* h_{t-1} + b_h*             [n, B, 3H]
            g_r, g_z, g_n = g.split(hidden, -1)
            gh_r, gh_z, gh_n = gh.split(hidden, -1)
            r = torch.add(g_r, gh_r, out=r_all[i]).sigmoid_()  # (1.8)               [n, B, H]
            z = torch.add(g_z, gh_z, out=z_all[i]).sigmoid_()  # (1.9)
            # (1.10): tanh(a) = 2 sigmoid(2a) - 1, equal in exact arithmetic (within 2e-7
            # in float32; tests/test_by_length.py checks the states against rnn.gru_cell)
            cand = torch.sigmoid(torch.addcmul(g_n, r, gh_n).mul_(2)).mul_(2).sub_(1)
            h = torch.lerp(cand, h, z, out=states[i])  # (1.11): (1 - z) n + z h_{t-1}
            keep = 1 - z
            # dh_t/da_t, a_t the argument of tanh in (1.10); then the sigmoids' factors
            torch.mul(cand, cand, out=d_cand[i]).neg_().add_(1).mul_(keep)
            torch.mul(1 - r, r, out=f_r[i]).mul_(gh_n)
            torch.sub(prev[i], cand, out=f_z[i]).mul_(z).mul_(keep)
        last.append(h)
        factors = (d_cand, f_r, f_z, r_all, z_all)
        ctx.save_for_backward(weight_hh, rows, prev, *factors)
        ctx.active = active
        return states, torch.cat(last[::-1])

    @staticmethod
    def backward(ctx: Any, d_states: Tensor, d_last: Tensor) -> tuple:
        # autograd materialises unused outputs' gradients as zeros: neither is ever None
        weight_hh, rows, prev, d_cand, f_r, f_z, r, z = ctx.saved_tensors
        k, hidden = weight_hh.shape[0], prev.shape[-1]
        dh = d_last.clone()  # dL/dh of each member's last state, then of earlier ones [K, B, H]
        starts = torch.tensor((0, *ctx.active)).cumsum(0).tolist()
        d_gh = prev.new_empty(*prev.shape[:2], 3 * hidden)  # dL/d(W_h* h + b_h*)   [R, B, 3H]
        d_r, d_z, d_n = d_gh.split(hidden, -1)
        d_a = torch.empty_like(prev)  # dL/da_t, the input side's (1.10) block        [R, B, H]
        for t in reversed(range(len(ctx.active))):
            n, i = ctx.active[t], slice(starts[t], starts[t + 1])
            d = dh[:n] + d_states[i]  # dL/dh_t                                     [n, B, H]
            torch.mul(d, d_cand[i], out=d_a[i])
            torch.mul(d_a[i], f_r[i], out=d_r[i])  # through (1.10) and the sigmoid of (1.8)
            torch.mul(d, f_z[i], out=d_z[i])  # through (1.11) and the sigmoid of (1.9)
            torch.mul(d_a[i], r[i], out=d_n[i])
            dh[:n] = torch.baddbmm(d * z[i], d_gh[i], weight_hh[:n])  # dL/dh_{t-1}
        d_w = torch.bmm(d_gh.transpose(1, 2), prev)  # each row's [3H, H]            [R, 3H, H]
        d_weight = d_w.new_zeros(weight_hh.shape).index_add_(0, rows, d_w)
        d_bias = d_w.new_zeros(k, 3 * hidden).index_add_(0, rows, d_gh.sum(1))
        d_gi = torch.cat([d_gh[..., : 2 * hidden], d_a], -1)  # the input side's   [R, B, 3H]
        return d_gi, dh, d_weight, d_bias, None, None


_NAMES = ("src_emb", "tgt_emb", "encoder", "decoder", "out")  # Seq2Seq's layers, in order


class CopyByLength:
    """The copy (or reverse) task at ``K`` lengths, for a :class:`Stacked` of ``K`` Seq2Seq models.

    Member ``k`` of the stacked model (built from ``K`` :class:`course_lib.seq2seq.Seq2Seq`,
    with PyTorch's or the library's GRU) learns length ``lengths[k]`` from batches of
    ``batch_size`` drawn with ``generators[k]``, the batches
    ``seq2seq.make_batch(batch_size, lengths[k], num_symbols, task=task, generator=generators[k])``
    that a separate run drawing from that stream would see.

    * ``next_batch()``: the members' batches, packed: ``(src, tgt_in, tgt)``, each [R, B];
    * ``loss(model, batch)``: each member's mean cross-entropy under teacher forcing,
      as :func:`course_lib.seq2seq.seq2seq_loss`, shape [K]; ``history`` keeps them
      (detached), one tensor [K] per call.

    ``train_stacked(model, task.next_batch, task.loss, steps, lr)`` then makes, at each
    step, the update that ``K`` separate ``train(model_k, ..., seq2seq_loss, steps, lr)``
    runs would make (to float32 rounding, which grows over many steps);
    ``model.member(k)`` is model ``k``, an ordinary ``Seq2Seq``.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        num_symbols: int,
        generators: Sequence[torch.Generator],
        *,
        task: str = "copy",
        device: torch.device | str = "cpu",
    ) -> None:
        self.lengths = [int(t) for t in lengths]
        if not self.lengths or min(self.lengths) < 1 or len(generators) != len(self.lengths):
            raise ValueError(
                "CopyByLength: give one or more lengths >= 1 and one generator per length; got "
                f"lengths {list(lengths)} and {len(generators)} generators"
            )
        self.batch_size, self.num_symbols, self.task = batch_size, num_symbols, task
        self.generators, self.device = list(generators), device
        k, longest = len(self.lengths), max(self.lengths)
        self.order = sorted(range(k), key=lambda m: -self.lengths[m])  # longest first
        by_order = torch.tensor([self.lengths[m] for m in self.order])  # [K]
        self.active = tuple(int((by_order > t).sum()) for t in range(longest))  # rows per step
        self._keep = torch.arange(longest)[:, None] < by_order  # packed rows (t, j)    [T, K]
        self._rows = torch.arange(k).expand(longest, k)[self._keep]  # j of each row    [R]
        self.history: list[Tensor] = []

    def next_batch(self) -> tuple[Tensor, Tensor, Tensor]:
        """Every member's batch, packed step by step: ``(src, tgt_in, tgt)``, each [R, B]."""
        longest = len(self.active)
        batches = [
            make_batch(self.batch_size, t, self.num_symbols, task=self.task, generator=g,
                       device=self.device)
            for t, g in zip(self.lengths, self.generators, strict=True)
        ]  # fmt: skip

        def packed(name: str) -> Tensor:
            steps = [F.pad(getattr(batches[m], name), (0, longest - self.lengths[m])).T
                     for m in self.order]  # each [T, B]  # fmt: skip
            return torch.stack(steps, 1)[self._keep.to(steps[0].device)]  # [R, B]

        return packed("src"), packed("tgt_in"), packed("tgt")

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """Each member's mean cross-entropy of its targets (teacher forcing), shape [K].

        The Seq2Seq equations (1.13)-(1.15) on the packed rows: member ``m`` of a row reads
        its own embeddings, GRUs and output layer.
        """
        p = self._parameters(model)
        src, tgt_in, tgt = batch  # [R, B] each
        dev = src.device
        rows, order = self._rows.to(dev), torch.tensor(self.order, device=dev)
        member = order[rows]  # the member (of the model) of each packed row           [R]

        def gru_inputs(emb: Tensor, symbols: Tensor, gru: str) -> Tensor:
            # W_i* E[x] + b_i* depends on the symbol only: one row per symbol and member,
            # then a lookup (equal, up to rounding, to the product at every position)
            table = torch.baddbmm(p[f"{gru}.bias_ih_l0"].unsqueeze(1), emb,
                                  p[f"{gru}.weight_ih_l0"].transpose(1, 2))  # [K, V, 3H]  # fmt: skip
            index = (symbols + member[:, None] * emb.shape[1]).flatten()  # [R B]
            return table.flatten(0, 1).index_select(0, index).view(*symbols.shape, -1)

        def run(gru: str, gi: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
            w, b = p[f"{gru}.weight_hh_l0"][order], p[f"{gru}.bias_hh_l0"][order]
            return _PackedGRU.apply(gi, h0, w, b, rows, self.active)

        hidden = p["encoder.weight_hh_l0"].shape[-1]
        h0 = src.new_zeros(len(order), src.shape[1], hidden, dtype=p["out.weight"].dtype)
        _, c = run("encoder", gru_inputs(p["src_emb.weight"], src, "encoder"), h0)  # (1.13)
        s, _ = run("decoder", gru_inputs(p["tgt_emb.weight"], tgt_in, "decoder"), c)  # (1.14)
        w, b = p["out.weight"][member], p["out.bias"][member]
        logits = torch.baddbmm(b.unsqueeze(1), s, w.transpose(1, 2))  # (1.15)       [R, B, V]
        ce = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="none")
        per_row = ce.view_as(tgt).sum(1)  # [R]
        counts = torch.tensor(self.lengths, device=dev, dtype=per_row.dtype) * tgt.shape[1]
        losses = per_row.new_zeros(len(order)).index_add(0, member, per_row) / counts  # [K]
        self.history.append(losses.detach())
        return losses

    def _parameters(self, model: nn.Module) -> dict[str, Tensor]:
        if not isinstance(model, Stacked) or model.num_members != len(self.lengths):
            raise TypeError(
                f"CopyByLength.loss: needs a Stacked model of {len(self.lengths)} Seq2Seq "
                f"members, one per length; got {type(model).__name__}"
            )
        p = {name.replace("/", "."): value for name, value in model.named_parameters()}
        missing = [n for n in _NAMES if f"{n}.weight" not in p and f"{n}.weight_hh_l0" not in p]
        if missing:
            raise TypeError(f"CopyByLength.loss: the members are not Seq2Seq models (no {missing})")
        return p
