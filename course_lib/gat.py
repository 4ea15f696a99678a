"""Graph attention: GCN, GAT and GATv2 layers, dense and sparse (Chapter 14).

Equation numbers refer to Chapter 14.  ``N`` nodes, ``E`` directed edges,
``F`` input features, ``h`` heads, ``C`` features per head, ``K`` classes.
An edge list ``edge_index`` [2, E] holds (source ``j``, target ``i``) pairs, the
layout of PyTorch Geometric and of :class:`course_lib.data.Graph`: a message
flows from ``edge_index[0]`` to ``edge_index[1]``, and node ``i``'s neighbourhood
``N(i)`` is the set of sources of the edges that end at ``i``.

* (14.1) GCN (Kipf & Welling, 2017): ``h_i = sum_{j in N(i) + i} x_j W / sqrt(d_i d_j) + b``
  with ``d`` the degree counting the self-loop (:class:`GCNLayer`).
* (14.2) GAT (Velickovic et al., 2018): ``e_ij = LeakyReLU(a_dst . W x_i + a_src . W x_j)``,
  (14.3) ``alpha_ij = softmax_{j in N(i)} e_ij``, (14.4) ``h_i = sum_j alpha_ij W x_j``,
  one ``(W, a)`` per head; heads concatenated (hidden layers) or averaged (the
  output layer) (:class:`GATLayer`).
* (14.5) GATv2 (Brody et al., 2022): ``e_ij = a . LeakyReLU(W_dst x_i + W_src x_j)``, the
  non-linearity *before* the dot product, so the ranking of neighbours can depend
  on the query node ("dynamic" attention) (:class:`GATv2Layer`).

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
  lists (:func:`coalesce` removes duplicates, as :func:`course_lib.data.cora`
  already does).

Sparse inputs: ``x`` may be :class:`SparseFeatures` (the fast form, built once
from a tensor; Cora's bag-of-words features are 99% zeros) or a sparse COO
tensor; the first linear map is then a sparse-dense product and
:func:`dropout` drops the stored values.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm, trange

from course_lib.attention import masked_softmax
from course_lib.runtime import seed_everything

# PyTorch prints a "beta" notice for each sparse CSR tensor (the layout of
# SparseFeatures); the operations used here are checked in tests/test_gat.py.
warnings.filterwarnings(
    "ignore", message="Sparse CSR tensor support is in beta", category=UserWarning
)

__all__ = [
    "add_self_loops",
    "coalesce",
    "to_dense_adjacency",
    "segment_softmax",
    "SparseFeatures",
    "dropout",
    "GCNLayer",
    "GATLayer",
    "GATv2Layer",
    "MLP",
    "GCN",
    "GAT",
    "FitResult",
    "fit_node_classifier",
    "fit_seeds",
    "accuracy",
]


# ---------------------------------------------------------------------------
# Edge lists
# ---------------------------------------------------------------------------


def _check_edges(where: str, edge_index: Tensor, num_nodes: int) -> None:
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        shape = list(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index)
        raise ValueError(f"{where}: edge_index must be [2, E], got {shape}")
    if edge_index.dtype != torch.long:
        raise ValueError(f"{where}: edge_index must be int64, got {edge_index.dtype}")
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise ValueError(f"{where}: edge_index holds node ids outside 0..{num_nodes - 1}")


def _check_x(where: str, x: Tensor, in_features: int) -> None:
    ok = isinstance(x, (Tensor, SparseFeatures))
    if not ok or x.dim() != 2 or x.shape[1] != in_features:
        shape = list(x.shape) if ok else type(x).__name__
        raise ValueError(f"{where}: x must be [N, F={in_features}], got {shape}")


def add_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Remove any self-loop from ``edge_index`` [2, E], then append ``(i, i)`` for every node.

    Returns [2, E' + N] where E' is the number of non-loop edges (duplicates kept).
    """
    _check_edges("add_self_loops", edge_index, num_nodes)
    keep = edge_index[0] != edge_index[1]
    loops = torch.arange(num_nodes, device=edge_index.device).expand(2, num_nodes)
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
    if index.dim() != 1 or index.shape[0] != scores.shape[0]:
        raise ValueError(
            f"segment_softmax: index must be [E={scores.shape[0]}], got {list(index.shape)}"
        )
    idx = index.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    init = torch.full(
        (num_nodes, *scores.shape[1:]), float("-inf"), dtype=scores.dtype, device=scores.device
    )
    node_max = init.scatter_reduce(0, idx, scores.detach(), "amax")  # m_i          [N, ...]
    ex = torch.exp(scores - node_max.index_select(0, index))  # exp(s_e - m_i) <= 1  [E, ...]
    denom = torch.zeros_like(node_max).index_add_(0, index, ex)  # sum over e -> i  [N, ...]
    return ex / denom.index_select(0, index)


