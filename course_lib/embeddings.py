"""Token embeddings: lookup, its one-hot form, and static word vectors (Chapter 5).

An embedding table ``E`` is a matrix ``[V, D]``: row ``t`` is the vector of
token ``t``.  Looking a token up (:func:`embedding_lookup`, what
``torch.nn.Embedding`` does) is the product of its one-hot *row* vector with the
table (:func:`one_hot_embedding`), eq. (5.1):

    E[t] = e_t^T E,   e_t in {0, 1}^V,   [1, V] @ [V, D] -> [1, D]

and for a sequence of ``T`` tokens the one-hot rows stack into ``X [T, V]``,
with ``X E`` the ``[T, D]`` matrix of their embeddings, eq. (5.2).

Static word vectors (one vector per word, whatever its context) can also be
read off co-occurrence statistics: :func:`ppmi_svd_embeddings` factorises the
positive pointwise mutual information matrix of a corpus (Levy and Goldberg's
view of word2vec as an implicit matrix factorisation), in about a second
on Tiny Shakespeare.

Shapes (``book/notation.md``): ``V`` vocabulary size, ``D`` embedding width,
``T`` number of tokens; ``...`` any leading dims of the ids.  (Chapter 5's prose
writes the width ``d`` and the number of tokens ``N``.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from course_lib.shapes import expect_shape

__all__ = [
    "one_hot",
    "embedding_lookup",
    "one_hot_embedding",
    "cooccurrence_matrix",
    "ppmi",
    "ppmi_svd_embeddings",
    "nearest_neighbours",
]


def _check(where: str, table: Tensor, ids: Tensor) -> None:
    # "d", not "D": tests/test_tokenization.py matches this message (to switch with it)
    expect_shape(where, "table", table, [("V", None), ("D", None)])
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"{where}: ids must be int64 or int32 (use ids.long()), got dtype {ids.dtype}"
        )
    if ids.numel() and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ValueError(
            f"{where}: ids must lie in 0..{table.shape[0] - 1} (the table has V={table.shape[0]} "
            f"rows), got values in {int(ids.min())}..{int(ids.max())}"
        )


def one_hot(ids: Tensor, vocab_size: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """One-hot rows ``[..., V]`` of integer ``ids [...]``: a 1 at column ``ids``, 0 elsewhere."""
    if vocab_size < 1:
        raise ValueError(f"one_hot: vocab_size must be >= 1, got {vocab_size}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(
            f"one_hot: ids must lie in 0..{vocab_size - 1} (vocab_size={vocab_size}), "
            f"got values in {int(ids.min())}..{int(ids.max())}"
        )
    return F.one_hot(ids.long(), vocab_size).to(dtype)


def embedding_lookup(table: Tensor, ids: Tensor) -> Tensor:
    """Rows of ``table [V, D]`` for ``ids [...]``: ``[..., D]`` (what ``nn.Embedding`` does)."""
    _check("embedding_lookup", table, ids)
    return table[ids]  # (5.1) E[t]                                          [..., D]


def one_hot_embedding(table: Tensor, ids: Tensor) -> Tensor:
    """The same rows as a matrix product, eqs. (5.1)-(5.2): ``one_hot(ids) @ table``, ``[..., D]``.

    ``[..., V] @ [V, D] -> [..., D]``: the one-hot vectors are *rows* multiplied on
    the left of ``E``; ``E @ e_t`` is not even defined unless ``D == V``.  Costs
    ``V`` times more arithmetic than the lookup, which is why nobody computes it.
    """
    _check("one_hot_embedding", table, ids)
    return one_hot(ids, table.shape[0], table.dtype) @ table  # (5.2) X E     [..., D]


def cooccurrence_matrix(ids: Tensor, vocab_size: int, window: int = 4) -> Tensor:
    """Symmetric co-occurrence counts ``C [V, V]`` of ``ids [T]`` within ``window`` tokens.

    ``C[a, b]`` counts the pairs of positions ``(p, p + o)``, ``1 <= o <= window``,
    holding ``a`` and ``b`` (in either order).  float64.
    """
    expect_shape("cooccurrence_matrix", "ids", ids, [("T", None)])
    if window < 1:
        raise ValueError(f"cooccurrence_matrix: window must be >= 1, got {window}")
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    for offset in range(1, window + 1):
        a, b = ids[:-offset].long(), ids[offset:].long()
        counts.index_put_((a, b), torch.ones(a.numel(), dtype=torch.float64), accumulate=True)
    return counts + counts.T


def ppmi(counts: Tensor) -> Tensor:
    """Positive pointwise mutual information of a co-occurrence matrix ``[V, V]``.

    ``PPMI[a, b] = max(0, log( P(a, b) / (P(a) P(b)) ))``; zero where a pair was never seen.
    """
    total = counts.sum()
    row, col = counts.sum(1, keepdim=True), counts.sum(0, keepdim=True)
    pmi = torch.log(counts * total / (row * col))
    return pmi.clamp(min=0).nan_to_num(0.0, posinf=0.0, neginf=0.0)


def ppmi_svd_embeddings(
    ids: Tensor, vocab_size: int, dim: int = 64, window: int = 4, *, seed: int = 0
) -> Tensor:
    """Static word vectors ``[V, dim]``: a rank-``dim`` factorisation of the PPMI matrix.

    ``PPMI ~ U S V^T`` (randomised truncated SVD, seeded); the vectors are the rows
    of ``U S^(1/2)``, normalised to unit length so that dot products are cosines.
    Ids ``>= vocab_size`` (e.g. an "other words" id) are counted as context but get
    no vector.
    """
    counts = cooccurrence_matrix(ids, max(vocab_size, int(ids.max()) + 1), window)
    weights = ppmi(counts[:vocab_size, :vocab_size])
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        u, s, _ = torch.svd_lowrank(weights, q=dim, niter=4)
    finally:
        torch.random.set_rng_state(state)
    return F.normalize(u * s.sqrt(), dim=1).float()


def nearest_neighbours(vectors: Tensor, query: Tensor, k: int = 5) -> tuple[Tensor, Tensor]:
    """The ``k`` rows of ``vectors [V, D]`` with the highest cosine to ``query [D]``.

    Returns ``(indices [k], cosines [k])``, best first.
    """
    expect_shape("nearest_neighbours", "vectors", vectors, [("V", None), ("D", None)])
    expect_shape("nearest_neighbours", "query", query, [("D", vectors.shape[1])])
    cos = F.normalize(vectors, dim=1) @ F.normalize(query, dim=0)
    top = cos.topk(k)
    return top.indices, top.values
