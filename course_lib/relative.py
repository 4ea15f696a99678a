"""Where a token is relative to another: relative positions in attention (Chapter 8).

The attention score of query ``i`` and key ``j`` is changed by something that
depends on ``j - i`` only -- Shaw et al.'s clipped key and value tables
(:func:`shaw_attention`, eqs. (8.1)-(8.3)), T5's bucketed scalar bias
(:func:`t5_relative_position_bucket`, :func:`t5_bias`, eq. (8.4)), ALiBi's
linear penalty (:func:`alibi_slopes`, :func:`alibi_bias`, eqs. (8.5)-(8.6)), or
RoPE's rotation of queries and keys (:func:`apply_rope`, eqs. (8.7)-(8.8)), with
position interpolation for lengths beyond training (``scaling_factor``,
eq. (8.9)).  Chapter 7's absolute positions, added to the input, are in
:mod:`course_lib.positional` (RoPE takes its frequencies from there).

These are the equations, as functions of tensors.  They reach a model through
the small attention hooks of :mod:`course_lib.position_hooks`.

Shapes (``book/notation.md``): ``T`` query positions, ``S`` key positions,
``d`` a vector size (a head's width; even where pairs of coordinates are
rotated), ``h`` heads, ``B`` batch.  Relative position is always **key minus
query**, ``r_ij = j - i`` (negative for keys in the past, as in T5's code), and
a query sequence shorter than the key sequence holds the *last* ``T``
positions (the layout of decoding with a cache).  Equation numbers refer to
Chapters 7 and 8 of the course.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from course_lib.attention import _check_qkv, scaled_dot_product_attention
from course_lib.masks import to_additive_mask
from course_lib.positional import _even, _frequency_args, sinusoidal_frequencies
from course_lib.shapes import expect_positive, fmt_shape

__all__ = [
    "relative_positions",
    "shaw_indices",
    "shaw_key_bias",
    "shaw_value_term",
    "shaw_attention",
    "t5_relative_position_bucket",
    "t5_bias",
    "alibi_slopes",
    "alibi_bias",
    "rope_cos_sin",
    "rotate_half",
    "apply_rope",
    "rope_permutation",
]


def relative_positions(
    q_len: int, k_len: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Key minus query position, ``r_ij = j - i``, int64 ``[T, S]`` (Chapter 8).

    With ``k_len > q_len`` the queries are the last ``q_len`` positions, so the
    diagonal ``r = 0`` ends at the bottom-right corner.  Negative entries are
    keys in the past, positive ones keys in the future (masked in a causal model).
    """
    k_len = q_len if k_len is None else k_len
    expect_positive("relative_positions", q_len=q_len, k_len=k_len)
    if q_len > k_len:
        raise ValueError(f"relative_positions: q_len ({q_len}) must be <= k_len ({k_len})")
    i = torch.arange(k_len - q_len, k_len, device=device)  # query positions   [T]
    j = torch.arange(k_len, device=device)  # key positions                    [S]
    return j[None, :] - i[:, None]  # r_ij = j - i                             [T, S]


def shaw_indices(
    q_len: int, k_len: int, max_distance: int, *, device: torch.device | str | None = None
) -> Tensor:
    """Rows of Shaw et al.'s tables for every pair, Chapter 8, eq. (8.3).

    ``clip(j - i, -K, K) + K`` with ``K = max_distance``: int64 ``[T, S]`` in
    ``0 .. 2K``.  Row ``K`` is distance 0; every key farther than ``K`` shares
    row ``0`` (past) or ``2K`` (future), so a table of ``2K + 1`` rows serves any
    length.
    """
    if not isinstance(max_distance, int) or max_distance < 0:
        raise ValueError(f"shaw_indices: max_distance must be an int >= 0, got {max_distance!r}")
    r = relative_positions(q_len, k_len, device=device)  #                     [T, S]
    return r.clamp(-max_distance, max_distance) + max_distance  # (8.3)         [T, S]