class SparseFeatures:
    """A sparse node-feature matrix ``x`` [N, F] kept for a fast first layer.

    Cora's 1433 bag-of-words features are 99% zeros, so the first layer's
    ``x W^T`` is a sparse-dense product.  Its backward pass needs
    ``grad_W = grad^T x``, a product with ``x^T``.  PyTorch's own sparse backward
    rebuilds ``x^T`` by sorting on every step; this class builds it once, which
    makes the first layer's forward and backward 3 times faster on Cora (1.4 ms
    against 4.3 ms, one CPU thread).  It stores ``x`` and ``x^T`` [F, N] in CSR
    form and the permutation ``perm`` that puts ``x``'s stored values in
    ``x^T``'s order, so a copy with new values (after :func:`dropout`) costs one
    gather.  Build it with ``SparseFeatures(x)`` from a
    dense or sparse tensor; ``.to(device)``, ``.to_dense()``, ``.shape``.
    """

    def __init__(self, x: Tensor, *, _parts: tuple[Tensor, Tensor, Tensor] | None = None) -> None:
        if _parts is None:
            if not isinstance(x, Tensor) or x.dim() != 2:
                shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"SparseFeatures: x must be a 2-d tensor [N, F], got {shape}")
            x = x.to_dense() if x.layout != torch.strided else x
            rows, cols = x.nonzero().T  # the stored entries, row-major like the CSR   [nnz] each
            perm = torch.argsort(cols * x.shape[0] + rows)  # column-major: x^T's row-major
            _parts = (x.to_sparse_csr(), x.T.to_sparse_csr(), perm)
        self.csr, self.csr_t, self.perm = _parts

    @property
    def shape(self) -> torch.Size:
        return self.csr.shape

    @property
    def device(self) -> torch.device:
        return self.csr.device

    @property
    def dtype(self) -> torch.dtype:
        return self.csr.dtype

    def dim(self) -> int:
        return 2

    def values(self) -> Tensor:
        """The stored values, in row-major order [nnz]."""
        return self.csr.values()

    def with_values(self, values: Tensor) -> SparseFeatures:
        """The same sparsity pattern holding ``values`` [nnz] (row-major order)."""

        def csr(m: Tensor, v: Tensor) -> Tensor:
            return torch.sparse_csr_tensor(
                m.crow_indices(), m.col_indices(), v, m.shape, check_invariants=False
            )

        parts = (csr(self.csr, values), csr(self.csr_t, values[self.perm]), self.perm)
        return SparseFeatures(None, _parts=parts)

    def to(self, device) -> SparseFeatures:
        return SparseFeatures(
            None, _parts=tuple(t.to(device) for t in (self.csr, self.csr_t, self.perm))
        )

    def to_dense(self) -> Tensor:
        return self.csr.to_dense()

    def __repr__(self) -> str:
        n, f = self.shape
        return f"SparseFeatures([{n}, {f}], nnz={self.perm.numel()}, device={self.device})"


