"""Where a token is: absolute and relative positional information (Chapters 7 and 8).

Attention by itself is blind to order: permute the keys and values together and
every output stays the same.  Position must be put back in, and there are two
families of ways to do it.

* **Absolute** (Chapter 7): a vector per position, added to the token
  embedding before the first layer -- the fixed sinusoidal table of Vaswani et
  al. (:func:`sinusoidal_table`, eq. (7.1)) or a learned table
  (:class:`LearnedPositions`, eq. (7.3)).  The sinusoidal table has a linear
  shift property, ``PE(p + k) = M_k PE(p)`` (:func:`shift_matrix`, eq. (7.2)).
* **Relative** (Chapter 8): the attention score of query ``i`` and key ``j`` is
  changed by something that depends on ``j - i`` only -- Shaw et al.'s clipped
  key and value tables (:func:`shaw_attention`, eqs. (8.1)-(8.3)), T5's
  bucketed scalar bias (:func:`t5_relative_position_bucket`, :func:`t5_bias`,
  eq. (8.4)), ALiBi's linear penalty (:func:`alibi_slopes`,
  :func:`alibi_bias`, eqs. (8.5)-(8.6)), or RoPE's rotation of queries and keys
  (:func:`apply_rope`, eqs. (8.7)-(8.8)).

The last part of the module is the small causal character-level language
model of Chapter 8's extrapolation experiment, :class:`PositionalLM`, which
takes any of these methods by name (``"none"``, ``"learned"``,
``"sinusoidal"``, ``"shaw"``, ``"t5"``, ``"alibi"``, ``"rope"``).  It is the
course's pre-norm stack (:class:`course_lib.transformer.Encoder`) with each
block's attention replaced by :class:`PositionalAttention`, which calls
:func:`course_lib.attention.scaled_dot_product_attention` with an additive
mask; the hooks that function lacks (a bias per head, RoPE on ``q`` and ``k``,
Shaw's key and value terms) are here.

Conventions.  ``L`` (or ``Lq``, ``Lk``) sequence lengths, ``d`` a vector size
(even where pairs of coordinates are rotated), ``H`` heads.  Relative position
is always **key minus query**, ``r_ij = j - i`` (negative for keys in the past,
as in T5's code), and a query sequence shorter than the key sequence holds the
*last* ``Lq`` positions (the layout of decoding with a cache).  Equation
numbers refer to Chapters 7 and 8 of the course.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import scaled_dot_product_attention, to_additive_mask
from course_lib.transformer import Encoder

__all__ = [
    # Chapter 7: absolute positions
    "sinusoidal_frequencies",
    "sinusoidal_table",
    "shift_matrix",
    "LearnedPositions",
    # Chapter 8: relative positions
    "relative_positions",
    "shaw_indices",
    "shaw_attention",
    "t5_relative_position_bucket",
    "t5_bias",
    "alibi_slopes",
    "alibi_bias",
    "rope_cos_sin",
    "rotate_half",
    "rotate_interleaved",
    "apply_rope",
    "rope_permutation",
    # Chapter 8: the extrapolation experiment's language model
    "POSITION_METHODS",
    "PositionalAttention",
    "PositionalLM",
    "lm_loss",
    "evaluate_lm",
]


def _fmt(shape: torch.Size | tuple[int, ...]) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def _positive(where: str, **sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")


def _even(where: str, name: str, value: int) -> None:
    _positive(where, **{name: value})
    if value % 2:
        raise ValueError(
            f"{where}: {name} must be even (coordinates are used in pairs (2i, 2i+1)), got {value}"
        )


def _frequency_args(where: str, dim: int, base: float) -> None:
    # The checks of sinusoidal_frequencies, made first by its callers so that
    # an error names the function that was called.
    _even(where, "dim", dim)
    if base <= 1:
        raise ValueError(f"{where}: base must be > 1, got {base}")


def _check_method(where: str, method: str) -> None:
    if method not in POSITION_METHODS:
        raise ValueError(f"{where}: method must be one of {POSITION_METHODS}, got {method!r}")


# ===========================================================================
# Chapter 7: absolute positions
# ===========================================================================


def sinusoidal_frequencies(dim: int, base: float = 10000.0) -> Tensor:
    """The angular frequencies of the sinusoidal table, Chapter 7, eq. (7.1).

    ``omega_i = base^(-2i / d)`` for the pair index ``i = 0 .. d/2 - 1``, float64
    ``[d/2]``.  Pair ``i`` has wavelength ``2 pi / omega_i``, from ``2 pi``
    (``i = 0``) to almost ``2 pi * base``.  RoPE (eq. (8.7)) uses the same
    frequencies.
    """
    _frequency_args("sinusoidal_frequencies", dim, base)
    i = torch.arange(dim // 2, dtype=torch.float64)  # pair index          [d/2]
    return base ** (-2.0 * i / dim)  # omega_i = base^(-2i/d)                [d/2]


def sinusoidal_table(
    num_positions: int,
    dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The sinusoidal position table of Vaswani et al., Chapter 7, eq. (7.1).

    ``PE[p, 2i] = sin(p * omega_i)`` and ``PE[p, 2i + 1] = cos(p * omega_i)``,
    ``omega_i = base^(-2i/d)``, for positions ``p = 0 .. num_positions - 1``.
    Returns ``[num_positions, dim]``.  ``i`` indexes a *pair* of coordinates
    (sine and cosine share one frequency), not a single coordinate.  The angles
    are computed in float64, so far positions keep their precision.
    """
    _positive("sinusoidal_table", num_positions=num_positions)
    _frequency_args("sinusoidal_table", dim, base)
    omega = sinusoidal_frequencies(dim, base)  #                               [d/2]
    p = torch.arange(num_positions, dtype=torch.float64)  #                    [L]
    angles = p[:, None] * omega[None, :]  # p * omega_i                        [L, d/2]
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)  # (7.1) PE[p, 2i]   = sin(p omega_i)
    table[:, 1::2] = torch.cos(angles)  # (7.1) PE[p, 2i+1] = cos(p omega_i)
    return table.to(dtype=dtype, device=device)


