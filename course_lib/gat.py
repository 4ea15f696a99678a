"""Graph attention: GCN, GAT and GATv2 layers, dense and sparse (Chapter 14).

Equation numbers refer to Chapter 14.  Shapes use the library's letters
(``book/notation.md``): ``N`` nodes, ``E`` directed edges, ``F_in`` input
features, ``h`` heads, ``d`` features per head, ``K`` classes.  Argument names
(``in_features``, ``out_features``, ``heads``, ``concat``, ``add_self_loops``)
and parameter names (``lin``, ``att_src``...) follow PyTorch Geometric on
purpose, so that a layer's weights copy into PyG's ``GATConv`` unchanged
(``tests/test_gat.py`` checks the outputs agree).

An edge list ``edge_index`` [2, E] holds (source ``j``, target ``i``) pairs, the
layout of PyTorch Geometric and of :class:`course_lib.data.Graph`: a message
flows from ``edge_index[0]`` to ``edge_index[1]``, and node ``i``'s neighbourhood
``N(i)`` is the set of sources of the edges that end at ``i``.

* (14.1) GCN (Kipf & Welling, 2017): ``h_i = sum_{j in N(i) + i} x_j W / sqrt(d_i d_j) + b``
  with ``d_i`` the degree counting the self-loop (:class:`GCNLayer`).
* (14.2) GAT (Velickovic et al., 2018): ``e_ij = LeakyReLU(a_dst . W x_i + a_src . W x_j)``,
  (14.3) ``alpha_ij = softmax_{j in N(i)} e_ij``, (14.4) ``h_i = sum_j alpha_ij W x_j``,
  one ``(W, a)`` per head; heads concatenated (hidden layers) or averaged (the
  output layer) (:class:`GATLayer`).
* (14.5) GATv2 (Brody et al., 2022): ``e_ij = a . LeakyReLU(W_dst x_i + W_src x_j)``, the
  non-linearity *before* the dot product, so the ranking of neighbours can depend
  on the query node ("dynamic" attention) (:class:`GATv2Layer`).
* (14.6) TGAT's functional time encoding (Xu et al., 2020):
  ``Phi(t) = sqrt(1/d) [cos(w_1 t), sin(w_1 t), ..., cos(w_d t), sin(w_d t)]``, so
  that ``Phi(t_1) . Phi(t_2)`` depends only on ``t_1 - t_2``
  (:func:`course_lib.time_encoding.time_encoding`, shared with Chapter 10).

Every attention layer has two forms that compute the same function:
``forward(x, edge_index)`` works on the edge list (memory linear in ``E``; the
softmax over each node's neighbours is computed stably with a per-node maximum,
:func:`segment_softmax`), and ``forward_dense(x, adj)`` on a boolean adjacency
matrix [N, N] with a masked softmax (memory quadratic in ``N``; easy to read).

Self-loops, isolated nodes and duplicate edges
----------------------------------------------
* ``add_self_loops=True`` (the default, as in the paper and in PyG) first
  removes any self-loop already in the input and then adds exactly one per node.
  An isolated node then attends to itself only (``alpha_ii = 1``): its output is
  its own ``W x_i`` plus the bias.  With ``add_self_loops=False`` a node with no
  incoming edge receives nothing: its attention weights are empty (dense form:
  a fully masked row, weights zero) and its output is the bias alone.
* Duplicate edges: the sparse form treats the edge list as a multiset, like
  PyG: an edge listed twice enters its target's softmax twice, so that
  neighbour counts twice.  An adjacency matrix cannot hold a duplicate, so the
  dense form sees each edge once; the two forms agree on duplicate-free edge
  lists (:func:`coalesce` removes duplicates; :func:`course_lib.data.cora` has none).

Sparse inputs: ``x`` may be :class:`course_lib.sparse.SparseFeatures` or sparse
COO (:func:`course_lib.sparse.linear`, :func:`course_lib.sparse.dropout`).
Training loops are in :mod:`course_lib.gat_training`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib import sparse
from course_lib.masks import masked_softmax
from course_lib.shapes import expect_shape

# TGAT's time encoding moved to course_lib.time_encoding (Chapter 10 uses it too);
# re-exported here so that the notebooks' ``gat.time_encoding`` keeps working.
from course_lib.time_encoding import time_encoding as time_encoding

__all__ = [
    "add_self_loops",
    "coalesce",
    "to_dense_adjacency",
    "segment_softmax",
    "GCNLayer",
    "GATLayer",
    "GATv2Layer",
    "MLP",
    "GCN",
    "GAT",
]


# ---------------------------------------------------------------------------
# Edge lists
# ---------------------------------------------------------------------------


def _check_edges(
    where: str, edge_index: Tensor, num_nodes: int, num_targets: int | None = None
) -> None:
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        shape = list(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index)
        raise ValueError(f"{where}: edge_index must be [2, E], got {shape}")
    if edge_index.dtype != torch.long:
        raise ValueError(f"{where}: edge_index must be int64, got {edge_index.dtype}")
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise ValueError(f"{where}: edge_index holds node ids outside 0..{num_nodes - 1}")
    n = num_targets  # if given: every edge must end at one of the first n nodes
    if n is not None and (
        not 0 <= n <= num_nodes or (edge_index.numel() and edge_index[1].max() >= n)
    ):
        raise ValueError(
            f"{where}: num_targets={n} must be at most {num_nodes} (the nodes), and every edge "
            f"must end at a node in 0..{n - 1}"
        )


def _check_x(where: str, x: Tensor | sparse.SparseFeatures, in_features: int) -> None:
    tensor = x.csr if isinstance(x, sparse.SparseFeatures) else x
    expect_shape(where, "x", tensor, [("N", None), ("F_in", in_features)])


def add_self_loops(edge_index: Tensor, num_nodes: int, num_targets: int | None = None) -> Tensor:
    """Remove any self-loop from ``edge_index`` [2, E], then append ``(i, i)`` for every node.

    Returns [2, E' + N] where E' is the number of non-loop edges (duplicates kept).
    With ``num_targets`` (every edge ending at one of the first ``num_targets``
    nodes, checked), only those nodes get a loop: [2, E' + num_targets].
    """
    _check_edges("add_self_loops", edge_index, num_nodes, num_targets)
    keep = edge_index[0] != edge_index[1]
    n = num_nodes if num_targets is None else num_targets
    loops = torch.arange(n, device=edge_index.device).expand(2, n)
    return torch.cat([edge_index[:, keep], loops], dim=1)


def coalesce(edge_index: Tensor, num_nodes: int) -> Tensor:
    """``edge_index`` [2, E] with duplicate edges removed, sorted by (source, target)."""
    _check_edges("coalesce", edge_index, num_nodes)
    keys = torch.unique(edge_index[0] * num_nodes + edge_index[1])  # sorted
    return torch.stack([keys // num_nodes, keys % num_nodes])


def to_dense_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Boolean adjacency ``adj`` [N, N] with ``adj[i, j] = True`` for each edge ``j -> i``.

    Row ``i`` is node ``i``'s neighbourhood (the keys node ``i`` attends to).
    Duplicate edges collapse to one entry.
    """
    _check_edges("to_dense_adjacency", edge_index, num_nodes)
    adj = torch.zeros(num_nodes, num_nodes, dtype=torch.bool, device=edge_index.device)
    adj[edge_index[1], edge_index[0]] = True
    return adj


def segment_softmax(scores: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Softmax of ``scores`` [E, ...] over the entries that share a target ``index`` [E], eq. (14.3).

    ``alpha_e = exp(s_e - m_i) / sum_{e' -> i} exp(s_e' - m_i)`` with ``m_i`` the
    largest score into node ``i`` (``scatter_reduce`` "amax"), so no ``exp``
    overflows; subtracting ``m_i`` does not change the result, so it is treated
    as a constant (detached).  Memory and time are linear in ``E``, with no
    loop over nodes.  Returns [E, ...]; the entries into each node sum to 1.
    """
    expect_shape("segment_softmax", "index", index, [("E", scores.shape[0])])
    index_wide = index.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)  # [E, ...]
    minus_inf = torch.full(
        (num_nodes, *scores.shape[1:]), float("-inf"), dtype=scores.dtype, device=scores.device
    )
    node_max = minus_inf.scatter_reduce(0, index_wide, scores.detach(), "amax")  # m_i  [N, ...]
    exp_scores = torch.exp(scores - node_max.index_select(0, index))  # <= 1          [E, ...]
    totals = torch.zeros_like(node_max).index_add_(0, index, exp_scores)  # sum e -> i [N, ...]
    return exp_scores / totals.index_select(0, index)


# ---------------------------------------------------------------------------
# GCN
# ---------------------------------------------------------------------------


class GCNLayer(nn.Module):
    """A graph convolution, eq. (14.1): ``h_i = b + sum_{j in N(i) + i} x_j W / sqrt(d_i d_j)``.

    ``d_i`` is 1 + the number of edges into ``i`` (self-loops are removed and
    one is added per node, as in :func:`add_self_loops`).  Parameters as PyG's
    ``GCNConv``: ``lin`` (no bias), ``bias``.  ``forward(x [N, F_in], edge_index
    [2, E]) -> [N, out_features]``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.lin = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        _check_x("GCNLayer", x, self.in_features)
        num_nodes = x.shape[0]
        src, dst = add_self_loops(edge_index, num_nodes)
        degree = torch.zeros(num_nodes, dtype=x.dtype, device=x.device).index_add_(
            0, dst, torch.ones_like(dst, dtype=x.dtype)
        )
        degree_inv_sqrt = degree.rsqrt()
        norm = degree_inv_sqrt[src] * degree_inv_sqrt[dst]  # 1 / sqrt(d_i d_j)       [E]
        wx = sparse.linear(x, self.lin.weight)  # x W                       [N, out_features]
        out = torch.zeros_like(wx).index_add_(0, dst, wx.index_select(0, src) * norm[:, None])
        return out if self.bias is None else out + self.bias


# ---------------------------------------------------------------------------
# GAT and GATv2
# ---------------------------------------------------------------------------


class _AttentionLayer(nn.Module):
    """What GAT and GATv2 share: heads, self-loops, dropout, combining the heads."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        heads: int,
        concat: bool,
        negative_slope: float,
        dropout: float,
        add_self_loops: bool,
        bias: bool,
    ) -> None:
        super().__init__()
        if min(in_features, out_features, heads) < 1:
            raise ValueError(
                f"{type(self).__name__}: in_features, out_features and heads must be >= 1, "
                f"got {in_features}, {out_features}, {heads}"
            )
        self.in_features, self.out_features, self.heads = in_features, out_features, heads
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.add_self_loops = add_self_loops
        size = heads * out_features if concat else out_features
        self.bias = nn.Parameter(torch.zeros(size)) if bias else None

    def _combine(self, out: Tensor) -> Tensor:
        """[N, h, d] -> [N, h d] (concatenate) or [N, d] (average), plus the bias."""
        out = out.flatten(1) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias

    def _edges_used(self, edge_index: Tensor, num_nodes: int, num_targets: int) -> Tensor:
        """The edges attended over, with a self-loop per output node if the layer adds them."""
        _check_edges(type(self).__name__, edge_index, num_nodes, num_targets)
        if not self.add_self_loops:
            return edge_index
        return add_self_loops(edge_index, num_nodes, num_targets)

    def _adjacency_used(self, adj: Tensor, num_nodes: int) -> Tensor:
        """The dense counterpart of :meth:`_edges_used`, after checking ``adj`` [N, N] bool."""
        where = type(self).__name__
        expect_shape(where, "adj", adj, [("N", num_nodes), ("N", num_nodes)])
        if adj.dtype != torch.bool:
            raise ValueError(f"{where}: adj must be a bool [N, N] matrix, got {adj.dtype}")
        if self.add_self_loops:
            adj = adj | torch.eye(num_nodes, dtype=torch.bool, device=adj.device)
        return adj

    def extra_repr(self) -> str:
        return (
            f"{self.in_features}, {self.out_features}, heads={self.heads}, concat={self.concat}, "
            f"dropout={self.dropout}, add_self_loops={self.add_self_loops}"
        )


class GATLayer(_AttentionLayer):
    """A graph attention layer (Velickovic et al., 2018), eqs. (14.2)-(14.4).

    Per head ``k``: ``e_ij = LeakyReLU(a_dst^k . W^k x_i + a_src^k . W^k x_j)``,
    ``alpha_ij = softmax_j e_ij`` over ``N(i)``, ``h_i^k = sum_j alpha_ij W^k x_j``;
    the heads are concatenated (``concat=True``, [N, h d]) or averaged ([N, d]),
    then the bias is added.  ``d`` is ``out_features``.  ``dropout`` drops
    attention weights while training.  Parameters as PyG's ``GATConv``: ``lin``
    (W of every head, no bias, [h d, F_in]), ``att_src``, ``att_dst`` [1, h, d], ``bias``.

    ``forward(x [N, F_in] (dense or sparse), edge_index [2, E], return_attention=False)``
    is the sparse form; ``forward_dense(x [N, F_in], adj [N, N] bool, return_attention=False)``
    the dense one.  With ``return_attention`` both also return the weights:
    ``(edge_index [2, E'], alpha [E', h])`` (the edges used, self-loops
    included) and ``alpha [h, N, N]`` (row ``i`` over sources ``j``).
    ``forward(..., num_targets=T)`` computes the outputs of the first ``T``
    nodes only ([T, ...]; self-loops for those only), when every edge ends at
    one of them: the inner layers of a receptive field
    (:func:`course_lib.gat_training.receptive_field`) need no more.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        heads: int = 1,
        *,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__(
            in_features, out_features, heads, concat, negative_slope, dropout, add_self_loops, bias
        )
        self.lin = nn.Linear(in_features, heads * out_features, bias=False)  # W  [h d, F_in]
        self.att_src = nn.Parameter(torch.empty(1, heads, out_features))  # a_src  [1, h, d]
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_features))  # a_dst  [1, h, d]
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``W x`` [N, h, d] and the scores' two halves ``a_src . W x``, ``a_dst . W x`` [N, h]."""
        _check_x(type(self).__name__, x, self.in_features)
        wx = sparse.linear(x, self.lin.weight).view(-1, self.heads, self.out_features)
        return wx, (wx * self.att_src).sum(-1), (wx * self.att_dst).sum(-1)

    def forward(
        self, x: Tensor, edge_index: Tensor, return_attention: bool = False, *, num_targets=None
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        num_nodes = x.shape[0]
        n_out = num_nodes if num_targets is None else num_targets  # T: the nodes given an output
        wx, score_src, score_dst = self._project(x)  # W x, a_src . W x_j, a_dst . W x_i
        edges = self._edges_used(edge_index, num_nodes, n_out)
        src, dst = edges
        # (14.2) e_ij = LeakyReLU(a_src . W x_j + a_dst . W x_i) on each edge j -> i    [E, h]
        e = F.leaky_relu(
            score_src.index_select(0, src) + score_dst.index_select(0, dst), self.negative_slope
        )
        alpha = segment_softmax(e, dst, n_out)  # (14.3)                              [E, h]
        alpha_dropped = sparse.dropout(alpha, self.dropout, self.training)
        messages = wx.index_select(0, src) * alpha_dropped.unsqueeze(-1)  # alpha_ij W x_j [E, h, d]
        out = wx.new_zeros(n_out, *wx.shape[1:]).index_add_(0, dst, messages)  # (14.4) [T, h, d]
        out = self._combine(out)
        return (out, (edges, alpha)) if return_attention else out

    def forward_dense(
        self, x: Tensor, adj: Tensor, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        num_nodes = x.shape[0]
        adj = self._adjacency_used(adj, num_nodes)
        wx, score_src, score_dst = self._project(x)
        # (14.2) e[k, i, j] = LeakyReLU(a_dst . W x_i + a_src . W x_j)           [h, N, N]
        e = F.leaky_relu(score_dst.T[:, :, None] + score_src.T[:, None, :], self.negative_slope)
        alpha = masked_softmax(e, adj)  # (14.3); a row with no neighbour: zeros    [h, N, N]
        alpha_dropped = sparse.dropout(alpha, self.dropout, self.training)
        out = (alpha_dropped @ wx.transpose(0, 1)).transpose(0, 1)  # (14.4)         [N, h, d]
        out = self._combine(out)
        return (out, alpha) if return_attention else out


class GATv2Layer(_AttentionLayer):
    """GATv2 (Brody et al., 2022), eq. (14.5): ``e_ij = a . LeakyReLU(W_dst x_i + W_src x_j)``.

    The messages are ``W_src x_j``; the rest (heads, softmax, self-loops, dropout,
    both forms, ``return_attention``) is as in :class:`GATLayer`.  Parameters as
    PyG's ``GATv2Conv`` (``share_weights=False``): ``lin_l`` (W_src, with bias),
    ``lin_r`` (W_dst, with bias), ``att`` [1, h, d], ``bias``.  The dense form
    builds an [N, N, h, d] tensor: for small graphs only.  ``num_targets`` as in
    :class:`GATLayer`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        heads: int = 1,
        *,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__(
            in_features, out_features, heads, concat, negative_slope, dropout, add_self_loops, bias
        )
        self.lin_l = nn.Linear(in_features, heads * out_features, bias=bias)  # W_src
        self.lin_r = nn.Linear(in_features, heads * out_features, bias=bias)  # W_dst
        self.att = nn.Parameter(torch.empty(1, heads, out_features))  # a  [1, h, d]
        nn.init.xavier_uniform_(self.lin_l.weight)
        nn.init.xavier_uniform_(self.lin_r.weight)
        nn.init.xavier_uniform_(self.att)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``W_src x`` and ``W_dst x``, [N, h, d] each (one product with both weights stacked)."""
        _check_x(type(self).__name__, x, self.in_features)
        shape = (-1, self.heads, self.out_features)
        both = sparse.linear(x, torch.cat([self.lin_l.weight, self.lin_r.weight]))  # [N, 2 h d]
        x_src, x_dst = both.split(self.heads * self.out_features, dim=1)
        if self.lin_l.bias is not None:
            x_src, x_dst = x_src + self.lin_l.bias, x_dst + self.lin_r.bias
        return x_src.reshape(shape), x_dst.reshape(shape)

    def forward(
        self, x: Tensor, edge_index: Tensor, return_attention: bool = False, *, num_targets=None
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        num_nodes = x.shape[0]
        n_out = num_nodes if num_targets is None else num_targets  # T: the nodes given an output
        x_src, x_dst = self._project(x)
        edges = self._edges_used(edge_index, num_nodes, n_out)
        src, dst = edges
        x_j = x_src.index_select(0, src)  # W_src x_j                                  [E, h, d]
        activated = F.leaky_relu(x_j + x_dst.index_select(0, dst), self.negative_slope)  # [E,h,d]
        e = (activated * self.att).sum(-1)  # (14.5)                                   [E, h]
        alpha = segment_softmax(e, dst, n_out)
        alpha_dropped = sparse.dropout(alpha, self.dropout, self.training)
        messages = x_j * alpha_dropped.unsqueeze(-1)  # alpha_ij W_src x_j             [E, h, d]
        out = x_src.new_zeros(n_out, *x_src.shape[1:]).index_add_(0, dst, messages)
        out = self._combine(out)
        return (out, (edges, alpha)) if return_attention else out

    def forward_dense(
        self, x: Tensor, adj: Tensor, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        num_nodes = x.shape[0]
        adj = self._adjacency_used(adj, num_nodes)
        x_src, x_dst = self._project(x)
        activated = F.leaky_relu(x_dst[:, None] + x_src[None, :], self.negative_slope)  # [N,N,h,d]
        e = (activated * self.att).sum(-1).permute(2, 0, 1)  # (14.5)                 [h, N, N]
        alpha = masked_softmax(e, adj)
        alpha_dropped = sparse.dropout(alpha, self.dropout, self.training)
        out = (alpha_dropped @ x_src.transpose(0, 1)).transpose(0, 1)  #              [N, h, d]
        out = self._combine(out)
        return (out, alpha) if return_attention else out


# ---------------------------------------------------------------------------
# Two-layer node classifiers
# ---------------------------------------------------------------------------


class MLP(nn.Module):
    """Two linear layers that ignore the graph: ``forward(x, edge_index) -> logits [N, K]``."""

    def __init__(self, in_features: int, hidden: int, num_classes: int, dropout: float = 0.5):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(in_features, hidden), nn.Linear(hidden, num_classes)
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor | None = None) -> Tensor:
        x = sparse.dropout(x, self.dropout, self.training)
        x = F.relu(sparse.linear(x, self.lin1.weight, self.lin1.bias))
        return self.lin2(sparse.dropout(x, self.dropout, self.training))


class GCN(nn.Module):
    """Kipf & Welling's two-layer GCN (ReLU, dropout): ``forward(x, edge_index) -> [N, K]``."""

    def __init__(self, in_features: int, hidden: int, num_classes: int, dropout: float = 0.5):
        super().__init__()
        self.conv1, self.conv2 = GCNLayer(in_features, hidden), GCNLayer(hidden, num_classes)
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = F.relu(self.conv1(sparse.dropout(x, self.dropout, self.training), edge_index))
        return self.conv2(sparse.dropout(x, self.dropout, self.training), edge_index)


class GAT(nn.Module):
    """The transductive GAT of the paper (Cora: 8 heads of 8 units, ELU, dropout 0.6).

    ``dropout -> layer(F_in, d=hidden, h=heads, concat) -> ELU -> dropout ->
    layer(h d, K, out_heads, averaged)``, the same dropout on the attention
    weights of both layers.  ``layer`` is :class:`GATLayer` (the paper) or
    :class:`GATv2Layer`.  ``forward(x [N, F_in] dense or sparse, edge_index
    [2, E], dense=False) -> logits [N, K]``; with ``dense=True``,
    ``edge_index`` is replaced by a bool adjacency [N, N] and both layers use
    their dense form.  ``edge_index`` may also be a pair ``(edges of layer 1,
    edges of layer 2)``, each [2, E_l]: a receptive field
    (:func:`course_lib.gat_training.receptive_field`) gives each layer only the
    edges into the nodes whose outputs are needed, and ``num_targets`` (a pair
    ``(T_1, T_2)``, its ``num_targets``) how many of its first nodes those are:
    the logits are then [T_2, K].
    """

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        hidden: int = 8,
        heads: int = 8,
        out_heads: int = 1,
        dropout: float = 0.6,
        *,
        layer: type[GATLayer] | type[GATv2Layer] = GATLayer,
    ) -> None:
        super().__init__()
        if not (isinstance(layer, type) and issubclass(layer, _AttentionLayer)):
            raise ValueError(f"GAT: layer must be GATLayer or GATv2Layer, got {layer!r}")
        self.conv1 = layer(in_features, hidden, heads, dropout=dropout)
        self.conv2 = layer(heads * hidden, num_classes, out_heads, concat=False, dropout=dropout)
        self.dropout = dropout

    def forward(
        self, x: Tensor, edge_index: Tensor, dense: bool = False, *, num_targets=None
    ) -> Tensor:
        if dense and num_targets is not None:
            raise ValueError("GAT: num_targets needs the sparse form (dense=False)")
        x = sparse.dropout(x, self.dropout, self.training)
        if dense:  # the dense form's first product takes sparse features too
            x = F.elu(self.conv1.forward_dense(x, edge_index))
            x = sparse.dropout(x, self.dropout, self.training)
            return self.conv2.forward_dense(x, edge_index)
        first, second = edge_index if isinstance(edge_index, tuple | list) else (edge_index,) * 2
        t1, t2 = (None, None) if num_targets is None else num_targets
        x = sparse.dropout(F.elu(self.conv1(x, first, num_targets=t1)), self.dropout, self.training)
        return self.conv2(x, second, num_targets=t2)