class _SparseLinear(torch.autograd.Function):
    """``x W^T`` for :class:`SparseFeatures` ``x``; the backward uses the stored ``x^T``."""

    @staticmethod
    def forward(ctx, x_csr: Tensor, x_t_csr: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(x_t_csr)
        return x_csr @ weight.T  # [N, F] @ [F, C] -> [N, C]

    @staticmethod
    def backward(ctx, grad: Tensor):
        (x_t_csr,) = ctx.saved_tensors
        return None, None, (x_t_csr @ grad).T  # grad_W = (x^T grad)^T          [C, F]


def dropout(x: Tensor | SparseFeatures, p: float, training: bool = True) -> Tensor | SparseFeatures:
    """Inverted dropout: zero each entry with probability ``p``, scale the rest by ``1 / (1 - p)``.

    The same distribution as ``F.dropout``, drawn from ``torch.rand``, which on
    the CPU is about twice as fast as the Bernoulli sampler ``F.dropout`` uses
    (measured while building Chapter 14, which trains 40 models on Cora).  On
    sparse features (:class:`SparseFeatures` or a sparse COO tensor) only the
    stored values are dropped, which is the same as dropping entries of the
    dense matrix: a dropped zero stays zero.
    """
    if not training or p == 0.0:
        return x
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if isinstance(x, SparseFeatures):
        return x.with_values(dropout(x.values(), p))
    if x.layout == torch.sparse_coo:
        x = x.coalesce()
        values = dropout(x.values(), p)
        return torch.sparse_coo_tensor(
            x.indices(), values, x.shape, is_coalesced=True, check_invariants=False
        )
    if x.layout != torch.strided:
        raise ValueError(f"dropout: use SparseFeatures(x) for a {x.layout} tensor")
    if p == 1.0:
        return torch.zeros_like(x)
    return x * ((torch.rand_like(x) >= p) * (1.0 / (1.0 - p)))


def _linear(x: Tensor | SparseFeatures, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x W^T + b`` for a dense tensor, a sparse COO tensor or :class:`SparseFeatures` ``x`` [N, F]."""
    if isinstance(x, SparseFeatures):
        out = _SparseLinear.apply(x.csr, x.csr_t, weight)
    elif x.layout != torch.strided:
        out = torch.sparse.mm(x, weight.t())
    else:
        out = F.linear(x, weight)
    return out if bias is None else out + bias


# ---------------------------------------------------------------------------
# GCN
# ---------------------------------------------------------------------------


class GCNLayer(nn.Module):
    """A graph convolution, eq. (14.1): ``h_i = b + sum_{j in N(i) + i} x_j W / sqrt(d_i d_j)``.

    ``d_i`` is 1 + the number of edges into ``i`` (self-loops are removed and
    one is added per node, as in :func:`add_self_loops`).  Parameters as PyG's
    ``GCNConv``: ``lin`` (no bias), ``bias``.  ``forward(x [N, F], edge_index
    [2, E]) -> [N, C]``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.lin = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        _check_x("GCNLayer", x, self.in_features)
        n = x.shape[0]
        ei = add_self_loops(edge_index, n)
        src, dst = ei
        deg = torch.zeros(n, device=x.device).index_add_(
            0, dst, torch.ones_like(dst, dtype=x.dtype)
        )
        inv_sqrt = deg.rsqrt()
        norm = inv_sqrt[src] * inv_sqrt[dst]  # 1 / sqrt(d_i d_j)                    [E]
        xw = _linear(x, self.lin.weight)  # x W                                      [N, C]
        out = torch.zeros_like(xw).index_add_(0, dst, xw.index_select(0, src) * norm[:, None])
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
        """[N, h, C] -> [N, h C] (concatenate) or [N, C] (average), plus the bias."""
        out = out.flatten(1) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias

    def _edges(self, edge_index: Tensor, n: int) -> Tensor:
        return add_self_loops(edge_index, n) if self.add_self_loops else edge_index

    def _adjacency(self, adj: Tensor, n: int) -> Tensor:
        if adj.shape != (n, n) or adj.dtype != torch.bool:
            raise ValueError(
                f"{type(self).__name__}: adj must be a bool [N={n}, N] matrix, "
                f"got {adj.dtype} {list(adj.shape)}"
            )
        if self.add_self_loops:
            adj = adj | torch.eye(n, dtype=torch.bool, device=adj.device)
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
    the heads are concatenated (``concat=True``, [N, h C]) or averaged ([N, C]),
    then the bias is added.  ``dropout`` drops attention weights while training.
    Parameters as PyG's ``GATConv``: ``lin`` (W of every head, no bias, [h C, F]),
    ``att_src``, ``att_dst`` [1, h, C], ``bias``.

    ``forward(x [N, F] (dense or sparse COO), edge_index [2, E], return_attention=False)``
    is the sparse form; ``forward_dense(x [N, F], adj [N, N] bool, return_attention=False)``
    the dense one.  With ``return_attention`` both also return the weights:
    ``(edge_index [2, E'], alpha [E', h])`` (the edges used, self-loops
    included) and ``alpha [h, N, N]`` (row ``i`` over sources ``j``).
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
        self.lin = nn.Linear(in_features, heads * out_features, bias=False)  # W  [h C, F]
        self.att_src = nn.Parameter(torch.empty(1, heads, out_features))  # a_src  [1, h, C]
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_features))  # a_dst  [1, h, C]
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        _check_x(type(self).__name__, x, self.in_features)
        wx = _linear(x, self.lin.weight).view(-1, self.heads, self.out_features)  # [N, h, C]
        return wx, (wx * self.att_src).sum(-1), (wx * self.att_dst).sum(-1)  # [N, h] each

    def forward(self, x: Tensor, edge_index: Tensor, return_attention: bool = False):
        n = x.shape[0]
        _check_edges("GATLayer", edge_index, n)
        wx, s_src, s_dst = self._project(x)  # W x, a_src . W x_j, a_dst . W x_i
        ei = self._edges(edge_index, n)
        src, dst = ei
        # (14.2) e_ij = LeakyReLU(a_src . W x_j + a_dst . W x_i) on each edge j -> i    [E, h]
        e = F.leaky_relu(
            s_src.index_select(0, src) + s_dst.index_select(0, dst), self.negative_slope
        )
        alpha = segment_softmax(e, dst, n)  # (14.3)                                  [E, h]
        drop = dropout(alpha, self.dropout, self.training)
        msg = wx.index_select(0, src) * drop.unsqueeze(-1)  # alpha_ij W x_j            [E, h, C]
        out = torch.zeros_like(wx).index_add_(0, dst, msg)  # (14.4) sum over j       [N, h, C]
        out = self._combine(out)
        return (out, (ei, alpha)) if return_attention else out

    def forward_dense(self, x: Tensor, adj: Tensor, return_attention: bool = False):
        n = x.shape[0]
        adj = self._adjacency(adj, n)
        wx, s_src, s_dst = self._project(x)
        # (14.2) e[k, i, j] = LeakyReLU(a_dst . W x_i + a_src . W x_j)           [h, N, N]
        e = F.leaky_relu(s_dst.T[:, :, None] + s_src.T[:, None, :], self.negative_slope)
        alpha = masked_softmax(e, adj)  # (14.3); a row with no neighbour: zeros    [h, N, N]
        drop = dropout(alpha, self.dropout, self.training)
        out = (drop @ wx.transpose(0, 1)).transpose(0, 1)  # (14.4)                  [N, h, C]
        out = self._combine(out)
        return (out, alpha) if return_attention else out