def shift_matrix(
    k: float, dim: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float64
) -> Tensor:
    """The matrix ``M_k`` with ``PE(p + k) = M_k PE(p)`` for every ``p``, Chapter 7, eq. (7.2).

    Block diagonal ``[d, d]``, one 2x2 block per pair ``(sin, cos)`` of eq. (7.1):

        [sin((p+k) w)]   [ cos(k w)  sin(k w)] [sin(p w)]
        [cos((p+k) w)] = [-sin(k w)  cos(k w)] [cos(p w)]

    (the angle-addition formulas).  The blocks depend on ``k`` only, each is a
    rotation (so ``M_k`` is orthogonal), and ``M_k M_j = M_(k+j)``.
    """
    _frequency_args("shift_matrix", dim, base)
    omega = sinusoidal_frequencies(dim, base)  #                               [d/2]
    c, s = torch.cos(k * omega), torch.sin(k * omega)  #                       [d/2]
    m = torch.zeros(dim, dim, dtype=torch.float64)
    idx = torch.arange(0, dim, 2)
    m[idx, idx] = c  # row sin: cos(k w) * sin(p w) ...
    m[idx, idx + 1] = s  # ... + sin(k w) * cos(p w)
    m[idx + 1, idx] = -s  # row cos: -sin(k w) * sin(p w) ...
    m[idx + 1, idx + 1] = c  # ... + cos(k w) * cos(p w)
    return m.to(dtype)


