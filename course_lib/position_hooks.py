"""Chapter 8's relative positions as hooks of one attention class.

Each relative-position method of :mod:`course_lib.relative` reaches the model
through one attention class: each is a small :class:`PositionHook`
(:class:`ShawPositions`, :class:`T5Bias`, :class:`ALiBi`, :class:`RoPE`) handed
to :class:`course_lib.attention.MultiHeadAttention` as ``position=``, which lets
it rotate the heads' queries and keys, add a bias to their scores, or add a term
to their outputs.  :func:`position_hook` builds one by name;
:class:`course_lib.lm.PositionalLM` is the language model of Chapter 8's
extrapolation experiment, and :func:`rope_scaling` applies position
interpolation, eq. (8.9), to every RoPE hook of a model.

Shapes (``book/notation.md``): ``B`` batch, ``h`` heads, ``T`` query positions,
``S`` key positions, ``d`` a head's width.  Equation numbers refer to Chapter 8.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from course_lib.positional import _frequency_args
from course_lib.relative import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_cos_sin,
    shaw_key_bias,
    shaw_value_term,
    t5_bias,
)
from course_lib.shapes import expect_positive

__all__ = [
    "PositionHook",
    "ShawPositions",
    "T5Bias",
    "ALiBi",
    "RoPE",
    "rope_scaling",
    "POSITION_METHODS",
    "position_hook",
]


class PositionHook(nn.Module):
    """A relative-position method, as :class:`course_lib.attention.MultiHeadAttention` sees it.

    The attention calls three methods on its heads, ``q`` [B, h, T, d],
    ``k`` [B, h, S, d] and the weights [B, h, T, S].  Each does nothing here; a
    method overrides the ones it changes (one attention class, small hooks):

    * ``rotate(q, k) -> (q, k)``: RoPE rotates queries and keys, eq. (8.7);
    * ``score_bias(q, k) -> [h, T, S]`` (or [B, h, T, S], or ``None``): added
      to ``q k^T / sqrt(d)`` before the softmax: Shaw's key term (8.1), T5's
      bucket bias (8.4), ALiBi's penalty (8.5);
    * ``value_term(weights) -> [B, h, T, d]`` (or ``None``): added to the heads'
      output: Shaw's value term (8.2).

    :attr:`needs_weights` is True for a method that overrides ``value_term``:
    the attention then computes the weights explicitly (Chapter 3's teaching form of
    eq. (3.2)) instead of calling PyTorch's fused kernel, which never forms them.
    """

    @property
    def needs_weights(self) -> bool:
        """Whether ``value_term`` is overridden, so the weights must be formed."""
        return type(self).value_term is not PositionHook.value_term

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q, k

    def score_bias(self, q: Tensor, k: Tensor) -> Tensor | None:
        return None

    def value_term(self, weights: Tensor) -> Tensor | None:
        return None


class ShawPositions(PositionHook):
    """Shaw et al.'s key and value tables ``[2K+1, d]``, shared by the heads, eqs. (8.1)-(8.3)."""

    def __init__(self, head_dim: int, max_distance: int = 16, init_std: float = 0.02) -> None:
        super().__init__()
        expect_positive("ShawPositions", head_dim=head_dim)
        rows = 2 * max_distance + 1
        self.rel_k = nn.Parameter(torch.randn(rows, head_dim) * init_std)  # a^K  [2K+1, d]
        self.rel_v = nn.Parameter(torch.randn(rows, head_dim) * init_std)  # a^V  [2K+1, d]

    def score_bias(self, q: Tensor, k: Tensor) -> Tensor:
        return shaw_key_bias(q, self.rel_k, k.shape[-2])  # (8.1)           [B, h, T, S]

    def value_term(self, weights: Tensor) -> Tensor:
        return shaw_value_term(weights, self.rel_v)  # (8.2)              [B, h, T, d]


