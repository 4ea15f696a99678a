"""The Transformer's blocks: feed-forward, encoder block, decoder block (Chapter 4).

Equation numbers refer to Chapter 4.  ``B`` batch, ``T`` target (or only)
length, ``S`` source length, ``D`` model size (``d_model``), ``F`` feed-forward
size (``d_ff``), ``V`` vocabulary.

Two placements of the layer norm:

* **post-norm** (the 2017 paper), eq. (4.2): ``Y = LN(X + MHA(X))``, ``Z = LN(Y + FFN(Y))``;
* **pre-norm** (most models since), eq. (4.3): ``Y = X + MHA(LN(X))``, ``Z = Y + FFN(LN(Y))``,
  with one more LN after the last block of a pre-norm stack (4.6).

Parameter layout.  Blocks use the names of ``torch.nn.TransformerEncoderLayer``
and ``TransformerDecoderLayer`` (``self_attn``, ``norm1``, ...; attention is
:class:`course_lib.attention.MultiHeadAttention`, laid out like
``nn.MultiheadAttention``), except that the feed-forward pair lives in its own
module ``ff`` and the decoder's cross-attention is called ``cross_attn`` (torch:
``multihead_attn``).  :func:`from_torch_state_dict` renames those keys, and
``EncoderBlock.from_torch`` / ``DecoderBlock.from_torch`` build a block equal to
a torch layer.

Masks follow the library's convention (:mod:`course_lib.masks`): boolean
True = may attend; padding masks are True at real tokens.  The stacks of blocks
and the three model families are in :mod:`course_lib.transformer`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import MultiHeadAttention
from course_lib.shapes import expect_shape

__all__ = [
    "FeedForward",
    "EncoderBlock",
    "DecoderBlock",
    "from_torch_state_dict",
]

#: The feed-forward non-linearities; "gelu_tanh" is GELU's tanh approximation (GPT-2's).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
}

# torch.nn.Transformer*Layer name -> ours
_TORCH_RENAMES = {
    "linear1.": "ff.linear1.",
    "linear2.": "ff.linear2.",
    "multihead_attn.": "cross_attn.",
}


def from_torch_state_dict(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A ``torch.nn.TransformerEncoderLayer`` / ``DecoderLayer`` (or stack) state dict, renamed to ours.

    ``linear1`` / ``linear2`` -> ``ff.linear1`` / ``ff.linear2``; ``multihead_attn`` ->
    ``cross_attn``; everything else keeps its name (also inside ``layers.N.``).
    """
    renamed = {}
    for key, value in state.items():
        parts = key.split(".")
        for i in range(len(parts)):
            tail = ".".join(parts[i:])
            hit = next((old for old in _TORCH_RENAMES if tail.startswith(old)), None)
            if hit is not None:
                key = ".".join(parts[:i] + [_TORCH_RENAMES[hit] + tail[len(hit) :]])
                break
        renamed[key] = value
    return renamed


def _activation_name(layer: nn.Module) -> str:
    """The name in :data:`ACTIVATIONS` of a torch layer's activation, exactly (or an error)."""
    act = layer.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu_tanh"
    raise ValueError(
        f"from_torch: unsupported activation {act!r}; build the torch layer with "
        "activation='relu', 'gelu', nn.ReLU(), nn.GELU() or nn.GELU(approximate='tanh')"
    )


