"""Attention: Chapter 2's alignment scores and Chapter 3's scaled dot-product and multi-head attention.

Chapter 2 (attention for seq2seq): the four classic scores, eqs. (2.4)-(2.7), the weights
and context they give, eqs. (2.2)-(2.3), and the modules :class:`AdditiveAttention` and
:class:`LuongAttention`; the seq2seq models that use them are in :mod:`course_lib.seq2seq`.
Chapter 3 (self-attention): :func:`scaled_dot_product_attention`, eq. (3.2),
:class:`MultiHeadAttention`, eq. (3.6), and :func:`record_attention`.  Chapter 6 (the
geometry of attention): :func:`cosine_attention`, eq. (6.6).  Equation numbers refer to
those chapters; each function writes its equation beside the code and names the shapes.

Shapes (``book/notation.md``).  ``B`` batch, ``T`` queries (target positions), ``S`` keys
and values (source positions), ``D`` model width, ``h`` heads, ``d`` width of one head
(``d_k`` for queries and keys, ``d_v`` for values where the two differ; Chapter 2's scores
also take queries of another width, ``d_q``), ``A`` hidden size of additive attention.

Masks follow the library's convention, :mod:`course_lib.masks`: a boolean mask
is True where a query may attend, a float mask is added to the scores, and a
query that may see no key gets zero weights, eq. (3.5).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.masks import causal_mask, check_mask, masked_softmax, merge_masks
from course_lib.shapes import expect_shape, fmt_shape

__all__ = [
    # alignment scores (Chapter 2, eqs. (2.2)-(2.7))
    "dot_score",
    "general_score",
    "additive_score",
    "concat_score",
    "attend",
    "AdditiveAttention",
    "LuongAttention",
    # self-attention (Chapter 3, eqs. (3.1)-(3.6))
    "scaled_dot_product_attention",
    "cosine_attention",
    "MultiHeadAttention",
    "record_attention",
]


# ---------------------------------------------------------------------------
# Alignment scores, Chapter 2.  query [B, T, d_q], keys [B, S, d_k] -> scores [B, T, S].
# ---------------------------------------------------------------------------


def _check_qk(where: str, query: Tensor, keys: Tensor, same_size: bool = False) -> None:
    expect_shape(where, "query", query, [("B", None), ("T", None), ("d_q", None)])
    d_k = query.shape[-1] if same_size else None
    expect_shape(where, "keys", keys, [("B", query.shape[0]), ("S", None), ("d_k", d_k)])


def dot_score(query: Tensor, keys: Tensor) -> Tensor:
    """Luong's *dot* score, Chapter 2, eq. (2.5): ``e_ij = s_i . h_j``.

    ``query`` [B, T, d], ``keys`` [B, S, d] (same size d) -> scores [B, T, S].
    """
    _check_qk("dot_score", query, keys, same_size=True)
    return query @ keys.transpose(-2, -1)  # (2.5)  e = Q K^T              [B, T, S]


def general_score(query: Tensor, keys: Tensor, weight: Tensor) -> Tensor:
    """Luong's *general* (bilinear) score, Chapter 2, eq. (2.6): ``e_ij = s_i^T W h_j``.

    ``query`` [B, T, d_q], ``keys`` [B, S, d_k], ``weight`` W [d_q, d_k] (the
    layout of ``nn.Linear(d_k, d_q, bias=False).weight``) -> scores [B, T, S].
    """
    _check_qk("general_score", query, keys)
    expect_shape(
        "general_score", "weight", weight, [("d_q", query.shape[-1]), ("d_k", keys.shape[-1])]
    )
    # (2.6)  e_ij = s_i^T (W h_j)                                              [B, T, S]
    return query @ F.linear(keys, weight).transpose(-2, -1)


def additive_score(
    query: Tensor, keys: Tensor, w_query: Tensor, w_key: Tensor, v: Tensor
) -> Tensor:
    """Bahdanau's *additive* score, Chapter 2, eq. (2.4): ``e_ij = v^T tanh(W s_i + U h_j)``.

    ``query`` [B, T, d_q], ``keys`` [B, S, d_k], ``w_query`` W [A, d_q], ``w_key``
    U [A, d_k], ``v`` [A] -> scores [B, T, S].  A one-hidden-layer network of the
    pair (s_i, h_j), evaluated for every pair.
    """
    _check_qk("additive_score", query, keys)
    expect_shape("additive_score", "w_query", w_query, [("A", None), ("d_q", query.shape[-1])])
    expect_shape(
        "additive_score", "w_key", w_key, [("A", w_query.shape[0]), ("d_k", keys.shape[-1])]
    )
    expect_shape("additive_score", "v", v, [("A", w_query.shape[0])])
    wq = F.linear(query, w_query)  # W s_i                                     [B, T, A]
    uk = F.linear(keys, w_key)  # U h_j                                        [B, S, A]
    # (2.4)  e_ij = v^T tanh(W s_i + U h_j)                                    [B, T, S]
    return torch.tanh(wq.unsqueeze(2) + uk.unsqueeze(1)) @ v


def concat_score(query: Tensor, keys: Tensor, weight: Tensor, v: Tensor) -> Tensor:
    """Luong's *concat* score, Chapter 2, eq. (2.7): ``e_ij = v^T tanh(W [s_i; h_j])``.

    ``query`` [B, T, d_q], ``keys`` [B, S, d_k], ``weight`` W [A, d_q + d_k], ``v`` [A]
    -> scores [B, T, S].  Computed literally, by concatenating every pair.  Writing
    W = [W_s | W_h] shows it is *exactly* the additive score (2.4) with
    ``w_query = W_s``, ``w_key = W_h`` (Chapter 2 checks this numerically).
    """
    _check_qk("concat_score", query, keys)
    d_q, d_k = query.shape[-1], keys.shape[-1]
    expect_shape("concat_score", "weight", weight, [("A", None), ("d_q + d_k", d_q + d_k)])
    expect_shape("concat_score", "v", v, [("A", weight.shape[0])])
    b, t, s = query.shape[0], query.shape[1], keys.shape[1]
    pairs = torch.cat(  # [s_i; h_j] for every (i, j)                      [B, T, S, d_q + d_k]
        [query.unsqueeze(2).expand(b, t, s, d_q), keys.unsqueeze(1).expand(b, t, s, d_k)], dim=-1
    )
    return torch.tanh(F.linear(pairs, weight)) @ v  # (2.7)                    [B, T, S]


def attend(scores: Tensor, values: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Weights and context from scores, Chapter 2, eqs. (2.2)-(2.3).

    ``scores`` [B, T, S], ``values`` [B, S, d_v], ``mask`` broadcastable to [B, T, S]
    (our convention).  Returns ``(context [B, T, d_v], weights [B, T, S])`` with
    ``alpha_ij = softmax_j(e_ij)`` (2.2) and ``c_i = sum_j alpha_ij h_j`` (2.3).
    """
    expect_shape("attend", "scores", scores, [("B", None), ("T", None), ("S", None)])
    expect_shape(
        "attend", "values", values, [("B", scores.shape[0]), ("S", scores.shape[2]), ("d_v", None)]
    )
    weights = masked_softmax(scores, mask)  # (2.2)                             [B, T, S]
    return weights @ values, weights  # (2.3)  c_i = sum_j alpha_ij h_j         [B, T, d_v]