class LearnedPositions(nn.Module):
    """A learned absolute position table, Chapter 7, eq. (7.3): ``z_p = x_p + P[p]``.

    ``P`` is a parameter ``[max_len, dim]`` initialised from N(0, ``init_std``^2)
    (GPT-2 uses 0.01-0.02).  ``forward(length, offset=0)`` returns the rows of
    positions ``offset .. offset + length - 1``, ``[length, dim]``.  There is no
    row for a position ``>= max_len``: asking for one raises ``ValueError``
    (a learned table cannot extrapolate).
    """

    def __init__(self, max_len: int, dim: int, init_std: float = 0.02) -> None:
        super().__init__()
        _positive("LearnedPositions", max_len=max_len, dim=dim)
        self.max_len, self.dim = max_len, dim
        self.weight = nn.Parameter(torch.randn(max_len, dim) * init_std)  # P  [max_len, d]

    def forward(self, length: int, offset: int = 0) -> Tensor:
        if length < 0 or offset < 0:
            raise ValueError(
                f"LearnedPositions: length and offset must be >= 0, got {length}, {offset}"
            )
        last = offset + length - 1
        if last >= self.max_len:
            raise ValueError(
                f"LearnedPositions: position {last} has no row: the table was made with "
                f"max_len={self.max_len} (positions 0..{self.max_len - 1}). A learned table "
                "cannot be evaluated beyond the length it was built for (Chapter 7)."
            )
        return self.weight[offset : offset + length]  # (7.3) P[p]              [length, d]

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}"


# ===========================================================================
# Chapter 8: relative positions
# ===========================================================================