def shaw_key_bias(q: Tensor, rel_k: Tensor, k_len: int) -> Tensor:
    """Shaw et al.'s key term, Chapter 8, eq. (8.1): ``q_i . a^K_ij / sqrt(d)``, ``[..., T, S]``.

    ``q`` [..., T, d]; ``rel_k`` [2K+1, d] (``K`` read from its size); ``k_len`` = S.
    Never formed as a [T, S, d] tensor: ``q_i . a^K_r`` is computed once per
    table row (``q @ rel_k^T``, [..., T, 2K+1]) and gathered at row ``idx_ij`` (8.3).
    """
    t, d = q.shape[-2:]
    idx = shaw_indices(t, k_len, rel_k.shape[0] // 2, device=q.device)  # (8.3)  [T, S]
    qa = q @ rel_k.transpose(0, 1)  # q_i . a^K_r for every row r              [..., T, 2K+1]
    return qa.gather(-1, idx.expand(*qa.shape[:-1], k_len)) / math.sqrt(d)  # [..., T, S]


def shaw_value_term(weights: Tensor, rel_v: Tensor) -> Tensor:
    """Shaw et al.'s value term, Chapter 8, eq. (8.2): ``sum_j alpha_ij a^V_ij``, ``[..., T, dv]``.

    ``weights`` [..., T, S]; ``rel_v`` [2K+1, dv].  The weights are summed into
    the 2K+1 table rows first (``sum_{j: idx_ij = r} alpha_ij``), then multiplied once.
    """
    t, s = weights.shape[-2:]
    idx = shaw_indices(t, s, rel_v.shape[0] // 2, device=weights.device)  # (8.3) [T, S]
    per_row = torch.zeros(
        *weights.shape[:-1], rel_v.shape[0], dtype=weights.dtype, device=weights.device
    )
    per_row = per_row.scatter_add(-1, idx.expand(*weights.shape[:-1], s), weights)  # [..., T, 2K+1]
    return per_row @ rel_v  #                                                  [..., T, dv]


def _check_shaw(
    where: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    rel_k: Tensor,
    rel_v: Tensor | None,
    mask: Tensor | None,
) -> None:
    """Raise unless the arguments of :func:`shaw_attention` have the shapes it documents."""
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(
            f"{where}: q, k, v must be [..., T, d], got {fmt_shape(q.shape)}, {fmt_shape(k.shape)}, {fmt_shape(v.shape)}"
        )
    d = q.shape[-1]
    if rel_k.dim() != 2 or rel_k.shape[0] % 2 == 0 or rel_k.shape[1] != d:
        raise ValueError(
            f"{where}: rel_k must be [2K+1, d={d}] (an odd number of rows), got {fmt_shape(rel_k.shape)}"
        )
    if rel_v is not None and (rel_v.dim() != 2 or rel_v.shape != (rel_k.shape[0], v.shape[-1])):
        raise ValueError(
            f"{where}: rel_v must be [2K+1={rel_k.shape[0]}, dv={v.shape[-1]}], got {fmt_shape(rel_v.shape)}"
        )
    _check_qkv(where, q, k, v, mask)


def shaw_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    rel_k: Tensor,
    rel_v: Tensor | None = None,
    *,
    mask: Tensor | None = None,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Self-attention with Shaw et al.'s relative positions, Chapter 8, eqs. (8.1)-(8.3).

    (8.1)  ``e_ij = q_i . (k_j + a^K_ij) / sqrt(d)``
    (8.2)  ``y_i = sum_j alpha_ij (v_j + a^V_ij)``,  ``alpha_i = softmax_j(e_ij + M_ij)``
    (8.3)  ``a^K_ij = rel_k[clip(j - i, -K, K) + K]`` (likewise ``a^V``)

    Shapes: ``q`` [..., T, d], ``k`` [..., S, d], ``v`` [..., S, dv],
    ``rel_k`` [2K+1, d], ``rel_v`` [2K+1, dv] or ``None`` (no value term);
    ``K`` is read from the table size.  The tables are shared by all heads, as in
    the paper.  ``mask``: bool (True = may attend) or additive, broadcastable to
    [..., T, S].  Returns ``y`` [..., T, dv] (and the weights [..., T, S]
    when ``return_weights``).  With zero tables this is plain scaled dot-product
    attention.

    The two relative terms are :func:`shaw_key_bias` and :func:`shaw_value_term`;
    :class:`course_lib.position_hooks.ShawPositions` hands the same two to
    :class:`course_lib.attention.MultiHeadAttention`.
    """
    _check_shaw("shaw_attention", q, k, v, rel_k, rel_v, mask)
    bias = shaw_key_bias(q, rel_k, k.shape[-2])  # (8.1): the relative half of e_ij
    if mask is not None:
        bias = bias + to_additive_mask(mask, q.dtype)  # M_ij: 0 or -inf, or any additive bias
    # (8.1)-(8.2) content part: softmax(q k^T / sqrt(d) + bias) v
    y, w = scaled_dot_product_attention(q, k, v, bias, return_weights=True, check=False)
    if rel_v is not None:
        y = y + shaw_value_term(w, rel_v)  # (8.2)                              [..., T, dv]
    return (y, w) if return_weights else y


def _check_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    """Raise unless :func:`t5_relative_position_bucket` can split ``num_buckets`` into exact and
    log-spaced buckets up to ``max_distance``."""
    expect_positive(
        "t5_relative_position_bucket", num_buckets=num_buckets, max_distance=max_distance
    )
    if bidirectional and num_buckets % 2:
        raise ValueError(
            f"t5_relative_position_bucket: bidirectional needs an even num_buckets, got {num_buckets}"
        )
    n_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if n_exact < 1 or max_distance <= n_exact:
        raise ValueError(
            f"t5_relative_position_bucket: need num_buckets >= {4 if bidirectional else 2} and "
            f"max_distance > {n_exact}, got num_buckets={num_buckets}, max_distance={max_distance}"
        )


def t5_relative_position_bucket(
    relative_position: Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """T5's bucket of a relative position ``j - i``, Chapter 8, eq. (8.4).

    Distances ``n = |j - i|`` below ``n_exact = B'/2`` get a bucket each; from
    ``n_exact`` to ``max_distance`` the buckets are logarithmically wider,

        bucket(n) = n_exact + floor( log(n / n_exact) / log(max_distance / n_exact)
                                     * (B' - n_exact) ),

    and every ``n >= max_distance`` shares the last bucket ``B' - 1``.  Causal
    (``bidirectional=False``): ``B' = num_buckets``, future keys (``j > i``) get
    bucket 0 (they are masked anyway).  Bidirectional: ``B' = num_buckets / 2``;
    past keys use buckets ``0 .. B'-1`` and future keys ``B' .. 2B'-1``.
    Returns int64, same shape as ``relative_position``.  The logarithm is taken
    in float32, as in T5's reference implementation.
    """
    _check_buckets(num_buckets, max_distance, bidirectional)
    rel = relative_position.long()
    if bidirectional:
        nb = num_buckets // 2
        offset = (rel > 0).long() * nb  # future keys: upper half
        n = rel.abs()
    else:
        nb = num_buckets
        offset = torch.zeros_like(rel)
        n = (-rel).clamp(min=0)  # distance into the past; the future collapses to 0
    n_exact = nb // 2
    # log-spaced buckets for n >= n_exact (float32, as T5's code; n = 0 is masked below)
    ratio = torch.log(n.float().clamp(min=1) / n_exact) / math.log(max_distance / n_exact)
    far = (n_exact + (ratio * (nb - n_exact)).long()).clamp(max=nb - 1)
    return offset + torch.where(n < n_exact, n, far)  # (8.4)


def t5_bias(
    table: Tensor,
    q_len: int,
    k_len: int | None = None,
    *,
    bidirectional: bool = False,
    max_distance: int = 128,
) -> Tensor:
    """T5's relative attention bias, Chapter 8, eq. (8.4): ``b_h(i, j) = table[bucket(j - i), h]``.

    ``table`` is the learned ``[num_buckets, h]`` (``nn.Embedding(num_buckets, h).weight``
    in T5).  Returns ``[h, T, S]``, to be *added* to the scores ``q_i . k_j``
    (T5 does not divide by ``sqrt(d)``; its initialisation absorbs the scale).
    """
    if table.dim() != 2:
        raise ValueError(f"t5_bias: table must be [num_buckets, h], got {fmt_shape(table.shape)}")
    r = relative_positions(q_len, k_len, device=table.device)  #               [T, S]
    buckets = t5_relative_position_bucket(r, bidirectional, table.shape[0], max_distance)
    return table[buckets].permute(2, 0, 1)  # (8.4)                          [h, T, S]


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi's head slopes ``m_h``, Chapter 8, eq. (8.6) (Press et al., 2022).

    For ``n`` a power of two, the geometric sequence ``m_h = 2^(-8h/n)``,
    ``h = 1 .. n`` (8 heads: 1/2, 1/4, ..., 1/256).  Otherwise, with ``c`` the
    largest power of two below ``n``: the ``c`` slopes for ``c`` heads, then the
    odd-indexed slopes ``2^(-8h/(2c))``, ``h = 1, 3, 5, ...``, of the sequence for
    ``2c`` heads, until there are ``n``.  float32 ``[num_heads]``, all in (0, 1).
    """
    expect_positive("alibi_slopes", num_heads=num_heads)

    def geometric(n: int) -> list[float]:  # 2^(-8h/n), h = 1..n
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    c = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(c) + geometric(2 * c)[0::2][: num_heads - c]  # (8.6)
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: Tensor, q_len: int, k_len: int | None = None) -> Tensor:
    """ALiBi's bias, Chapter 8, eq. (8.5): ``b_h(i, j) = -m_h |i - j|``, ``[h, T, S]``.

    A *penalty* growing linearly with distance: ``m_h > 0``, and for a key in the
    past (``j <= i``) the bias is ``m_h (j - i) <= 0``.  Added to the scores
    ``q_i . k_j / sqrt(d)`` of a causal model, so keys in the future are masked
    anyway; used without a mask, this is the symmetric (bidirectional) form.
    ``slopes`` [h] comes from :func:`alibi_slopes`.
    """
    if slopes.dim() != 1:
        raise ValueError(f"alibi_bias: slopes must be [h], got {fmt_shape(slopes.shape)}")
    r = relative_positions(q_len, k_len, device=slopes.device)  # j - i          [T, S]
    return -slopes[:, None, None] * r.abs().to(slopes.dtype)  # (8.5)          [h, T, S]


_CONVENTIONS = ("half", "interleaved")


def _convention(where: str, convention: str) -> None:
    if convention not in _CONVENTIONS:
        raise ValueError(f"{where}: convention must be one of {_CONVENTIONS}, got {convention!r}")


def rope_cos_sin(
    positions: Tensor | int,
    dim: int,
    base: float = 10000.0,
    *,
    convention: str = "half",
    scaling_factor: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """Cosines and sines of RoPE's angles ``theta_(p, i) = p * omega_i``, Chapter 8, eq. (8.7).

    ``positions``: int64 ``[T]`` (or an int ``T`` for ``0 .. T-1``); ``omega_i =
    base^(-2i/d)`` as in eq. (7.1).  Returns ``(cos, sin)``, each ``[T, d]``, laid
    out for ``convention``: ``"half"`` repeats the ``d/2`` angles as
    ``[theta_0 .. theta_(d/2-1), theta_0 .. theta_(d/2-1)]`` (coordinate ``i`` is
    paired with ``i + d/2``: GPT-NeoX, Hugging Face LLaMA); ``"interleaved"``
    as ``[theta_0, theta_0, theta_1, theta_1, ...]`` (coordinate ``2i`` with
    ``2i + 1``: the RoPE paper, GPT-J, Meta's LLaMA).  Compute once per length.

    ``scaling_factor`` ``s >= 1`` is *position interpolation* (Chen et al., 2023;
    Chapter 8, eq. (8.9)): the angles of position ``p`` become ``(p / s) omega_i``,
    so a model trained on ``L`` positions reads ``L' = s L`` positions at the
    angles of positions ``m L / L'`` it has seen (Hugging Face's ``"linear"``
    ``rope_scaling``).  ``s = 1`` is plain RoPE.
    """
    _convention("rope_cos_sin", convention)
    _frequency_args("rope_cos_sin", dim, base)
    if not scaling_factor >= 1:
        raise ValueError(
            f"rope_cos_sin: scaling_factor must be >= 1 (1 = no interpolation; "
            f"L'/L to read L' positions with a model trained on L), got {scaling_factor}"
        )
    if isinstance(positions, int):
        positions = torch.arange(positions)
    if positions.dim() != 1:
        raise ValueError(f"rope_cos_sin: positions must be [T], got {fmt_shape(positions.shape)}")
    omega = sinusoidal_frequencies(dim, base).to(positions.device)  #          [d/2]
    p = positions.to(torch.float64) / scaling_factor  # (8.9) m L / L'         [T]
    theta = p[:, None] * omega[None, :]  #                                     [T, d/2]
    if convention == "half":
        theta = torch.cat([theta, theta], dim=-1)  #                           [T, d]
    else:
        theta = theta.repeat_interleave(2, dim=-1)  #                          [T, d]
    return theta.cos().to(dtype), theta.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """``[x_1, x_2] -> [-x_2, x_1]`` on the halves of the last axis (RoPE, half-split pairs)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rotate_interleaved(x: Tensor) -> Tensor:
    """``(x_0, x_1, x_2, x_3, ...) -> (-x_1, x_0, -x_3, x_2, ...)`` (RoPE, interleaved pairs)."""
    pairs = x.unflatten(-1, (-1, 2))  #                                        [..., d/2, 2]
    return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)


def _check_rope(x: Tensor, cos: Tensor, sin: Tensor, convention: str) -> None:
    """Raise unless ``x`` is [..., T, d] with d even, ``cos`` and ``sin`` [T, d], and ``convention`` known."""
    _convention("apply_rope", convention)
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"apply_rope: x must be [..., T, d] with d even, got {fmt_shape(x.shape)}")
    if cos.shape != x.shape[-2:] or sin.shape != x.shape[-2:]:
        raise ValueError(
            f"apply_rope: cos and sin must be [T, d] = {fmt_shape(x.shape[-2:])}, "
            f"got {fmt_shape(cos.shape)} and {fmt_shape(sin.shape)}"
        )


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, *, convention: str = "half") -> Tensor:
    """Rotate queries or keys by their position, Chapter 8, eq. (8.7).

    Each pair ``(a, b)`` of coordinates of the vector at position ``p`` is rotated
    by the angle ``p * omega_i``::

        (a, b) -> (a cos - b sin,  a sin + b cos)

    i.e. ``x * cos + rotate(x) * sin``.  ``x`` [..., T, d]; ``cos``, ``sin`` [T, d]
    from :func:`rope_cos_sin` with the same ``convention``.  A rotation keeps
    every norm, and eq. (8.8) follows: ``<R_m q, R_n k> = <q, R_(n-m) k>``
    depends on the positions only through ``n - m``.
    """
    _check_rope(x, cos, sin, convention)
    rotate = rotate_half if convention == "half" else rotate_interleaved
    return x * cos + rotate(x) * sin  # (8.7)


def rope_permutation(dim: int) -> Tensor:
    """The permutation from the interleaved to the half-split RoPE layout.

    ``perm = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]``: with ``y = x[..., perm]``, the
    interleaved pair ``(x_2i, x_2i+1)`` becomes the half-split pair
    ``(y_i, y_(i+d/2))``, so ``apply_rope(x, interleaved)[..., perm] ==
    apply_rope(x[..., perm], half)``.  Permuting the output rows of ``W_Q`` and
    ``W_K`` this way converts a model from one convention to the other; the
    scores do not change, since ``q[perm] . k[perm] = q . k``.
    """
    _even("rope_permutation", "dim", dim)
    return torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])