class AdditiveAttention(nn.Module):
    """Bahdanau attention, Chapter 2, eqs. (2.2)-(2.4), as a module.

    Parameters: ``w_query`` (W [A, d_q]), ``w_key`` (U [A, d_k]), ``v`` [A]; no biases,
    as in the paper.  ``forward(query [B, T, d_q], keys [B, S, d_k], values=keys,
    mask=None) -> (context [B, T, d_v], weights [B, T, S])``.
    """

    def __init__(self, query_size: int, key_size: int, attn_size: int | None = None) -> None:
        super().__init__()
        attn_size = attn_size or key_size
        self.w_query = nn.Linear(query_size, attn_size, bias=False)  # W [A, d_q]
        self.w_key = nn.Linear(key_size, attn_size, bias=False)  # U [A, d_k]
        self.v = nn.Parameter(torch.empty(attn_size).uniform_(-1, 1) / math.sqrt(attn_size))

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """The scores (2.4), [B, T, S]."""
        return additive_score(query, keys, self.w_query.weight, self.w_key.weight, self.v)

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        return attend(self.score(query, keys), keys if values is None else values, mask)


LUONG_SCORES = ("dot", "general", "concat")


class LuongAttention(nn.Module):
    """Luong attention with the dot, general or concat score, Chapter 2, eqs. (2.5)-(2.7).

    ``score="dot"`` has no parameters (needs d_q = d_k); ``"general"`` has ``weight``
    W [d_q, d_k]; ``"concat"`` has ``weight`` W [A, d_q + d_k] and ``v`` [A].
    ``forward(query [B, T, d_q], keys [B, S, d_k], values=keys, mask=None)
    -> (context [B, T, d_v], weights [B, T, S])``.
    """

    def __init__(
        self, query_size: int, key_size: int, score: str = "general", attn_size: int | None = None
    ) -> None:
        super().__init__()
        if score not in LUONG_SCORES:
            raise ValueError(f"LuongAttention: score must be one of {LUONG_SCORES}, got {score!r}")
        if score == "dot" and query_size != key_size:
            raise ValueError(
                f"LuongAttention: the dot score needs query_size == key_size, "
                f"got {query_size} and {key_size}"
            )
        self.kind = score
        if score == "general":
            self.weight = nn.Parameter(nn.Linear(key_size, query_size, bias=False).weight.data)
        elif score == "concat":
            attn_size = attn_size or key_size
            self.weight = nn.Parameter(
                nn.Linear(query_size + key_size, attn_size, bias=False).weight.data
            )
            self.v = nn.Parameter(torch.empty(attn_size).uniform_(-1, 1) / math.sqrt(attn_size))

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """The scores (2.5), (2.6) or (2.7), [B, T, S]."""
        if self.kind == "dot":
            return dot_score(query, keys)
        if self.kind == "general":
            return general_score(query, keys, self.weight)
        return concat_score(query, keys, self.weight, self.v)

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        return attend(self.score(query, keys), keys if values is None else values, mask)

    def extra_repr(self) -> str:
        return f"score={self.kind!r}"