class GATv2Layer(_AttentionLayer):
    """GATv2 (Brody et al., 2022), eq. (14.5): ``e_ij = a . LeakyReLU(W_dst x_i + W_src x_j)``.

    The messages are ``W_src x_j``; the rest (heads, softmax, self-loops, dropout,
    both forms, ``return_attention``) is as in :class:`GATLayer`.  Parameters as
    PyG's ``GATv2Conv`` (``share_weights=False``): ``lin_l`` (W_src, with bias),
    ``lin_r`` (W_dst, with bias), ``att`` [1, h, C], ``bias``.  The dense form
    builds an [N, N, h, C] tensor: for small graphs only.
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
        self.att = nn.Parameter(torch.empty(1, heads, out_features))  # a  [1, h, C]
        nn.init.xavier_uniform_(self.lin_l.weight)
        nn.init.xavier_uniform_(self.lin_r.weight)
        nn.init.xavier_uniform_(self.att)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor]:
        _check_x("GATv2Layer", x, self.in_features)
        shape = (-1, self.heads, self.out_features)
        x_src = _linear(x, self.lin_l.weight, self.lin_l.bias).view(shape)  # W_src x  [N, h, C]
        x_dst = _linear(x, self.lin_r.weight, self.lin_r.bias).view(shape)  # W_dst x  [N, h, C]
        return x_src, x_dst

    def forward(self, x: Tensor, edge_index: Tensor, return_attention: bool = False):
        n = x.shape[0]
        _check_edges("GATv2Layer", edge_index, n)
        x_src, x_dst = self._project(x)
        ei = self._edges(edge_index, n)
        src, dst = ei
        x_j = x_src.index_select(0, src)  # W_src x_j                                  [E, h, C]
        hidden = F.leaky_relu(x_j + x_dst.index_select(0, dst), self.negative_slope)  # [E, h, C]
        e = (hidden * self.att).sum(-1)  # (14.5)                                      [E, h]
        alpha = segment_softmax(e, dst, n)
        drop = dropout(alpha, self.dropout, self.training)
        out = torch.zeros_like(x_src).index_add_(0, dst, x_j * drop.unsqueeze(-1))
        out = self._combine(out)
        return (out, (ei, alpha)) if return_attention else out

    def forward_dense(self, x: Tensor, adj: Tensor, return_attention: bool = False):
        n = x.shape[0]
        adj = self._adjacency(adj, n)
        x_src, x_dst = self._project(x)
        hidden = F.leaky_relu(x_dst[:, None] + x_src[None, :], self.negative_slope)  # [N,N,h,C]
        e = (hidden * self.att).sum(-1).permute(2, 0, 1)  # (14.5)                    [h, N, N]
        alpha = masked_softmax(e, adj)
        drop = dropout(alpha, self.dropout, self.training)
        out = (drop @ x_src.transpose(0, 1)).transpose(0, 1)  # [N, h, C]
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
        x = dropout(x, self.dropout, self.training)
        x = F.relu(_linear(x, self.lin1.weight, self.lin1.bias))
        return self.lin2(dropout(x, self.dropout, self.training))


class GCN(nn.Module):
    """Kipf & Welling's two-layer GCN (ReLU, dropout): ``forward(x, edge_index) -> [N, K]``."""

    def __init__(self, in_features: int, hidden: int, num_classes: int, dropout: float = 0.5):
        super().__init__()
        self.conv1, self.conv2 = GCNLayer(in_features, hidden), GCNLayer(hidden, num_classes)
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = F.relu(self.conv1(dropout(x, self.dropout, self.training), edge_index))
        return self.conv2(dropout(x, self.dropout, self.training), edge_index)