def relative_positions(
    q_len: int, k_len: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Key minus query position, ``r_ij = j - i``, int64 ``[Lq, Lk]`` (Chapter 8).

    With ``k_len > q_len`` the queries are the last ``q_len`` positions, so the
    diagonal ``r = 0`` ends at the bottom-right corner.  Negative entries are
    keys in the past, positive ones keys in the future (masked in a causal model).
    """
    k_len = q_len if k_len is None else k_len
    _positive("relative_positions", q_len=q_len, k_len=k_len)
    if q_len > k_len:
        raise ValueError(f"relative_positions: q_len ({q_len}) must be <= k_len ({k_len})")
    i = torch.arange(k_len - q_len, k_len, device=device)  # query positions   [Lq]
    j = torch.arange(k_len, device=device)  # key positions                    [Lk]
    return j[None, :] - i[:, None]  # r_ij = j - i                             [Lq, Lk]


def shaw_indices(
    q_len: int, k_len: int, max_distance: int, *, device: torch.device | str | None = None
) -> Tensor:
    """Rows of Shaw et al.'s tables for every pair, Chapter 8, eq. (8.3).

    ``clip(j - i, -K, K) + K`` with ``K = max_distance``: int64 ``[Lq, Lk]`` in
    ``0 .. 2K``.  Row ``K`` is distance 0; every key farther than ``K`` shares
    row ``0`` (past) or ``2K`` (future), so a table of ``2K + 1`` rows serves any
    length.
    """
    if not isinstance(max_distance, int) or max_distance < 0:
        raise ValueError(f"shaw_indices: max_distance must be an int >= 0, got {max_distance!r}")
    r = relative_positions(q_len, k_len, device=device)  #                     [Lq, Lk]
    return r.clamp(-max_distance, max_distance) + max_distance  # (8.3)         [Lq, Lk]


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

    Shapes: ``q`` [..., Lq, d], ``k`` [..., Lk, d], ``v`` [..., Lk, dv],
    ``rel_k`` [2K+1, d], ``rel_v`` [2K+1, dv] or ``None`` (no value term);
    ``K`` is read from the table size.  The tables are shared by all heads, as in
    the paper.  ``mask``: bool (True = may attend) or additive, broadcastable to
    [..., Lq, Lk].  Returns ``y`` [..., Lq, dv] (and the weights [..., Lq, Lk]
    when ``return_weights``).  With zero tables this is plain scaled dot-product
    attention.

    The key term is never formed as a [Lq, Lk, d] tensor: ``q_i . a^K_r`` is
    computed once per table row (``q @ rel_k^T``, [..., Lq, 2K+1]) and gathered;
    the value term scatters the weights into the 2K+1 rows and multiplies once.
    """
    where = "shaw_attention"
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(
            f"{where}: q, k, v must be [..., L, d], got {_fmt(q.shape)}, {_fmt(k.shape)}, {_fmt(v.shape)}"
        )
    d = q.shape[-1]
    if rel_k.dim() != 2 or rel_k.shape[0] % 2 == 0 or rel_k.shape[1] != d:
        raise ValueError(
            f"{where}: rel_k must be [2K+1, d={d}] (an odd number of rows), got {_fmt(rel_k.shape)}"
        )
    if rel_v is not None and (rel_v.dim() != 2 or rel_v.shape != (rel_k.shape[0], v.shape[-1])):
        raise ValueError(
            f"{where}: rel_v must be [2K+1={rel_k.shape[0]}, dv={v.shape[-1]}], got {_fmt(rel_v.shape)}"
        )
    big_k = rel_k.shape[0] // 2
    lq, lk = q.shape[-2], k.shape[-2]
    idx = shaw_indices(lq, lk, big_k, device=q.device)  # (8.3)                [Lq, Lk]
    qa = q @ rel_k.transpose(0, 1)  # q_i . a^K_r for every row r              [..., Lq, 2K+1]
    key_term = qa.gather(-1, idx.expand(*qa.shape[:-1], lk))  # q_i . a^K_ij   [..., Lq, Lk]
    bias = key_term / math.sqrt(d)  # (8.1): the relative half of e_ij
    if mask is not None:
        bias = bias + to_additive_mask(mask, q.dtype)  # M_ij: 0 or -inf, or any additive bias
    # (8.1)-(8.2) content part: softmax(q k^T / sqrt(d) + bias) v
    y, w = scaled_dot_product_attention(q, k, v, bias, return_weights=True)
    if rel_v is not None:
        # (8.2) value term sum_j alpha_ij a^V_ij = sum_r (sum_{j: idx_ij = r} alpha_ij) a^V_r
        per_row = torch.zeros(*w.shape[:-1], rel_v.shape[0], dtype=w.dtype, device=w.device)
        per_row = per_row.scatter_add(-1, idx.expand(*w.shape[:-1], lk), w)  # [..., Lq, 2K+1]
        y = y + per_row @ rel_v  #                                              [..., Lq, dv]
    return (y, w) if return_weights else y


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
    _positive("t5_relative_position_bucket", num_buckets=num_buckets, max_distance=max_distance)
    rel = relative_position.long()
    if bidirectional:
        if num_buckets % 2:
            raise ValueError(
                f"t5_relative_position_bucket: bidirectional needs an even num_buckets, got {num_buckets}"
            )
        nb = num_buckets // 2
        offset = (rel > 0).long() * nb  # future keys: upper half
        n = rel.abs()
    else:
        nb = num_buckets
        offset = torch.zeros_like(rel)
        n = (-rel).clamp(min=0)  # distance into the past; the future collapses to 0
    n_exact = nb // 2
    if n_exact < 1 or max_distance <= n_exact:
        raise ValueError(
            f"t5_relative_position_bucket: need num_buckets >= {4 if bidirectional else 2} and "
            f"max_distance > {n_exact}, got num_buckets={num_buckets}, max_distance={max_distance}"
        )
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

    ``table`` is the learned ``[num_buckets, H]`` (``nn.Embedding(num_buckets, H).weight``
    in T5).  Returns ``[H, Lq, Lk]``, to be *added* to the scores ``q_i . k_j``
    (T5 does not divide by ``sqrt(d)``; its initialisation absorbs the scale).
    """
    if table.dim() != 2:
        raise ValueError(f"t5_bias: table must be [num_buckets, H], got {_fmt(table.shape)}")
    r = relative_positions(q_len, k_len, device=table.device)  #               [Lq, Lk]
    buckets = t5_relative_position_bucket(r, bidirectional, table.shape[0], max_distance)
    return table[buckets].permute(2, 0, 1)  # (8.4)                          [H, Lq, Lk]


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi's head slopes ``m_h``, Chapter 8, eq. (8.6) (Press et al., 2022).

    For ``n`` a power of two, the geometric sequence ``m_h = 2^(-8h/n)``,
    ``h = 1 .. n`` (8 heads: 1/2, 1/4, ..., 1/256).  Otherwise, with ``c`` the
    largest power of two below ``n``: the ``c`` slopes for ``c`` heads, then the
    odd-indexed slopes ``2^(-8h/(2c))``, ``h = 1, 3, 5, ...``, of the sequence for
    ``2c`` heads, until there are ``n``.  float32 ``[num_heads]``, all in (0, 1).
    """
    _positive("alibi_slopes", num_heads=num_heads)

    def geometric(n: int) -> list[float]:  # 2^(-8h/n), h = 1..n
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    c = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(c) + geometric(2 * c)[0::2][: num_heads - c]  # (8.6)
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: Tensor, q_len: int, k_len: int | None = None) -> Tensor:
    """ALiBi's bias, Chapter 8, eq. (8.5): ``b_h(i, j) = -m_h |i - j|``, ``[H, Lq, Lk]``.

    A *penalty* growing linearly with distance: ``m_h > 0``, and for a key in the
    past (``j <= i``) the bias is ``m_h (j - i) <= 0``.  Added to the scores
    ``q_i . k_j / sqrt(d)`` of a causal model, so keys in the future are masked
    anyway; used without a mask, this is the symmetric (bidirectional) form.
    ``slopes`` [H] comes from :func:`alibi_slopes`.
    """
    if slopes.dim() != 1:
        raise ValueError(f"alibi_bias: slopes must be [H], got {_fmt(slopes.shape)}")
    r = relative_positions(q_len, k_len, device=slopes.device)  # j - i          [Lq, Lk]
    return -slopes[:, None, None] * r.abs().to(slopes.dtype)  # (8.5)          [H, Lq, Lk]


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
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """Cosines and sines of RoPE's angles ``theta_(p, i) = p * omega_i``, Chapter 8, eq. (8.7).

    ``positions``: int64 ``[L]`` (or an int ``L`` for ``0 .. L-1``); ``omega_i =
    base^(-2i/d)`` as in eq. (7.1).  Returns ``(cos, sin)``, each ``[L, d]``, laid
    out for ``convention``: ``"half"`` repeats the ``d/2`` angles as
    ``[theta_0 .. theta_(d/2-1), theta_0 .. theta_(d/2-1)]`` (coordinate ``i`` is
    paired with ``i + d/2``: GPT-NeoX, Hugging Face LLaMA); ``"interleaved"``
    as ``[theta_0, theta_0, theta_1, theta_1, ...]`` (coordinate ``2i`` with
    ``2i + 1``: the RoPE paper, GPT-J, Meta's LLaMA).  Compute once per length.
    """
    _convention("rope_cos_sin", convention)
    _frequency_args("rope_cos_sin", dim, base)
    if isinstance(positions, int):
        positions = torch.arange(positions)
    if positions.dim() != 1:
        raise ValueError(f"rope_cos_sin: positions must be [L], got {_fmt(positions.shape)}")
    omega = sinusoidal_frequencies(dim, base).to(positions.device)  #          [d/2]
    theta = positions.to(torch.float64)[:, None] * omega[None, :]  #           [L, d/2]
    if convention == "half":
        theta = torch.cat([theta, theta], dim=-1)  #                           [L, d]
    else:
        theta = theta.repeat_interleave(2, dim=-1)  #                          [L, d]
    return theta.cos().to(dtype), theta.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """``[x_1, x_2] -> [-x_2, x_1]`` on the halves of the last axis (RoPE, half-split pairs)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rotate_interleaved(x: Tensor) -> Tensor:
    """``(x_0, x_1, x_2, x_3, ...) -> (-x_1, x_0, -x_3, x_2, ...)`` (RoPE, interleaved pairs)."""
    pairs = x.unflatten(-1, (-1, 2))  #                                        [..., d/2, 2]
    return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, *, convention: str = "half") -> Tensor:
    """Rotate queries or keys by their position, Chapter 8, eq. (8.7).

    Each pair ``(a, b)`` of coordinates of the vector at position ``p`` is rotated
    by the angle ``p * omega_i``::

        (a, b) -> (a cos - b sin,  a sin + b cos)

    i.e. ``x * cos + rotate(x) * sin``.  ``x`` [..., L, d]; ``cos``, ``sin`` [L, d]
    from :func:`rope_cos_sin` with the same ``convention``.  A rotation keeps
    every norm, and eq. (8.8) follows: ``<R_m q, R_n k> = <q, R_(n-m) k>``
    depends on the positions only through ``n - m``.
    """
    _convention("apply_rope", convention)
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"apply_rope: x must be [..., L, d] with d even, got {_fmt(x.shape)}")
    if cos.shape != x.shape[-2:] or sin.shape != x.shape[-2:]:
        raise ValueError(
            f"apply_rope: cos and sin must be [L, d] = {_fmt(x.shape[-2:])}, "
            f"got {_fmt(cos.shape)} and {_fmt(sin.shape)}"
        )
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


# ===========================================================================
# Chapter 8: a small causal language model for every position method
# ===========================================================================

#: The position methods :class:`PositionalLM` accepts.
POSITION_METHODS = ("none", "learned", "sinusoidal", "shaw", "t5", "alibi", "rope")


class PositionalAttention(nn.Module):
    """Causal multi-head self-attention with a position method's hook (Chapter 8).

    ``method`` is one of :data:`POSITION_METHODS`; for ``"none"``, ``"learned"``
    and ``"sinusoidal"`` this is plain causal attention (the absolute methods
    act on the input, in :class:`PositionalLM`).  Otherwise the scores of
    eq. (3.2) are changed as follows, then
    :func:`course_lib.attention.scaled_dot_product_attention` does the rest:

    * ``"shaw"``: key and value tables ``[2K+1, d_head]`` shared by the heads, eqs. (8.1)-(8.3);
    * ``"t5"``: a learned scalar per (bucket, head) added to the scores, eq. (8.4);
    * ``"alibi"``: ``-m_h |i - j|`` added to the scores, eqs. (8.5)-(8.6), no parameters;
    * ``"rope"``: queries and keys rotated before the product, eq. (8.7), no parameters.

    It is called like :class:`course_lib.attention.MultiHeadAttention` (so it
    drops into :class:`course_lib.transformer.EncoderBlock`):
    ``forward(x [B, L, E], *, is_causal=True, ...) -> (y [B, L, E], None)``;
    it is always causal and only self-attention.  What depends on ``L`` alone
    (causal mask, ALiBi bias, T5 buckets, RoPE cos/sin) is computed once per
    ``(L, device)`` and kept (:meth:`length_cache`).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        method: str,
        *,
        shaw_max_distance: int = 16,
        t5_num_buckets: int = 32,
        t5_max_distance: int = 128,
    ) -> None:
        super().__init__()
        _check_method("PositionalAttention", method)
        _positive("PositionalAttention", dim=dim, num_heads=num_heads)
        if dim % num_heads:
            raise ValueError(
                f"PositionalAttention: dim ({dim}) must be a multiple of num_heads ({num_heads})"
            )
        if method == "rope" and (dim // num_heads) % 2:
            raise ValueError(
                f"PositionalAttention: RoPE rotates pairs of coordinates, so the head size "
                f"dim // num_heads must be even, got {dim} // {num_heads} = {dim // num_heads}"
            )
        self.dim, self.num_heads, self.head_dim, self.method = (
            dim,
            num_heads,
            dim // num_heads,
            method,
        )
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)  # [W_Q; W_K; W_V]  [3E, E]
        self.out_proj = nn.Linear(dim, dim, bias=False)  # W_O               [E, E]
        if method == "shaw":
            rows = 2 * shaw_max_distance + 1
            self.rel_k = nn.Parameter(torch.randn(rows, self.head_dim) * 0.02)  # a^K [2K+1, d]
            self.rel_v = nn.Parameter(torch.randn(rows, self.head_dim) * 0.02)  # a^V [2K+1, d]
        if method == "t5":
            self.t5_table = nn.Parameter(torch.zeros(t5_num_buckets, num_heads))  # [buckets, H]
            self.t5_max_distance = t5_max_distance
        self._cache: dict[tuple[int, str], dict[str, Tensor]] = {}

    def length_cache(self, length: int, device: torch.device) -> dict[str, Tensor]:
        """Causal mask and position tensors for sequences of ``length``, built once."""
        key = (length, str(device))
        if key not in self._cache:
            allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()
            cache = {"causal": to_additive_mask(allowed)}  # (3.4) 0 or -inf     [L, L]
            if self.method == "alibi":
                slopes = alibi_slopes(self.num_heads).to(device)
                cache["alibi"] = alibi_bias(slopes, length)  # (8.5)            [H, L, L]
            elif self.method == "t5":
                r = relative_positions(length, device=device)
                cache["buckets"] = t5_relative_position_bucket(  # causal (8.4) [L, L]
                    r, False, self.t5_table.shape[0], self.t5_max_distance
                )
            elif self.method == "rope":
                cos, sin = rope_cos_sin(torch.arange(length, device=device), self.head_dim)
                cache["cos"], cache["sin"] = cos, sin  # (8.7)                  [L, d]
            self._cache[key] = cache
        return self._cache[key]

    def forward(
        self, x: Tensor, key: Tensor | None = None, value: Tensor | None = None, **kwargs: object
    ) -> tuple[Tensor, None]:
        if (key is not None and key is not x) or (value is not None and value is not x):
            raise ValueError("PositionalAttention: only self-attention (key = value = x)")
        if kwargs.get("mask") is not None or kwargs.get("key_padding_mask") is not None:
            raise ValueError("PositionalAttention: is always causal and takes no other mask")
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(
                f"PositionalAttention: x must be [B, L, E={self.dim}], got {_fmt(x.shape)}"
            )
        b, length, _ = x.shape
        h, d = self.num_heads, self.head_dim
        cache = self.length_cache(length, x.device)
        q, k, v = self.qkv(x).unflatten(-1, (3, h, d)).permute(2, 0, 3, 1, 4)  # each [B, H, L, d]
        mask = cache["causal"]  #                                               [L, L]
        if self.method == "rope":
            q = apply_rope(q, cache["cos"], cache["sin"])  # (8.7)
            k = apply_rope(k, cache["cos"], cache["sin"])
        elif self.method == "alibi":
            mask = mask + cache["alibi"]  # (8.5)                              [H, L, L]
        elif self.method == "t5":
            mask = mask + self.t5_table[cache["buckets"]].permute(2, 0, 1)  # (8.4) [H, L, L]
        if self.method == "shaw":
            y = shaw_attention(q, k, v, self.rel_k, self.rel_v, mask=mask)  # (8.1)-(8.3)
        else:
            y = scaled_dot_product_attention(q, k, v, mask)  # (3.2)           [B, H, L, d]
        return self.out_proj(y.transpose(1, 2).reshape(b, length, self.dim)), None

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, method={self.method!r}"