# ---------------------------------------------------------------------------
# Self-attention, Chapter 3.
# ---------------------------------------------------------------------------


def _check_qkv(where: str, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
    """Raise unless ``query`` [..., T, d_k], ``key`` [..., S, d_k], ``value`` [..., S, d_v]
    share their leading dims (which vary, hence no expect_shape; the messages have its form)
    and ``mask`` (if any) broadcasts to the scores [..., T, S]."""
    for name, x, rows in (("query", query, "T"), ("key", key, "S"), ("value", value, "S")):
        if not isinstance(x, Tensor) or x.dim() < 2:
            shape = fmt_shape(getattr(x, "shape", ()))
            raise ValueError(f"{where}: {name} must be a tensor [..., {rows}, d], got {shape}")
    lead, (t_len, d_k) = query.shape[:-2], query.shape[-2:]
    s_len = key.shape[-2]
    if key.shape != (*lead, s_len, d_k):
        raise ValueError(
            f"{where}: key must be [..., S, d_k={d_k}] with leading dims {fmt_shape(lead)} "
            f"like query {fmt_shape(query.shape)}, got {fmt_shape(key.shape)}"
        )
    if value.shape[:-1] != (*lead, s_len):
        raise ValueError(
            f"{where}: value must be [..., S={s_len}, d_v] with leading dims {fmt_shape(lead)}, "
            f"got {fmt_shape(value.shape)}"
        )
    if mask is not None:
        check_mask(where, mask, torch.Size((*lead, t_len, s_len)))


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    check: bool = True,
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention, Chapter 3, eq. (3.2).

    ``Att(Q, K, V) = softmax(Q K^T / sqrt(d_k) + M) V``

    Shapes: ``query`` [..., T, d_k], ``key`` [..., S, d_k], ``value`` [..., S, d_v]
    (leading dims equal, e.g. [B, h]).  ``mask``: bool (True = may attend) or additive,
    broadcastable to the scores [..., T, S].  ``is_causal=True`` also applies
    :func:`causal_mask` (3.4) (combined with ``mask`` if both are given).  ``scale``
    defaults to ``1 / sqrt(d_k)``.  ``dropout_p`` drops weights (pass 0 in eval).

    Returns the output [..., T, d_v], or ``(output, weights [..., T, S])`` when
    ``return_weights``.  A fully masked row gives zero weights and a zero output (3.5).
    ``check=False`` skips the argument checks (for a caller that has made them).
    """
    if check:  # False from a caller that has checked these already (MultiHeadAttention)
        _check_qkv("scaled_dot_product_attention", query, key, value, mask)
    t_len, d_k, s_len = query.shape[-2], query.shape[-1], key.shape[-2]
    if is_causal:  # (3.4), folded into the mask so the scores are masked in one pass
        mask = merge_masks(mask, causal_mask(t_len, s_len, device=query.device))
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    scores = query @ key.transpose(-2, -1)  # Q K^T                          [..., T, S]
    scores.mul_(scale)  # / sqrt(d_k), in place: no second [..., T, S] buffer
    weights = masked_softmax(scores, mask, check=False)  # (3.3), (3.5)        [..., T, S]
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p)
    out = weights @ value  # (3.2)  softmax(...) V                             [..., T, d_v]
    return (out, weights) if return_weights else out


def cosine_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    scale: float | Tensor,
    mask: Tensor | None = None,
    *,
    eps: float = 1e-6,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Cosine (QK-normalised) attention, Chapter 6, eq. (6.6).

    ``softmax(scale * cos(q_i, k_j) + M) V``, with ``cos(q, k) = q . k / (|q| |k|)``:
    queries and keys are scaled to unit length first, so every score lies in
    ``[-scale, scale]`` whatever the norms, and the sharpness of the weights is
    set by ``scale`` alone (an inverse temperature ``1 / T``; Swin Transformer v2
    and QK-norm models learn it).  ``scale`` is a positive number or a 0-dim
    tensor (a parameter: gradients reach it).  Shapes and ``mask`` as
    :func:`scaled_dot_product_attention`: ``query`` [..., T, d], ``key`` [..., S, d],
    ``value`` [..., S, d_v] -> [..., T, d_v] (and the weights [..., T, S]).
    """
    if isinstance(scale, Tensor):
        if scale.dim() != 0:
            raise ValueError(
                f"cosine_attention: scale must be a number or a 0-dim tensor, "
                f"got a tensor of shape {fmt_shape(scale.shape)}"
            )
        positive = bool(scale.detach() > 0)
    else:
        positive = scale > 0
    if not positive:
        raise ValueError(
            f"cosine_attention: scale must be > 0 (it is 1 / temperature), got {float(scale)}; "
            "learn log(scale) and pass its exp() to keep it positive"
        )
    q = F.normalize(query, dim=-1, eps=eps)  # q_i / |q_i|                    [..., T, d]
    k = F.normalize(key, dim=-1, eps=eps)  # k_j / |k_j|                      [..., S, d]
    return scaled_dot_product_attention(  # (6.6): softmax(scale cos + M) V
        q, k, value, mask, scale=scale, return_weights=return_weights
    )


def _fused_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, dropout_p: float
) -> Tensor:
    """Eq. (3.2) through ``torch.nn.functional.scaled_dot_product_attention``: the fast path
    of :class:`MultiHeadAttention` when nobody needs the weights.  PyTorch's fused kernels
    never store the [B, h, T, S] weights, so they are faster and lighter than
    :func:`scaled_dot_product_attention`, the equation as written; both give the same output
    and gradients, fully masked rows included (``tests/test_attention.py``).  Shapes as
    there: ``q`` [B, h, T, d], ``k``, ``v`` [B, h, S, d] -> [B, h, T, d].
    """
    if q.device.type == "cpu" and torch._C._functorch.is_batchedtensor(q) and mask is None:
        from course_lib.ensemble import folded_attention  # Stacked's K members in one call

        return folded_attention(q, k, v, is_causal, dropout_p)
    if is_causal and mask is not None:  # torch takes one or the other: fold (3.4) in
        mask = merge_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device))
        is_causal = False
    if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)  # an additive mask must have the queries' dtype
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal
    )


