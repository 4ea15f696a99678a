"""Attention: alignment scores, masks, scaled dot-product and multi-head attention.

Chapter 2 (attention for seq2seq) and Chapter 3 (self-attention).  Equation
numbers refer to those chapters; each function writes its equation beside the
code and names the tensor shapes.

Shapes.  ``B`` batch, ``T`` number of queries (target positions), ``S`` number of
keys / values (source positions), ``d_k`` query and key size, ``d_v`` value size,
``h`` heads, ``E`` model (embedding) size, ``A`` size of the additive-attention layer.

The mask convention of the whole library
----------------------------------------
A **boolean mask is True where a query MAY attend to a key** (True = keep).  A
float mask is **additive**: it is added to the scores before the softmax, so
``0`` keeps a key, ``-inf`` removes it and any finite value biases it.  Masks
broadcast against the scores ``[..., T, S]``.  A padding mask ``[B, S]`` is True
at real tokens and False at padding.  :func:`causal_mask` is True on and below
the diagonal.

PyTorch uses two opposite boolean conventions, and this module translates:

* ``torch.nn.functional.scaled_dot_product_attention``: True = take part in
  attention, the same as ours (:func:`to_torch_mask` with ``api="sdpa"`` is the identity);
* ``torch.nn.MultiheadAttention`` (``attn_mask`` and ``key_padding_mask``) and
  the ``torch.nn.Transformer*`` layers: True = *masked out*, the opposite
  (:func:`to_torch_mask` / :func:`from_torch_mask` with ``api="mha"`` negate it).

Additive masks mean the same thing everywhere and pass through unchanged.

A fully masked row (a query allowed to see no key at all) is defined, eq. (3.6):
its weights are all zero and its output is the zero vector, never NaN.  This is
also what ``scaled_dot_product_attention`` returns in PyTorch >= 2.5, whereas
``torch.nn.MultiheadAttention`` returns NaN for such a row.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.rnn import _make_gru, gru_cell
from course_lib.shapes import expect_shape, fmt_shape

__all__ = [
    # masks (Chapter 3, eqs. (3.3)-(3.4), (3.6); Chapter 2, eq. (2.8))
    "causal_mask",
    "padding_mask",
    "window_mask",
    "to_additive_mask",
    "to_torch_mask",
    "from_torch_mask",
    "masked_softmax",
    # alignment scores (Chapter 2, eqs. (2.4)-(2.7))
    "dot_score",
    "general_score",
    "additive_score",
    "concat_score",
    "attend",
    "AdditiveAttention",
    "LuongAttention",
    # seq2seq models with attention (Chapter 2, eqs. (2.9)-(2.12))
    "BahdanauSeq2Seq",
    "LuongSeq2Seq",
    # self-attention (Chapter 3, eqs. (3.1)-(3.5))
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "record_attention",
]


# ---------------------------------------------------------------------------
# Shape checks: every error names the shape that was expected.
# ---------------------------------------------------------------------------


_fmt, _need = fmt_shape, expect_shape  # course_lib.shapes


def _check_mask(where: str, mask: Tensor, scores_shape: torch.Size, name: str = "mask") -> None:
    """A mask must be bool or floating and broadcast to the scores' shape."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise ValueError(
            f"{where}: {name} must be boolean (True = may attend) or floating (added to the "
            f"scores), got dtype {mask.dtype}"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
        t, s = scores_shape[-2], scores_shape[-1]
        raise ValueError(
            f"{where}: {name} of shape {_fmt(mask.shape)} does not broadcast to the scores "
            f"{_fmt(scores_shape)}; expected [T={t}, S={s}], [B, T={t}, S={s}], "
            f"[B, 1, 1, S={s}] or another shape broadcastable to {_fmt(scores_shape)}"
        )


# ---------------------------------------------------------------------------
# Masks.  Convention: boolean True = may attend; float = added to the scores.
# ---------------------------------------------------------------------------