class PositionalLM(nn.Module):
    """A small causal (decoder-only) character LM with one position method (Chapter 8).

    Token embedding, plus a position table for ``"learned"`` (``max_len`` rows,
    eq. (7.3)) or ``"sinusoidal"`` (eq. (7.1)); then the course's pre-norm stack
    :class:`course_lib.transformer.Encoder` (GELU, ``d_ff = 4 dim``, final
    LayerNorm) run causally, whose blocks' attention is replaced by
    :class:`PositionalAttention`; a linear read-out.
    ``forward(ids [B, L]) -> logits [B, L, V]``.
    """

    def __init__(
        self,
        vocab_size: int,
        method: str,
        *,
        dim: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        max_len: int = 64,
        shaw_max_distance: int = 16,
        t5_num_buckets: int = 32,
        t5_max_distance: int = 128,
    ) -> None:
        super().__init__()
        _check_method("PositionalLM", method)
        _positive(
            "PositionalLM", vocab_size=vocab_size, dim=dim, num_layers=num_layers, max_len=max_len
        )
        self.method, self.dim = method, dim
        self.embed = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.positions = LearnedPositions(max_len, dim) if method == "learned" else None
        self.blocks = Encoder(
            num_layers, dim, num_heads, 4 * dim, norm_first=True, activation="gelu"
        )
        for layer in self.blocks.layers:
            layer.self_attn = PositionalAttention(
                dim,
                num_heads,
                method,
                shaw_max_distance=shaw_max_distance,
                t5_num_buckets=t5_num_buckets,
                t5_max_distance=t5_max_distance,
            )
        self.head = nn.Linear(dim, vocab_size)
        self._sinusoidal: dict[tuple[int, str], Tensor] = {}

    def forward(self, ids: Tensor) -> Tensor:
        if ids.dim() != 2:
            raise ValueError(f"PositionalLM: ids must be [B, L], got {_fmt(ids.shape)}")
        length = ids.shape[1]
        x = self.embed(ids)  #                                                 [B, L, E]
        if self.positions is not None:
            x = x + self.positions(length)  # (7.3); raises beyond max_len
        elif self.method == "sinusoidal":
            key = (length, str(ids.device))
            if key not in self._sinusoidal:  # once per length
                self._sinusoidal[key] = sinusoidal_table(length, self.dim, device=ids.device)
            x = x + self._sinusoidal[key]  # (7.1)
        return self.head(self.blocks(x, is_causal=True))  #                      [B, L, V]


def lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Next-token cross-entropy of ``batch = (inputs [B, L], targets [B, L])`` (for ``train``)."""
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


@torch.no_grad()
def evaluate_lm(
    model: nn.Module,
    data: Tensor,
    length: int,
    *,
    num_chars: int = 16384,
    batch_size: int = 16,
    per_position: bool = False,
) -> float | Tensor:
    """Next-token loss (nats per token) of ``model`` on the first ``num_chars`` tokens of ``data``.

    ``data`` int64 ``[N]`` is cut into consecutive windows of ``length``
    (``num_chars`` must be a multiple of ``length``), so every length scores the
    *same* ``num_chars`` targets and only the context differs.  Returns the mean
    loss, or with ``per_position=True`` the mean loss at each position of the
    window, ``[length]``.  Returns ``nan`` (or a tensor of ``nan``) when the model
    has no position ``length - 1`` (a learned table shorter than ``length``).
    Deterministic: no sampling.
    """
    _positive("evaluate_lm", length=length, num_chars=num_chars, batch_size=batch_size)
    if num_chars % length:
        raise ValueError(
            f"evaluate_lm: num_chars ({num_chars}) must be a multiple of length ({length})"
        )
    if data.dim() != 1 or data.numel() < num_chars + 1:
        raise ValueError(
            f"evaluate_lm: data must be [N] with N > num_chars={num_chars}, got {_fmt(data.shape)}"
        )
    if any(isinstance(m, LearnedPositions) and m.max_len < length for m in model.modules()):
        nan = torch.full(
            (length,), float("nan"), dtype=torch.float64
        )  # no row for the last positions
        return nan if per_position else float("nan")
    device = next(model.parameters()).device
    inputs = data[:num_chars].view(-1, length)  #                              [W, length]
    targets = data[1 : num_chars + 1].view(-1, length)
    was_training = model.training
    model.eval()
    sums = torch.zeros(length, dtype=torch.float64)
    try:
        for x, y in zip(inputs.split(batch_size), targets.split(batch_size), strict=True):
            logits = model(x.to(device))  #                                    [b, length, V]
            nll = F.cross_entropy(logits.transpose(1, 2), y.to(device), reduction="none")
            sums += nll.sum(0).double().cpu()  #                               [length]
    finally:
        model.train(was_training)
    by_position = sums / inputs.shape[0]
    return by_position if per_position else by_position.mean().item()