class MultiHeadAttention(nn.Module):
    """Multi-head attention, Chapter 3, eq. (3.6), batch first.

    ``head_r = Att(Q W_Q^r, K W_K^r, V W_V^r)``,  ``MHA(Q, K, V) = Concat(head_1..head_h) W_O``

    Argument and parameter names follow ``torch.nn.MultiheadAttention`` on purpose
    (``embed_dim`` is the model width D, ``num_heads`` is h), and so does the layout,
    so its ``state_dict`` loads unchanged: ``in_proj_weight`` [3D, D] = [W_Q; W_K; W_V]
    (rows of head r are ``r*d .. (r+1)*d`` inside each block, d = D / h),
    ``in_proj_bias`` [3D], ``out_proj`` (W_O, [D, D], with bias).

    ``forward(query [B, T, D], key [B, S, D] = query, value = key, *, mask, key_padding_mask,
    is_causal, need_weights) -> (output [B, T, D], weights [B, h, T, S] or None)``.
    ``mask``: our convention, [T, S], [B, T, S] or [B, h, T, S]; ``key_padding_mask``
    [B, S], True at real tokens.  A query that may see no key outputs ``out_proj.bias``
    (its attention output is zero, (3.5)).

    ``position``: a relative-position method of Chapter 8 (a
    :class:`course_lib.position_hooks.PositionHook`, kept as the submodule ``position``).
    It may rotate the heads' queries and keys (RoPE), add a bias to their scores
    (T5, ALiBi, Shaw's key term) and add a term to their outputs (Shaw's value
    term); without it this is the attention of Chapter 3.

    Two paths compute eq. (3.2).  When the weights are wanted (``need_weights``,
    :func:`record_attention`, or a position method whose value term reads them), the
    heads go through :func:`scaled_dot_product_attention`, the equation as written.
    Otherwise they go through PyTorch's fused kernel (``_fused_attention``), which
    never stores the weights; the test suite checks that both give the same outputs
    and gradients.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        position: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim ({embed_dim}) must be a positive multiple "
                f"of num_heads ({num_heads})"
            )
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))  # [3D, D]
        if bias:
            self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))  # [3D]
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # W_O [D, D]
        nn.init.xavier_uniform_(self.in_proj_weight)  # torch's initialisation
        if bias:
            nn.init.zeros_(self.out_proj.bias)
        self.position = position  # Chapter 8's hook, or None
        self.record = False  # set by record_attention
        self.last_weights: Tensor | None = None

    def _merge_masks(
        self, mask: Tensor | None, key_padding_mask: Tensor | None, b: int, t: int, s: int
    ) -> Tensor | None:
        """Check ``mask`` and ``key_padding_mask`` once and merge them: one mask [B, h, T, S]."""
        h = self.num_heads
        if mask is not None:
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)  # [B, T, S] -> [B, 1, T, S]
            check_mask("MultiHeadAttention", mask, torch.Size([b, h, t, s]))
        if key_padding_mask is not None:
            padding = key_padding_mask
            expect_shape("MultiHeadAttention", "key_padding_mask", padding, [("B", b), ("S", s)])
            check_mask("MultiHeadAttention", padding, torch.Size([b, s]), "key_padding_mask")
            mask = merge_masks(mask, padding[:, None, None, :])  # [B, 1, 1, S]
        return mask

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        key = query if key is None else key
        value = key if value is None else value
        width, h, d = self.embed_dim, self.num_heads, self.head_dim  # D, h, d
        where = "MultiHeadAttention"
        expect_shape(where, "query", query, [("B", None), ("T", None), ("D", width)])
        b, t = query.shape[:2]
        expect_shape(where, "key", key, [("B", b), ("S", None), ("D", width)])
        s = key.shape[1]
        expect_shape(where, "value", value, [("B", b), ("S", s), ("D", width)])
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)  # each [D, D]
        b_q, b_k, b_v = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.chunk(3)

        def heads(x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
            # (3.1) x W^T + b, then split D = h * d into heads: [B, n, D] -> [B, h, n, d],
            # n = T for the queries, S for the keys and values
            return F.linear(x, w, bias).unflatten(-1, (h, d)).transpose(1, 2)

        q, k, v = heads(query, w_q, b_q), heads(key, w_k, b_k), heads(value, w_v, b_v)
        merged = self._merge_masks(mask, key_padding_mask, b, t, s)  # [B or 1, h or 1, T or 1, S]
        if self.position is not None:  # Chapter 8: relative positions
            q, k = self.position.rotate(q, k)  # RoPE (8.7)
            bias = self.position.score_bias(q, k)  # T5, ALiBi, Shaw    [h or B.., T, S]
            merged = merge_masks(merged, bias)
        dropout_p = self.dropout if self.training else 0.0
        value_term = self.position is not None and self.position.needs_weights
        if need_weights or self.record or value_term:  # the teaching form, weights formed
            out, weights = scaled_dot_product_attention(  # (3.2), all heads  [B, h, T, d]
                q, k, v, merged, is_causal=is_causal, dropout_p=dropout_p, return_weights=True,
                check=False,  # checked once: above, and the masks in _merge_masks
            )  # fmt: skip
        else:  # the same equation, PyTorch's fused kernel
            out, weights = _fused_attention(q, k, v, merged, is_causal, dropout_p), None
        if value_term:
            out = out + self.position.value_term(weights)  # Chapter 8, Shaw (8.2)  [B, h, T, d]
        if self.record:
            self.last_weights = weights.detach()
        out = self.out_proj(out.transpose(1, 2).flatten(2))  # (3.6) Concat(heads) W_O  [B, T, D]
        return out, (weights if need_weights else None)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}"


@contextlib.contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Record the weights of every :class:`MultiHeadAttention` inside ``model``.

    ``with record_attention(model) as maps: model(...)`` leaves in ``maps`` one entry per
    attention module, named as in ``model.named_modules()``, holding the weights
    [B, h, T, S] of that module's last call.
    """
    modules = {name: m for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)}
    maps: dict[str, Tensor] = {}
    for m in modules.values():
        m.record, m.last_weights = True, None
    try:
        yield maps
    finally:
        for name, m in modules.items():
            if m.last_weights is not None:
                maps[name] = m.last_weights
            m.record, m.last_weights = False, None
