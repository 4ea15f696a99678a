"""The Transformer: stacks of blocks and the three model families (Chapter 4).

Equation numbers refer to Chapter 4.  ``B`` batch, ``T`` target (or only)
length, ``S`` source length, ``D`` model size (``d_model``), ``V`` vocabulary.

The blocks (:class:`~course_lib.blocks.FeedForward`,
:class:`~course_lib.blocks.EncoderBlock`, :class:`~course_lib.blocks.DecoderBlock`,
post-norm (4.2) or pre-norm (4.3)) are in :mod:`course_lib.blocks`; here they are
stacked (:class:`Encoder`, :class:`Decoder`, eq. (4.6)) and made into the three
families: :class:`EncoderDecoder`, :class:`EncoderOnly`, :class:`DecoderOnly`.

Every stack and model takes a :class:`~course_lib.config.TransformerConfig`
first (``d_model``, ``num_heads``, ``num_layers``, ``d_ff``, ``dropout``,
``max_len``, ``norm_first``, ``activation``, ``eps``), then its own arguments,
and keeps it as ``self.config``.

Masks follow the library's convention (:mod:`course_lib.masks`): boolean
True = may attend; padding masks are True at real tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

# The blocks moved to course_lib.blocks; FeedForward, ACTIVATIONS and
# from_torch_state_dict are re-exported here so that the notebooks'
# ``transformer.FeedForward`` (and the blocks themselves) keep working.
from course_lib.blocks import ACTIVATIONS as ACTIVATIONS
from course_lib.blocks import DecoderBlock, EncoderBlock
from course_lib.blocks import FeedForward as FeedForward
from course_lib.blocks import from_torch_state_dict as from_torch_state_dict
from course_lib.config import TransformerConfig, check_config
from course_lib.shapes import fmt_shape

__all__ = [
    "Encoder",
    "Decoder",
    "EncoderDecoder",
    "EncoderOnly",
    "DecoderOnly",
]


def _final_norm(config: TransformerConfig, final_norm: bool | None) -> nn.Module | None:
    """The layer norm after the last block (4.6): a pre-norm stack needs it, a post-norm one not."""
    wanted = config.norm_first if final_norm is None else final_norm
    return nn.LayerNorm(config.d_model, eps=config.eps) if wanted else None


def _block_args(c: TransformerConfig) -> tuple[tuple, dict]:
    """A block's arguments from the config: ``(d_model, num_heads, d_ff, dropout)`` and keywords."""
    kw = dict(norm_first=c.norm_first, activation=c.activation, eps=c.eps)
    return (c.d_model, c.num_heads, c.d_ff, c.dropout), kw


class Encoder(nn.Module):
    """A stack of ``config.num_layers`` :class:`EncoderBlock`, Chapter 4, eq. (4.6).

    ``final_norm`` (default: ``config.norm_first``) adds the layer norm a pre-norm stack
    needs after its last block; ``forward(x [B, T, D], mask, key_padding_mask,
    is_causal) -> [B, T, D]``.  ``position()``, if given, makes each block's
    relative-position hook (Chapter 8): one call per block, so each block has
    its own parameters.
    """

    def __init__(
        self,
        config: TransformerConfig,
        *,
        final_norm: bool | None = None,
        position: Callable[[], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.config = check_config("Encoder", config)
        args, kw = _block_args(config)
        self.layers = nn.ModuleList(
            EncoderBlock(*args, **kw, position=position and position())
            for _ in range(config.num_layers)
        )
        self.norm = _final_norm(config, final_norm)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        for layer in self.layers:  # (4.6)  X_l = Block_l(X_{l-1})
            x = layer(x, mask, key_padding_mask, is_causal)
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):
    """A stack of ``config.num_layers`` :class:`DecoderBlock` (eq. (4.6)); causal by default.

    ``forward(x [B, T, D], memory [B, S, D], tgt_key_padding_mask=None,
    memory_key_padding_mask=None) -> [B, T, D]``.
    """

    def __init__(self, config: TransformerConfig, *, final_norm: bool | None = None) -> None:
        super().__init__()
        self.config = check_config("Decoder", config)
        args, kw = _block_args(config)
        self.layers = nn.ModuleList(DecoderBlock(*args, **kw) for _ in range(config.num_layers))
        self.norm = _final_norm(config, final_norm)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        causal: bool = True,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=causal,
            )
        return x if self.norm is None else self.norm(x)