def causal_mask(
    t: int, s: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """The causal mask [T, S], Chapter 3, eq. (3.4): query i may attend to key j iff j <= i.

    ``s`` defaults to ``t``.  For ``s != t`` the mask is aligned at the top-left
    corner, as ``is_causal=True`` is in PyTorch.
    """
    s = t if s is None else s
    if t < 0 or s < 0:
        raise ValueError(f"causal_mask: sizes must be >= 0, got t={t}, s={s}")
    # (3.4)  allowed[i, j] = (j <= i);  additive form M_ij = 0 if j <= i else -inf
    return torch.ones(t, s, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """A key padding mask [B, S] from sequence lengths [B]: True at the first ``length`` keys."""
    _need("padding_mask", "lengths", lengths, [("B", None)])
    max_len = int(lengths.max()) if max_len is None else max_len
    if (lengths < 0).any() or (lengths > max_len).any():
        raise ValueError(
            f"padding_mask: lengths must lie in [0, {max_len}], got {lengths.tolist()}"
        )
    positions = torch.arange(max_len, device=lengths.device)  # [S]
    return positions[None, :] < lengths[:, None]  # [B, S]


def window_mask(
    t: int,
    s: int,
    window: int,
    centers: Tensor | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Local attention's window, Chapter 2, eq. (2.8): key j is allowed iff |j - p_i| <= D.

    ``window`` is the half-width ``D``; ``centers`` holds the aligned positions
    ``p_i``, shape [T] or [B, T] (float or int); by default ``p_i = i``
    (Luong's *local-m*, monotonic alignment).  Returns [T, S] or [B, T, S].
    """
    if window < 0:
        raise ValueError(f"window_mask: window must be >= 0, got {window}")
    if centers is None:
        centers = torch.arange(t, device=device)
    if centers.dim() not in (1, 2) or centers.shape[-1] != t:
        raise ValueError(
            f"window_mask: centers must be [T={t}] or [B, T={t}], got {_fmt(centers.shape)}"
        )
    j = torch.arange(s, device=centers.device)  # [S]
    # (2.8)  allowed[i, j] = |j - p_i| <= D
    return (j - centers.unsqueeze(-1)).abs() <= window


def to_additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """A boolean mask as an additive one, eq. (3.3): True -> 0, False -> -inf.

    A float mask is returned unchanged (already additive).
    """
    if mask.dtype == torch.bool:
        zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        return zeros.masked_fill(~mask, float("-inf"))
    if mask.dtype.is_floating_point:
        return mask
    raise ValueError(f"to_additive_mask: mask must be bool or floating, got dtype {mask.dtype}")


_APIS = ("sdpa", "mha")


def to_torch_mask(mask: Tensor | None, api: str) -> Tensor | None:
    """Translate one of our masks to PyTorch's convention for ``api``.

    ``api="sdpa"``: ``F.scaled_dot_product_attention(attn_mask=...)``, True = attend (no change).
    ``api="mha"``: ``nn.MultiheadAttention`` / ``nn.Transformer*`` (``attn_mask``,
    ``key_padding_mask``, ``src_mask``, ``tgt_mask``, ...), True = masked out (negated).
    Float (additive) masks and ``None`` pass through.
    """
    if api not in _APIS:
        raise ValueError(f"to_torch_mask: api must be one of {_APIS}, got {api!r}")
    if mask is None or mask.dtype != torch.bool:
        return mask
    return ~mask if api == "mha" else mask


def from_torch_mask(mask: Tensor | None, api: str) -> Tensor | None:
    """The inverse of :func:`to_torch_mask`: a PyTorch ``api`` mask in our convention."""
    if api not in _APIS:
        raise ValueError(f"from_torch_mask: api must be one of {_APIS}, got {api!r}")
    return to_torch_mask(mask, api)  # negation is its own inverse


def _apply_mask(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Scores with the mask applied: -inf where a boolean mask is False, plus an additive one."""
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    return scores + mask


def masked_softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax over the last axis with a mask, Chapter 3, eqs. (3.3) and (3.6).

    ``scores`` [..., T, S]; ``mask`` bool (True = may attend) or additive, broadcastable
    to the scores.  Returns the weights, same shape as ``scores``.

    (3.6) A row whose every entry is masked (all scores -inf) has no softmax; we
    define its weights as all zero, so it contributes a zero context vector.
    """
    if mask is not None:
        _check_mask("masked_softmax", mask, scores.shape)
    scores = _apply_mask(scores, mask)  # (3.3) s_ij + M_ij,  M_ij in {0, -inf}
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # [..., T, 1] fully masked rows
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)  # alpha_ij = e^s_ij / sum_j
    return weights.masked_fill(dead, 0.0)  # (3.6) zero weights for a fully masked row


# ---------------------------------------------------------------------------
# Alignment scores, Chapter 2.  query [B, T, d_q], keys [B, S, d_k] -> scores [B, T, S].
# ---------------------------------------------------------------------------


def _check_qk(where: str, query: Tensor, keys: Tensor, same_size: bool = False) -> None:
    _need(where, "query", query, [("B", None), ("T", None), ("d_q", None)])
    d_k = query.shape[-1] if same_size else None
    _need(where, "keys", keys, [("B", query.shape[0]), ("S", None), ("d_k", d_k)])


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
    _need("general_score", "weight", weight, [("d_q", query.shape[-1]), ("d_k", keys.shape[-1])])
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
    _need("additive_score", "w_query", w_query, [("A", None), ("d_q", query.shape[-1])])
    _need("additive_score", "w_key", w_key, [("A", w_query.shape[0]), ("d_k", keys.shape[-1])])
    _need("additive_score", "v", v, [("A", w_query.shape[0])])
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
    _need("concat_score", "weight", weight, [("A", None), ("d_q + d_k", d_q + d_k)])
    _need("concat_score", "v", v, [("A", weight.shape[0])])
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
    _need("attend", "scores", scores, [("B", None), ("T", None), ("S", None)])
    _need(
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
# Chapter 1's GRU encoder-decoder with attention.  Same task, same interface as
# course_lib.seq2seq.Seq2Seq: forward(src, tgt_in) -> logits, greedy_decode(src, T),
# so seq2seq_loss, evaluate and training.train work unchanged.
# ---------------------------------------------------------------------------


def _gru_step(gru: nn.Module, x: Tensor, h: Tensor) -> Tensor:
    """One step of a single-layer GRU layer (ours or torch's; same parameter names), eq. (1.8)-(1.11)."""
    return gru_cell(x, h, gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0)


class BahdanauSeq2Seq(nn.Module):
    """GRU encoder-decoder with additive attention, Chapter 2, eqs. (2.9)-(2.10).

    Encoder as in Chapter 1 (1.13), keeping every state ``h_1 .. h_S`` [B, S, H].
    At decoder step i, with ``s_0 = h_S``:

    * (2.4)/(2.2)/(2.3) ``c_i = sum_j alpha_ij h_j``, ``alpha_i = softmax(v^T tanh(W s_{i-1} + U h_j))``
      (the query is the *previous* decoder state, so steps run one after the other);
    * (2.9)  ``s_i = GRU([E y_{i-1}; c_i], s_{i-1})``;
    * (2.10) ``p(y_i | y_<i, x) = softmax(W_out [s_i; c_i] + b_out)``.

    ``forward(src [B, S], tgt_in [B, T]) -> logits [B, T, V]``;
    ``greedy_decode(src, length) -> [B, length]``; :meth:`alignments` gives the weights.
    """

    def __init__(
        self,
        num_symbols: int,
        emb_dim: int = 16,
        hidden_size: int = 64,
        *,
        attn_size: int | None = None,
        rnn: str = "course",
    ) -> None:
        super().__init__()
        make_gru = _make_gru(rnn, "BahdanauSeq2Seq")
        self.num_symbols = num_symbols
        self.bos = num_symbols
        self.src_emb = nn.Embedding(num_symbols, emb_dim)  # [V, E]
        self.tgt_emb = nn.Embedding(num_symbols + 1, emb_dim)  # [V + 1, E], last row = BOS
        self.encoder = make_gru(emb_dim, hidden_size)
        self.decoder = make_gru(emb_dim + hidden_size, hidden_size)  # input [E y; c]
        self.attention = AdditiveAttention(hidden_size, hidden_size, attn_size)
        self.out = nn.Linear(2 * hidden_size, num_symbols)  # W_out [V, 2H]

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Every encoder state [B, S, H] and the last one, ``s_0`` [B, H]."""
        _need("BahdanauSeq2Seq", "src", src, [("batch", None), ("time", None)])
        states, last = self.encoder(self.src_emb(src))  # [B, S, H], [1, B, H]
        return states, last[0]

    def _step(self, y_prev: Tensor, s: Tensor, states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One decoder step: (logits [B, V], new state [B, H], weights [B, S])."""
        c, alpha = self.attention(s.unsqueeze(1), states)  # (2.2)-(2.4)  [B, 1, H], [B, 1, S]
        c = c[:, 0]
        s = _gru_step(self.decoder, torch.cat([self.tgt_emb(y_prev), c], -1), s)  # (2.9) [B, H]
        return self.out(torch.cat([s, c], -1)), s, alpha[:, 0]  # (2.10)        [B, V]

    def forward_with_weights(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing: (logits [B, T, V], weights [B, T, S])."""
        _need("BahdanauSeq2Seq", "tgt_in", tgt_in, [("batch", src.shape[0]), ("time", None)])
        states, s = self.encode(src)
        logits, weights = [], []
        for i in range(tgt_in.shape[1]):
            out, s, alpha = self._step(tgt_in[:, i], s, states)
            logits.append(out)
            weights.append(alpha)
        return torch.stack(logits, 1), torch.stack(weights, 1)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits [B, T, V] for decoder inputs ``tgt_in`` [B, T]."""
        return self.forward_with_weights(src, tgt_in)[0]

    @torch.no_grad()
    def greedy_decode(
        self, src: Tensor, length: int, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Write ``length`` symbols [B, length] (and, if asked, the weights [B, length, S])."""
        states, s = self.encode(src)
        y = torch.full((src.shape[0],), self.bos, dtype=torch.long, device=src.device)
        result, weights = [], []
        for _ in range(length):
            out, s, alpha = self._step(y, s, states)
            y = out.argmax(-1)  # [B]
            result.append(y)
            weights.append(alpha)
        pred = torch.stack(result, 1)
        return (pred, torch.stack(weights, 1)) if return_weights else pred

    @torch.no_grad()
    def alignments(self, src: Tensor, length: int) -> Tensor:
        """The weights [B, length, S] of greedy decoding: the alignment heatmap."""
        return self.greedy_decode(src, length, return_weights=True)[1]


class LuongSeq2Seq(nn.Module):
    """GRU encoder-decoder with Luong attention, Chapter 2, eqs. (2.11)-(2.12).

    The decoder runs first, ``h_t = GRU(E y_{t-1}, h_{t-1})`` with ``h_0`` the last
    encoder state; then the *current* state ``h_t`` attends (so under teacher forcing
    all steps run at once):

    * ``c_t = sum_s a_t(s) hbar_s`` with ``a_t = softmax(score(h_t, hbar_s))``, score
      ``"dot"``, ``"general"`` or ``"concat"`` (2.5)-(2.7);
    * (2.11) ``htilde_t = tanh(W_c [c_t; h_t])``;
    * (2.12) ``p(y_t | y_<t, x) = softmax(W_s htilde_t + b_s)``.

    ``window=D`` makes the attention *local*: the softmax is restricted to the keys
    with ``|s - p_t| <= D`` (2.8), centred on an aligned position ``p_t``:

    * ``align="monotonic"`` (Luong's local-m): ``p_t = t``;
    * ``align="predictive"`` (local-p): ``p_t = (S - 1) sigmoid(v_p^T tanh(W_p h_t))``, and the
      weights are multiplied by ``exp(-(s - p_t)^2 / (2 sigma^2))``, ``sigma = D / 2``.

    ``window=None`` is global attention.  No input feeding (Luong's optional extension).
    """

    def __init__(
        self,
        num_symbols: int,
        emb_dim: int = 16,
        hidden_size: int = 64,
        *,
        score: str = "general",
        window: int | None = None,
        align: str = "monotonic",
        rnn: str = "course",
    ) -> None:
        super().__init__()
        make_gru = _make_gru(rnn, "LuongSeq2Seq")
        if window is not None and window < 1:
            raise ValueError(f"LuongSeq2Seq: window must be >= 1 or None, got {window}")
        if align not in ("monotonic", "predictive"):
            raise ValueError(
                f"LuongSeq2Seq: align must be 'monotonic' or 'predictive', got {align!r}"
            )
        self.num_symbols = num_symbols
        self.bos = num_symbols
        self.window = window
        self.align = align if window is not None else None
        self.src_emb = nn.Embedding(num_symbols, emb_dim)
        self.tgt_emb = nn.Embedding(num_symbols + 1, emb_dim)
        self.encoder = make_gru(emb_dim, hidden_size)
        self.decoder = make_gru(emb_dim, hidden_size)
        self.attention = LuongAttention(hidden_size, hidden_size, score)
        self.combine = nn.Linear(2 * hidden_size, hidden_size, bias=False)  # W_c [H, 2H]
        self.out = nn.Linear(hidden_size, num_symbols)  # W_s [V, H]
        if self.align == "predictive":
            self.w_p = nn.Linear(hidden_size, hidden_size, bias=False)  # W_p [H, H]
            self.v_p = nn.Linear(hidden_size, 1, bias=False)  # v_p [1, H]

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Every encoder state [B, S, H] and the last one as the decoder's ``h_0`` [1, B, H]."""
        _need("LuongSeq2Seq", "src", src, [("batch", None), ("time", None)])
        return self.encoder(self.src_emb(src))

    def _attend(self, h: Tensor, states: Tensor, t0: int = 0) -> tuple[Tensor, Tensor]:
        """Logits [B, T, V] and weights [B, T, S] for decoder states ``h`` [B, T, H] at steps t0..."""
        scores = self.attention.score(h, states)  # (2.5)-(2.7)               [B, T, S]
        t, s = h.shape[1], states.shape[1]
        if self.window is None:
            weights = masked_softmax(scores)  # global                       [B, T, S]
        elif self.align == "monotonic":  # local-m: p_t = t
            centers = torch.arange(t0, t0 + t, device=h.device)  # [T]
            weights = masked_softmax(scores, window_mask(t, s, self.window, centers))  # (2.8)
        else:  # local-p: predicted p_t and a Gaussian around it
            p = (s - 1) * torch.sigmoid(self.v_p(torch.tanh(self.w_p(h))))[..., 0]  # [B, T]
            weights = masked_softmax(scores, window_mask(t, s, self.window, p))  # (2.8)
            j = torch.arange(s, device=h.device, dtype=h.dtype)  # [S]
            sigma = self.window / 2
            weights = weights * torch.exp(-((j - p.unsqueeze(-1)) ** 2) / (2 * sigma**2))
        c = weights @ states  # (2.3)                                          [B, T, H]
        h_tilde = torch.tanh(self.combine(torch.cat([c, h], -1)))  # (2.11)     [B, T, H]
        return self.out(h_tilde), weights  # (2.12)                            [B, T, V]

    def forward_with_weights(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing: (logits [B, T, V], weights [B, T, S])."""
        _need("LuongSeq2Seq", "tgt_in", tgt_in, [("batch", src.shape[0]), ("time", None)])
        states, h0 = self.encode(src)
        h, _ = self.decoder(self.tgt_emb(tgt_in), h0)  # every h_t at once      [B, T, H]
        return self._attend(h, states)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits [B, T, V] for decoder inputs ``tgt_in`` [B, T]."""
        return self.forward_with_weights(src, tgt_in)[0]

    @torch.no_grad()
    def greedy_decode(
        self, src: Tensor, length: int, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Write ``length`` symbols [B, length] (and, if asked, the weights [B, length, S])."""
        states, h = self.encode(src)
        h = h[0]  # [B, H]
        y = torch.full((src.shape[0],), self.bos, dtype=torch.long, device=src.device)
        result, weights = [], []
        for t in range(length):
            h = _gru_step(self.decoder, self.tgt_emb(y), h)  # [B, H]
            logits, alpha = self._attend(h.unsqueeze(1), states, t)  # [B, 1, V], [B, 1, S]
            y = logits[:, 0].argmax(-1)
            result.append(y)
            weights.append(alpha[:, 0])
        pred = torch.stack(result, 1)
        return (pred, torch.stack(weights, 1)) if return_weights else pred

    @torch.no_grad()
    def alignments(self, src: Tensor, length: int) -> Tensor:
        """The weights [B, length, S] of greedy decoding: the alignment heatmap."""
        return self.greedy_decode(src, length, return_weights=True)[1]


# ---------------------------------------------------------------------------
# Self-attention, Chapter 3.
# ---------------------------------------------------------------------------


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
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention, Chapter 3, eq. (3.2).

    ``Att(Q, K, V) = softmax(Q K^T / sqrt(d_k) + M) V``

    Shapes: ``query`` [..., T, d_k], ``key`` [..., S, d_k], ``value`` [..., S, d_v]
    (leading dims equal, e.g. [B, h]).  ``mask``: bool (True = may attend) or additive,
    broadcastable to the scores [..., T, S].  ``is_causal=True`` also applies
    :func:`causal_mask` (3.4) (combined with ``mask`` if both are given).  ``scale``
    defaults to ``1 / sqrt(d_k)``.  ``dropout_p`` drops weights (pass 0 in eval).

    Returns the output [..., T, d_v], or ``(output, weights [..., T, S])`` when
    ``return_weights``.  A fully masked row gives zero weights and a zero output (3.6).
    """
    where = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.dim() < 2:
            raise ValueError(
                f"{where}: {name} must be a tensor [..., n, d], got {_fmt(getattr(t, 'shape', ()))}"
            )
    lead, (t_len, d_k) = query.shape[:-2], query.shape[-2:]
    s_len = key.shape[-2]
    if key.shape != (*lead, s_len, d_k):
        raise ValueError(
            f"{where}: key must be [..., S, d_k={d_k}] with leading dims {_fmt(lead)} "
            f"like query {_fmt(query.shape)}, got {_fmt(key.shape)}"
        )
    if value.shape[:-1] != (*lead, s_len):
        raise ValueError(
            f"{where}: value must be [..., S={s_len}, d_v] with leading dims {_fmt(lead)}, "
            f"got {_fmt(value.shape)}"
        )
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale  # Q K^T / sqrt(d_k)     [..., T, S]
    if mask is not None:
        _check_mask(where, mask, scores.shape)
    if is_causal:
        causal = causal_mask(t_len, s_len, device=query.device)  # (3.4)      [T, S]
        scores = _apply_mask(scores, causal)
    weights = masked_softmax(scores, mask)  # (3.3), (3.6)                     [..., T, S]
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p)
    out = weights @ value  # (3.2)  softmax(...) V                             [..., T, d_v]
    return (out, weights) if return_weights else out


class MultiHeadAttention(nn.Module):
    """Multi-head attention, Chapter 3, eq. (3.5), batch first.

    ``head_r = Att(Q W_Q^r, K W_K^r, V W_V^r)``,  ``MHA(Q, K, V) = Concat(head_1..head_h) W_O``

    Parameters use ``torch.nn.MultiheadAttention``'s names and layout, so its
    ``state_dict`` loads unchanged: ``in_proj_weight`` [3E, E] = [W_Q; W_K; W_V]
    (rows of head r are ``r*d .. (r+1)*d`` inside each block, d = E / h),
    ``in_proj_bias`` [3E], ``out_proj`` (W_O, [E, E], with bias).

    ``forward(query [B, T, E], key [B, S, E] = query, value = key, *, mask, key_padding_mask,
    is_causal, need_weights) -> (output [B, T, E], weights [B, h, T, S] or None)``.
    ``mask``: our convention, [T, S], [B, T, S] or [B, h, T, S]; ``key_padding_mask``
    [B, S], True at real tokens.  A query that may see no key outputs ``out_proj.bias``
    (its attention output is zero, (3.6)).
    """

    def __init__(
        self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim ({embed_dim}) must be a positive multiple "
                f"of num_heads ({num_heads})"
            )
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))  # [3E, E]
        if bias:
            self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))  # [3E]
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # W_O [E, E]
        nn.init.xavier_uniform_(self.in_proj_weight)  # torch's initialisation
        if bias:
            nn.init.zeros_(self.out_proj.bias)
        self.record = False  # set by record_attention
        self.last_weights: Tensor | None = None

    def _mask(
        self, mask: Tensor | None, key_padding_mask: Tensor | None, b: int, t: int, s: int
    ) -> Tensor | None:
        """Merge ``mask`` and ``key_padding_mask`` into one mask broadcastable to [B, h, T, S]."""
        h = self.num_heads
        if mask is not None:
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)  # [B, T, S] -> [B, 1, T, S]
            _check_mask("MultiHeadAttention", mask, torch.Size([b, h, t, s]))
        if key_padding_mask is not None:
            _need("MultiHeadAttention", "key_padding_mask", key_padding_mask, [("B", b), ("S", s)])
            kpm = key_padding_mask[:, None, None, :]  # [B, 1, 1, S]
            if mask is None:
                return kpm
            if kpm.dtype == torch.bool and mask.dtype == torch.bool:
                return mask & kpm
            return to_additive_mask(mask) + to_additive_mask(kpm)
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
        e, h, d = self.embed_dim, self.num_heads, self.head_dim
        _need("MultiHeadAttention", "query", query, [("B", None), ("T", None), ("E", e)])
        b, t = query.shape[:2]
        _need("MultiHeadAttention", "key", key, [("B", b), ("S", None), ("E", e)])
        s = key.shape[1]
        _need("MultiHeadAttention", "value", value, [("B", b), ("S", s), ("E", e)])
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)  # each [E, E]
        b_q, b_k, b_v = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.chunk(3)

        def heads(x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
            # (3.1) x W^T + b, then split E = h * d into heads: [B, n, E] -> [B, h, n, d]
            return F.linear(x, w, bias).unflatten(-1, (h, d)).transpose(1, 2)

        q, k, v = heads(query, w_q, b_q), heads(key, w_k, b_k), heads(value, w_v, b_v)
        merged = self._mask(mask, key_padding_mask, b, t, s)  # [B or 1, h or 1, T or 1, S]
        keep = need_weights or self.record
        res = scaled_dot_product_attention(  # (3.2), every head at once       [B, h, T, d]
            q,
            k,
            v,
            merged,
            is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            return_weights=keep,
        )
        out, weights = res if keep else (res, None)
        if self.record:
            self.last_weights = weights.detach()
        out = self.out_proj(out.transpose(1, 2).flatten(2))  # (3.5) Concat(heads) W_O  [B, T, E]
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