class FeedForward(nn.Module):
    """The position-wise feed-forward block, Chapter 4, eq. (4.1).

    ``FFN(u) = W_2 phi(W_1 u + b_1) + b_2``, applied to every position alone.
    ``linear1``: W_1 [F, D], b_1 [F]; ``linear2``: W_2 [D, F], b_2 [D];
    ``phi`` ReLU (2017) or GELU.  ``forward(u [..., D]) -> [..., D]``.
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"FeedForward: activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}"
            )
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)  # W_1 [F, D]
        self.linear2 = nn.Linear(d_ff, d_model)  # W_2 [D, F]
        self.dropout = nn.Dropout(dropout)

    def forward(self, u: Tensor) -> Tensor:
        # (4.1)  W_2 phi(W_1 u + b_1) + b_2                                    [..., D]
        return self.linear2(self.dropout(ACTIVATIONS[self.activation](self.linear1(u))))


def _check_input(where: str, name: str, x: Tensor, d_model: int) -> None:
    expect_shape(where, name, x, [("B", None), ("T", None), ("D", d_model)])


class EncoderBlock(nn.Module):
    """One encoder block: self-attention and feed-forward, each in a residual, Chapter 4.

    post-norm (``norm_first=False``), eq. (4.2):
        ``Y = LN_1(X + MHA(X))``,  ``Z = LN_2(Y + FFN(Y))``
    pre-norm (``norm_first=True``), eq. (4.3):
        ``Y = X + MHA(LN_1(X))``,  ``Z = Y + FFN(LN_2(Y))``
    (dropout on each sub-layer's output before the sum).  ``forward(x [B, T, D],
    mask=None, key_padding_mask=None, is_causal=False) -> [B, T, D]``.  With
    ``is_causal=True`` it is the block of a decoder-only model.  ``position`` is
    handed to the self-attention (a relative-position hook of Chapter 8).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        position: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout, position=position)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _self_attention(
        self, x: Tensor, mask: Tensor | None, padding: Tensor | None, causal: bool
    ) -> Tensor:
        out, _ = self.self_attn(x, mask=mask, key_padding_mask=padding, is_causal=causal)
        return self.dropout1(out)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        _check_input("EncoderBlock", "x", x, self.d_model)
        if self.norm_first:  # (4.3) pre-norm
            y = x + self._self_attention(self.norm1(x), mask, key_padding_mask, is_causal)
            return y + self.dropout2(self.ff(self.norm2(y)))
        y = self.norm1(x + self._self_attention(x, mask, key_padding_mask, is_causal))  # (4.2)
        return self.norm2(y + self.dropout2(self.ff(y)))

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """A block computing the same function as ``layer`` (``batch_first=True``), weights copied."""
        return _block_from_torch(cls, layer)


class DecoderBlock(nn.Module):
    """One decoder block: causal self-attention, cross-attention, feed-forward, Chapter 4.

    post-norm, eq. (4.4):
        ``Y = LN_1(X + MHA(X))``,  ``Y' = LN_2(Y + MHA(Y, M, M))``,  ``Z = LN_3(Y' + FFN(Y'))``
    pre-norm, eq. (4.5):
        ``Y = X + MHA(LN_1 X)``,  ``Y' = Y + MHA(LN_2 Y, M, M)``,  ``Z = Y' + FFN(LN_3 Y')``
    where M is the encoder output (``memory``).  ``forward(x [B, T, D], memory [B, S, D],
    tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False) -> [B, T, D]``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.norm3 = nn.LayerNorm(d_model, eps=eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
    ) -> Tensor:
        _check_input("DecoderBlock", "x", x, self.d_model)
        expect_shape(
            "DecoderBlock", "memory", memory, [("B", x.shape[0]), ("S", None), ("D", self.d_model)]
        )

        def self_attention(u: Tensor) -> Tensor:
            out, _ = self.self_attn(
                u, mask=tgt_mask, key_padding_mask=tgt_key_padding_mask, is_causal=tgt_is_causal
            )
            return self.dropout1(out)

        def cross_attention(u: Tensor) -> Tensor:
            out, _ = self.cross_attn(
                u, memory, memory, mask=memory_mask, key_padding_mask=memory_key_padding_mask
            )
            return self.dropout2(out)

        if self.norm_first:  # (4.5) pre-norm
            y = x + self_attention(self.norm1(x))
            y = y + cross_attention(self.norm2(y))
            return y + self.dropout3(self.ff(self.norm3(y)))
        y = self.norm1(x + self_attention(x))  # (4.4) post-norm
        y = self.norm2(y + cross_attention(y))
        return self.norm3(y + self.dropout3(self.ff(y)))

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderBlock:
        """A block computing the same function as ``layer`` (``batch_first=True``), weights copied."""
        return _block_from_torch(cls, layer)


def _block_from_torch(cls: type[nn.Module], layer: nn.Module) -> nn.Module:
    """An :class:`EncoderBlock` or :class:`DecoderBlock` with the settings and weights of ``layer``."""
    if not layer.self_attn.batch_first:
        raise ValueError(
            f"{cls.__name__}.from_torch: the torch layer must use batch_first=True "
            "(build it with batch_first=True; the course's tensors are [B, T, D])"
        )
    weight = layer.linear1.weight  # the layer's dtype and device, kept by the block
    block = cls(
        layer.self_attn.embed_dim,
        layer.self_attn.num_heads,
        layer.linear1.out_features,
        layer.dropout.p,
        norm_first=layer.norm_first,
        activation=_activation_name(layer),
        eps=layer.norm1.eps,
    )
    block.to(device=weight.device, dtype=weight.dtype)  # before loading: no rounding
    block.load_state_dict(from_torch_state_dict(layer.state_dict()))
    return block