class _Embed(nn.Module):
    """Token embedding plus a learned absolute position embedding (Chapter 7 covers others)."""

    def __init__(self, vocab: int, d_model: int, max_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)  # [V, D]
        self.pos = nn.Embedding(max_len, d_model)  # [L_max, D]
        self.max_len = max_len

    def forward(self, tokens: Tensor) -> Tensor:
        if tokens.dim() != 2:
            raise ValueError(
                f"tokens must be [B, T] integer ids, got {fmt_shape(tokens.shape)} "
                "(add a batch axis with tokens[None] for one sequence)"
            )
        if tokens.shape[1] > self.max_len:
            raise ValueError(
                f"sequence length {tokens.shape[1]} exceeds max_len={self.max_len}: build the "
                f"model with max_len >= {tokens.shape[1]}, or pass at most {self.max_len} tokens"
            )
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.tok(tokens) + self.pos(positions)  # x_t = E[w_t] + P[t]     [B, T, D]


class EncoderDecoder(nn.Module):
    """The encoder-decoder Transformer (the 2017 family), Chapter 4.

    Built for Chapter 1's toy task: ``num_symbols`` output classes, and the target
    embedding has one more row for ``BOS = num_symbols``, exactly like
    :class:`course_lib.seq2seq.Seq2Seq`, so ``seq2seq_loss``, ``evaluate`` and
    ``training.train`` work unchanged.

    ``forward(src [B, S], tgt_in [B, T]) -> logits [B, T, V]`` (teacher forcing,
    causal decoder); ``greedy_decode(src, length) -> [B, length]``.  The encoder
    and the decoder both have ``config.num_layers`` blocks.
    """

    def __init__(self, config: TransformerConfig, num_symbols: int) -> None:
        super().__init__()
        self.config = c = check_config("EncoderDecoder", config)
        self.num_symbols, self.bos = num_symbols, num_symbols
        self.src_embed = _Embed(num_symbols, c.d_model, c.max_len)
        self.tgt_embed = _Embed(num_symbols + 1, c.d_model, c.max_len)
        self.encoder = Encoder(c)
        self.decoder = Decoder(c)
        self.out = nn.Linear(c.d_model, num_symbols)  # [V, D]

    def encode(self, src: Tensor, src_key_padding_mask: Tensor | None = None) -> Tensor:
        """The memory [B, S, D]: every source position, seen by every other (no mask)."""
        return self.encoder(self.src_embed(src), key_padding_mask=src_key_padding_mask)

    def decode(
        self, tgt_in: Tensor, memory: Tensor, memory_key_padding_mask: Tensor | None = None
    ) -> Tensor:
        """Logits [B, T, V]: causal self-attention over ``tgt_in``, cross-attention to memory."""
        h = self.decoder(
            self.tgt_embed(tgt_in), memory, memory_key_padding_mask=memory_key_padding_mask
        )
        return self.out(h)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src))

    @torch.no_grad()
    def greedy_decode(self, src: Tensor, length: int) -> Tensor:
        """Write ``length`` symbols [B, length], re-running the decoder on its own prefix."""
        memory = self.encode(src)
        y = torch.full((src.shape[0], 1), self.bos, dtype=torch.long, device=src.device)
        for _ in range(length):
            nxt = self.decode(y, memory)[:, -1].argmax(-1, keepdim=True)  # [B, 1]
            y = torch.cat([y, nxt], dim=1)
        return y[:, 1:]


class EncoderOnly(nn.Module):
    """The encoder-only family (BERT-like), Chapter 4: every token sees every token.

    ``forward(tokens [B, T], key_padding_mask=None) -> [B, T, num_outputs]`` (a
    per-token head, e.g. tagging or a masked-token prediction).
    """

    def __init__(self, config: TransformerConfig, vocab_size: int, num_outputs: int) -> None:
        super().__init__()
        self.config = c = check_config(type(self).__name__, config)
        self.embed = _Embed(vocab_size, c.d_model, c.max_len)
        self.blocks = Encoder(c)
        self.head = nn.Linear(c.d_model, num_outputs)

    def forward(self, tokens: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return self.head(self.blocks(self.embed(tokens), key_padding_mask=key_padding_mask))


class DecoderOnly(EncoderOnly):
    """The decoder-only family (GPT-like), Chapter 4: the same blocks, Chapter 3's causal mask (3.4).

    No cross-attention: a decoder-only block is an :class:`EncoderBlock` run with
    ``is_causal=True``, so this is :class:`EncoderOnly` with one output per
    vocabulary entry, run causally.  ``forward(tokens [B, T]) -> next-token
    logits [B, T, V]``.
    """

    def __init__(self, config: TransformerConfig, vocab_size: int) -> None:
        super().__init__(config, vocab_size, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.head(self.blocks(self.embed(tokens), is_causal=True))

    @torch.no_grad()
    def generate(self, prompt: Tensor, steps: int) -> Tensor:
        """Greedy continuation: ``prompt`` [B, T] followed by ``steps`` new tokens."""
        tokens = prompt
        for _ in range(steps):
            window = tokens[:, -self.embed.max_len :]
            tokens = torch.cat([tokens, self(window)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return tokens
