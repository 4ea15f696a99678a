"""Attention masks: the library's convention, the masks themselves and the masked softmax.

Chapter 3, eqs. (3.3), (3.4) and (3.5), and Chapter 2's local window, eq. (2.13).
Every attention function of the course (:mod:`course_lib.attention`, the
Transformer blocks, the graph layers) takes its masks in this convention.

Shapes (``book/notation.md``): ``B`` batch, ``T`` queries, ``S`` keys, ``h`` heads.

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

A fully masked row (a query allowed to see no key at all) is defined, eq. (3.5):
its weights are all zero and its output is the zero vector, never NaN.  This is
also what ``scaled_dot_product_attention`` returns in PyTorch >= 2.5, whereas
``torch.nn.MultiheadAttention`` returns NaN for such a row.
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_lib.shapes import expect_shape, fmt_shape

__all__ = [
    "causal_mask",
    "padding_mask",
    "window_mask",
    "to_additive_mask",
    "merge_masks",
    "to_torch_mask",
    "from_torch_mask",
    "masked_softmax",
    "check_mask",
]


def check_mask(where: str, mask: Tensor, scores_shape: torch.Size, name: str = "mask") -> None:
    """Raise unless ``mask`` is bool or floating and broadcasts to the scores' shape.

    ``where`` names the calling function in the error, as in :func:`course_lib.shapes.expect_shape`.
    """
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
            f"{where}: {name} of shape {fmt_shape(mask.shape)} does not broadcast to the scores "
            f"{fmt_shape(scores_shape)}; expected [T={t}, S={s}], [B, T={t}, S={s}], "
            f"[B, 1, 1, S={s}] or another shape broadcastable to {fmt_shape(scores_shape)}"
        )


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
    expect_shape("padding_mask", "lengths", lengths, [("B", None)])
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
    """Local attention's window, Chapter 2, eq. (2.13): key j is allowed iff |j - p_i| <= window.

    ``window`` is the half-width (written ``D`` in (2.13): a number of positions, not
    a shape); ``centers`` holds the aligned positions ``p_i``, shape [T] or [B, T]
    (float or int); by default ``p_i = i`` (Luong's *local-m*, monotonic
    alignment).  Returns [T, S] or [B, T, S].
    """
    if window < 0:
        raise ValueError(f"window_mask: window must be >= 0, got {window}")
    if centers is None:
        centers = torch.arange(t, device=device)
    if centers.dim() not in (1, 2) or centers.shape[-1] != t:
        raise ValueError(
            f"window_mask: centers must be [T={t}] or [B, T={t}], got {fmt_shape(centers.shape)}"
        )
    keys = torch.arange(s, device=centers.device)  # j                     [S]
    # (2.13) allowed[i, j] = |j - p_i| <= window                           [T, S] or [B, T, S]
    return (keys - centers.unsqueeze(-1)).abs() <= window


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


def merge_masks(first: Tensor | None, second: Tensor | None) -> Tensor | None:
    """Both masks at once: a key is allowed iff both allow it (biases add up).

    Two boolean masks give their ``&``; otherwise both are made additive, eq. (3.3),
    and summed.  Either may be ``None``.  The result broadcasts like ``first + second``.
    """
    if first is None or second is None:
        return second if first is None else first
    if first.dtype == torch.bool and second.dtype == torch.bool:
        return first & second
    dtype = first.dtype if first.dtype.is_floating_point else second.dtype
    return to_additive_mask(first, dtype) + to_additive_mask(second, dtype)


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
    return scores + mask.to(scores.dtype)  # the weights keep the scores' dtype


def masked_softmax(scores: Tensor, mask: Tensor | None = None, *, check: bool = True) -> Tensor:
    """Softmax over the last axis with a mask, Chapter 3, eqs. (3.3) and (3.5).

    ``scores`` [..., T, S]; ``mask`` bool (True = may attend) or additive, broadcastable
    to the scores.  Returns the weights, same shape as ``scores``.

    (3.5) A row whose every entry is masked (all scores -inf) has no softmax; we
    define its weights as all zero, so it contributes a zero context vector.

    Memory: one [..., T, S] buffer is kept for the backward pass (the weights), as in
    PyTorch's own softmax.  The fix-up for fully masked rows costs nothing unless such
    a row exists: only then is the softmax recomputed on safe inputs (its gradient
    would be NaN otherwise).  ``check=False`` skips the mask's check, for a caller that
    has made it.
    """
    if check and mask is not None:
        check_mask("masked_softmax", mask, scores.shape)
    scores = _apply_mask(scores, mask)  # (3.3) s_ij + M_ij,  M_ij in {0, -inf}
    weights = torch.softmax(scores, dim=-1)  # e^s_ij / sum_j; an all -inf row gives NaN
    if scores.shape[-1] == 0 or not torch.isnan(weights[..., 0]).any():
        return weights  # the common case: every row sees at least one key
    fully_masked = torch.isneginf(scores).all(dim=-1, keepdim=True)  # rows     [..., T, 1]
    weights = torch.softmax(scores.masked_fill(fully_masked, 0.0), dim=-1)
    return weights.masked_fill(fully_masked, 0.0)  # (3.5) zero weights for a fully masked row