class GAT(nn.Module):
    """The transductive GAT of the paper (Cora: 8 heads of 8 units, ELU, dropout 0.6).

    ``dropout -> GAT(F, C, h heads, concat) -> ELU -> dropout -> GAT(h C, K,
    out_heads, averaged)``, the same dropout on the attention weights of both
    layers.  ``v2=True`` uses :class:`GATv2Layer`.  ``forward(x [N, F] dense or
    sparse, edge_index [2, E], dense=False) -> logits [N, K]``; with
    ``dense=True``, ``edge_index`` is replaced by a bool adjacency [N, N] and
    both layers use their dense form.
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
        v2: bool = False,
    ) -> None:
        super().__init__()
        layer = GATv2Layer if v2 else GATLayer
        self.conv1 = layer(in_features, hidden, heads, dropout=dropout)
        self.conv2 = layer(heads * hidden, num_classes, out_heads, concat=False, dropout=dropout)
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, dense: bool = False) -> Tensor:
        x = dropout(x, self.dropout, self.training)
        if dense:
            if isinstance(x, SparseFeatures) or x.layout != torch.strided:
                x = x.to_dense()
            x = dropout(F.elu(self.conv1.forward_dense(x, edge_index)), self.dropout, self.training)
            return self.conv2.forward_dense(x, edge_index)
        x = dropout(F.elu(self.conv1(x, edge_index)), self.dropout, self.training)
        return self.conv2(x, edge_index)


# ---------------------------------------------------------------------------
# Full-batch training with the paper's early stopping
# ---------------------------------------------------------------------------


def accuracy(logits: Tensor, y: Tensor, mask: Tensor) -> float:
    """Fraction of the nodes in ``mask`` whose arg-max logit is their label."""
    return (logits[mask].argmax(-1) == y[mask]).float().mean().item()


@dataclass
class FitResult:
    """What :func:`fit_node_classifier` returns (accuracies in [0, 1])."""

    test_acc: float
    val_acc: float
    best_epoch: int
    epochs: int
    seconds: float
    history: dict[str, list[float]] = field(default_factory=dict)


def fit_node_classifier(
    model: nn.Module,
    x: Tensor,
    edge_index: Tensor,
    y: Tensor,
    masks: tuple[Tensor, Tensor, Tensor],
    *,
    lr: float = 0.005,
    weight_decay: float = 5e-4,
    max_epochs: int = 1000,
    patience: int | None = 100,
    progress: bool = True,
    desc: str = "training",
) -> FitResult:
    """Full-batch training with Adam (L2 weight decay) and the GAT paper's early stopping.

    ``masks = (train, val, test)``.  Every epoch takes one step on the training
    nodes' cross-entropy, then evaluates the validation loss and accuracy.  As
    in the authors' code, training stops when for ``patience`` epochs neither
    the validation loss has reached a new minimum nor the validation accuracy a
    new maximum (or after ``max_epochs``), and the weights kept for the test are
    those of the last epoch that improved both at once.  With ``patience=None``
    or an empty validation mask, it trains for exactly ``max_epochs`` and keeps
    the last weights.  Returns a :class:`FitResult` with the test accuracy of
    the weights kept.
    """
    train_mask, val_mask, test_mask = masks
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    best_loss, best_acc, wait = float("inf"), 0.0, 0
    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    best_epoch, epoch = 0, 0
    history: dict[str, list[float]] = {"train_loss": [], "val_loss": [], "val_acc": []}
    early = patience is not None and bool(val_mask.any())
    start = time.perf_counter()
    bar = trange(max_epochs, desc=desc, disable=not progress, mininterval=0.5)
    for epoch in bar:
        model.train()
        loss = F.cross_entropy(model(x, edge_index)[train_mask], y[train_mask])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history["train_loss"].append(loss.item())
        if not early:
            best_epoch = epoch
            continue
        model.eval()
        with torch.inference_mode():
            logits = model(x, edge_index)
            val_loss = F.cross_entropy(logits[val_mask], y[val_mask]).item()
            val_acc = accuracy(logits, y, val_mask)
        history["val_loss"].append(val_loss)
        history["val_acc"].append(val_acc)
        if val_acc >= best_acc or val_loss <= best_loss:
            if val_acc >= best_acc and val_loss <= best_loss:
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                best_epoch = epoch
            best_acc, best_loss, wait = max(val_acc, best_acc), min(val_loss, best_loss), 0
        else:
            wait += 1
            if wait == patience:
                break
        if progress and epoch % 20 == 0:
            bar.set_postfix(val_acc=f"{val_acc:.3f}", refresh=False)
    bar.close()
    seconds = time.perf_counter() - start
    if early:
        model.load_state_dict(best_state)
    model.eval()
    with torch.no_grad():
        logits = model(x, edge_index)
    return FitResult(
        test_acc=accuracy(logits, y, test_mask),
        val_acc=accuracy(logits, y, val_mask) if val_mask.any() else float("nan"),
        best_epoch=best_epoch,
        epochs=epoch + 1,
        seconds=seconds,
        history=history,
    )


# ---------------------------------------------------------------------------
# Many seeds, spread over the CPU's cores
# ---------------------------------------------------------------------------

# name: (model class, the model's keyword arguments, fit_node_classifier's keyword arguments)
Setup = tuple[type[nn.Module], dict, dict]
_worker_data: tuple | None = None  # (x, edge_index, y, masks), set in each worker process


def _start_worker(data: tuple, num_threads: int) -> None:
    global _worker_data
    torch.set_num_threads(num_threads)
    _worker_data = data


def _run_one(setup: Setup, seed: int, data: tuple | None = None) -> FitResult:
    """Seed everything with ``seed``, build the model of ``setup`` and train it."""
    x, edge_index, y, masks = data if data is not None else _worker_data
    model_class, model_kwargs, fit_kwargs = setup
    seed_everything(seed)
    model = model_class(**model_kwargs).to(x.device)
    return fit_node_classifier(model, x, edge_index, y, masks, progress=False, **fit_kwargs)


def fit_seeds(
    setups: dict[str, Setup],
    seeds,
    x: Tensor,
    edge_index: Tensor,
    y: Tensor,
    masks: tuple[Tensor, Tensor, Tensor],
    *,
    workers: int | None = None,
    desc: str = "runs",
) -> dict[str, list[FitResult]]:
    """Train each model of ``setups`` once per seed; returns ``{name: [FitResult per seed]}``.

    ``setups`` maps a name to ``(model class, model keyword arguments,
    training keyword arguments)``; run ``(name, seed)`` calls
    :func:`course_lib.seed_everything` with ``seed``, builds the model and
    trains it with :func:`fit_node_classifier` and those training arguments
    (``lr``, ``weight_decay``, ``max_epochs``, ``patience``).

    The runs are independent, so on the CPU they are spread over ``workers``
    processes (default: one per core this process may use, at most 8), which
    share this process's torch threads (at least one each: one, after
    :func:`course_lib.setup_notebook`; two workers with two threads each on two
    cores ran the Cora reproduction more than twice as slowly). Each run seeds
    everything with its own seed, and the wall time falls with the number of
    cores.
    They start in the order of ``setups``, so put the slowest first.  On a GPU,
    or with ``workers=1``, the runs go one after another in this process.
    """
    allowed = {"lr", "weight_decay", "max_epochs", "patience"}
    for name, setup in setups.items():
        ok = isinstance(setup, tuple) and len(setup) == 3 and isinstance(setup[0], type)
        if not ok or not isinstance(setup[1], dict) or not isinstance(setup[2], dict):
            raise ValueError(
                f"fit_seeds: setups[{name!r}] must be (model class, model kwargs dict, "
                f"training kwargs dict), got {setup!r}"
            )
        if set(setup[2]) - allowed:
            raise ValueError(
                f"fit_seeds: setups[{name!r}] has unknown training arguments "
                f"{sorted(set(setup[2]) - allowed)}; allowed: {sorted(allowed)}"
            )
    seeds = list(seeds)
    runs = [(name, seed) for name in setups for seed in seeds]
    data = (x, edge_index, y, masks)
    results: dict[tuple[str, int], FitResult] = {}
    if workers is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        workers = min(cores or 1, 8, len(runs))
    bar = tqdm(total=len(runs), desc=desc)
    if x.device.type != "cpu" or workers <= 1:
        for name, seed in runs:
            results[name, seed] = _run_one(setups[name], seed, data)
            bar.update()
    else:
        # "spawn": a fresh interpreter per worker, safe whatever threads this one runs
        context = multiprocessing.get_context("spawn")
        init = (data, max(1, torch.get_num_threads() // workers))  # no oversubscription
        with ProcessPoolExecutor(workers, context, _start_worker, init) as pool:
            futures = {
                pool.submit(_run_one, setups[name], seed): (name, seed) for name, seed in runs
            }
            try:
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.update()
            except BrokenProcessPool as error:
                raise RuntimeError(
                    "fit_seeds: a worker process died before finishing its run. In a Python "
                    "script, call fit_seeds under `if __name__ == '__main__':` (each worker "
                    "imports the script again); if memory is short, pass workers=1."
                ) from error
    bar.close()
    return {name: [results[name, seed] for seed in seeds] for name in setups}