class T5Bias(PositionHook):
    """T5's learned scalar per (bucket, head), added to the scores, eq. (8.4); causal buckets."""

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        expect_positive("T5Bias", num_heads=num_heads, num_buckets=num_buckets)
        self.table = nn.Parameter(torch.zeros(num_buckets, num_heads))  #   [buckets, h]
        self.max_distance = max_distance

    def score_bias(self, q: Tensor, k: Tensor) -> Tensor:
        t, s = q.shape[-2], k.shape[-2]
        return t5_bias(self.table, t, s, max_distance=self.max_distance)  # (8.4) [h, T, S]


class ALiBi(PositionHook):
    """ALiBi's linear distance penalty ``-m_h |i - j|``, eqs. (8.5)-(8.6); no parameters."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)  # [h]

    def score_bias(self, q: Tensor, k: Tensor) -> Tensor:
        bias = alibi_bias(self.slopes, q.shape[-2], k.shape[-2])  # (8.5)    [h, T, S]
        return bias.to(q.dtype)


class RoPE(PositionHook):
    """RoPE: queries and keys rotated by their positions, eq. (8.7); no parameters.

    The queries are the last ``T`` of the ``S`` key positions (see
    :func:`course_lib.relative.relative_positions`).  ``scaling_factor`` (an attribute, which
    :func:`rope_scaling` sets for a whole model) is position interpolation,
    eq. (8.9): see :func:`rope_cos_sin`.
    """

    def __init__(self, head_dim: int, base: float = 10000.0, scaling_factor: float = 1.0) -> None:
        super().__init__()
        _frequency_args("RoPE", head_dim, base)
        self.head_dim, self.base, self.scaling_factor = head_dim, base, scaling_factor

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        t, s = q.shape[-2], k.shape[-2]
        positions = torch.arange(s, device=k.device)
        cos, sin = rope_cos_sin(
            positions, self.head_dim, self.base, scaling_factor=self.scaling_factor, dtype=q.dtype
        )  #                                                                   [S, d]
        return apply_rope(q, cos[s - t :], sin[s - t :]), apply_rope(k, cos, sin)  # (8.7)


@contextmanager
def rope_scaling(model: nn.Module, scaling_factor: float) -> Iterator[int]:
    """Position interpolation, eq. (8.9), for every :class:`RoPE` hook of ``model``, in a ``with``.

    Inside the block each hook reads position ``p`` at ``p / scaling_factor``
    (to run a model trained on ``L`` positions on ``L' = scaling_factor * L``);
    on leaving, the hooks get their previous factors back.  Yields the number of
    hooks changed; a model without any RoPE hook is an error (nothing to scale).
    """
    hooks = [m for m in model.modules() if isinstance(m, RoPE)]
    if not hooks:
        raise ValueError("rope_scaling: the model has no RoPE hook (build it with method='rope')")
    if not scaling_factor >= 1:
        raise ValueError(f"rope_scaling: scaling_factor must be >= 1, got {scaling_factor}")
    before = [h.scaling_factor for h in hooks]
    for h in hooks:
        h.scaling_factor = scaling_factor
    try:
        yield len(hooks)
    finally:
        for h, f in zip(hooks, before, strict=True):
            h.scaling_factor = f


#: The position methods of Chapter 8's experiment; the first three add nothing to attention.
POSITION_METHODS = ("none", "learned", "sinusoidal", "shaw", "t5", "alibi", "rope")


def position_hook(
    method: str,
    head_dim: int,
    num_heads: int,
    *,
    shaw_max_distance: int = 16,
    t5_num_buckets: int = 32,
    t5_max_distance: int = 128,
) -> PositionHook | None:
    """The attention hook of ``method`` (one of :data:`POSITION_METHODS`), or ``None``.

    ``"none"``, ``"learned"`` and ``"sinusoidal"`` change nothing inside the
    attention (the absolute methods act on the input), so they return ``None``.
    """
    if method not in POSITION_METHODS:
        raise ValueError(f"position_hook: method must be one of {POSITION_METHODS}, got {method!r}")
    if method == "shaw":
        return ShawPositions(head_dim, shaw_max_distance)
    if method == "t5":
        return T5Bias(num_heads, t5_num_buckets, t5_max_distance)
    if method == "alibi":
        return ALiBi(num_heads)
    if method == "rope":
        return RoPE(head_dim)
    return None
