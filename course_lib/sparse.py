"""Sparse node features for the first layer of a node classifier (Chapter 14).

Cora's 1433 bag-of-words features are 99% zeros, so the first layer's ``x W^T``
is a sparse-dense product.  Shapes: ``N`` nodes, ``F_in`` input features.

* :class:`SparseFeatures` holds ``x`` [N, F_in] and its transpose in CSR form.
  The backward pass of ``x W^T`` needs ``grad_W = grad^T x``, a product with
  ``x^T``; PyTorch's own sparse backward rebuilds ``x^T`` (a sort) on every
  step, this class builds it once.
* :func:`linear` computes ``x W^T + b`` for a dense tensor, a sparse COO tensor
  or :class:`SparseFeatures`; on the latter its backward uses the stored ``x^T``.
* :func:`dropout` is inverted dropout for all three; on sparse features it
  drops the stored values only, which is the same as dropping entries of the
  dense matrix (a dropped zero stays zero).

The layers of :mod:`course_lib.gat` call :func:`linear` and :func:`dropout`, so
every model there accepts any of the three forms of ``x``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

from course_lib.shapes import expect_shape

__all__ = ["SparseFeatures", "linear", "dropout"]


@contextmanager
def _building_csr() -> Iterator[None]:
    """Build sparse tensors from parts we know are valid, without PyTorch's notices.

    * The "beta" notice PyTorch prints when it builds a sparse CSR tensor is
      silenced (the CSR operations used here are checked in ``tests/test_sparse.py``).
    * Every sparse tensor built here takes its indices from a tensor PyTorch built
      and checked itself, so its invariant checks are turned off *explicitly*,
      for these constructions only: left at its default, the global setting makes
      recent PyTorch (2.11 on) warn "Sparse invariant checks are implicitly
      disabled" on the first construction, even with ``check_invariants=False``.
    """
    with warnings.catch_warnings(), torch.sparse.check_sparse_tensor_invariants(enable=False):
        warnings.filterwarnings(
            "ignore", message="Sparse CSR tensor support is in beta", category=UserWarning
        )
        yield


def _csr(like: Tensor, values: Tensor) -> Tensor:
    """A CSR tensor with the sparsity pattern of ``like`` and the stored ``values``."""
    with _building_csr():
        return torch.sparse_csr_tensor(
            like.crow_indices(), like.col_indices(), values, like.shape, check_invariants=False
        )


class SparseFeatures:
    """A sparse node-feature matrix ``x`` [N, F_in] kept for a fast first layer.

    It stores ``x`` and ``x^T`` [F_in, N] in CSR form, so the backward pass of
    :func:`linear` need not build ``x^T`` on every step, and the permutation
    ``perm`` that puts ``x``'s stored values in ``x^T``'s order, so a copy with
    new values (after :func:`dropout`) costs one gather.  Build it with
    ``SparseFeatures(x)`` from a dense or sparse tensor; ``.to(device)``,
    ``.to_dense()``, ``.shape``.
    """

    def __init__(self, x: Tensor, *, _parts: tuple[Tensor, Tensor, Tensor] | None = None) -> None:
        if _parts is None:
            expect_shape("SparseFeatures", "x", x, [("N", None), ("F_in", None)])
            x = x.to_dense() if x.layout != torch.strided else x
            rows, cols = x.nonzero().T  # the stored entries, row-major like the CSR   [nnz] each
            perm = torch.argsort(cols * x.shape[0] + rows)  # column-major: x^T's row-major
            with _building_csr():
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
        parts = (_csr(self.csr, values), _csr(self.csr_t, values[self.perm]), self.perm)
        return SparseFeatures(None, _parts=parts)

    def to(self, device: torch.device | str) -> SparseFeatures:
        with _building_csr():
            parts = tuple(t.to(device) for t in (self.csr, self.csr_t, self.perm))
        return SparseFeatures(None, _parts=parts)

    def to_dense(self) -> Tensor:
        return self.csr.to_dense()

    def rows(self, index: Tensor) -> SparseFeatures:
        """The rows ``index`` [M] of ``x``, as new features [M, F_in] (e.g. a receptive field's nodes)."""
        return SparseFeatures(self.to_dense().index_select(0, index.to(self.device)))

    # Pickling (a worker process of course_lib.gat_training.fit_seeds receives the features):
    # send plain tensors and rebuild the CSR tensors here, where the notice is silenced.
    def __getstate__(self) -> dict:
        def parts(m: Tensor) -> tuple:
            return m.crow_indices(), m.col_indices(), m.values(), m.shape

        return {"csr": parts(self.csr), "csr_t": parts(self.csr_t), "perm": self.perm}

    def __setstate__(self, state: dict) -> None:
        with _building_csr():
            self.csr, self.csr_t = (
                torch.sparse_csr_tensor(*state[name], check_invariants=False)
                for name in ("csr", "csr_t")
            )
        self.perm = state["perm"]

    def __repr__(self) -> str:
        n, f = self.shape
        return f"SparseFeatures([{n}, {f}], nnz={self.perm.numel()}, device={self.device})"


class _SparseLinear(torch.autograd.Function):
    """``x W^T`` for :class:`SparseFeatures` ``x``; the backward uses the stored ``x^T``."""

    @staticmethod
    def forward(ctx, x_csr: Tensor, x_t_csr: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(x_t_csr)
        return x_csr @ weight.T  # [N, F_in] @ [F_in, out_features] -> [N, out_features]

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[None, None, Tensor]:
        (x_t_csr,) = ctx.saved_tensors
        return None, None, (x_t_csr @ grad).T  # grad_W = (x^T grad)^T   [out_features, F_in]


def linear(x: Tensor | SparseFeatures, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x W^T + b`` for ``x`` [N, F_in] dense, sparse COO or :class:`SparseFeatures`.

    ``weight`` is [out_features, F_in] as in ``nn.Linear``; returns [N, out_features].
    """
    if isinstance(x, SparseFeatures):
        out = _SparseLinear.apply(x.csr, x.csr_t, weight)
    elif x.layout != torch.strided:
        out = torch.sparse.mm(x, weight.t())
    else:
        out = F.linear(x, weight)
    return out if bias is None else out + bias


def dropout(x: Tensor | SparseFeatures, p: float, training: bool = True) -> Tensor | SparseFeatures:
    """Inverted dropout: zero each entry with probability ``p``, scale the rest by ``1 / (1 - p)``.

    The same distribution as ``F.dropout``, drawn with ``torch.rand`` (on the
    CPU, faster than the Bernoulli sampler ``F.dropout`` uses).  On sparse
    features (:class:`SparseFeatures` or a sparse COO tensor) only the stored
    values are dropped, which is the same as dropping entries of the dense
    matrix: a dropped zero stays zero.
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
        with _building_csr():
            return torch.sparse_coo_tensor(
                x.indices(), values, x.shape, is_coalesced=True, check_invariants=False
            )
    if x.layout != torch.strided:
        raise ValueError(f"dropout: use SparseFeatures(x) for a {x.layout} tensor")
    if p == 1.0:
        return torch.zeros_like(x)
    keep = (torch.rand_like(x) >= p).to(x.dtype)  # in x's dtype: bool * float would be float32
    return x * (keep * (1.0 / (1.0 - p)))
