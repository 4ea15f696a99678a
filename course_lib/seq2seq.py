"""A GRU encoder-decoder and the toy task that exposes its bottleneck (Chapter 1).

The task: the source is ``length`` random symbols drawn from ``num_symbols``;
the target is the same sequence (``"copy"``) or the same sequence reversed
(``"reverse"``).  Lengths are fixed within a batch, so no padding or end token
is needed: the decoder writes exactly ``length`` symbols.  One extra token,
``BOS = num_symbols``, starts the decoder.

The model (:class:`Seq2Seq`, Chapter 1, eqs. (1.13)-(1.15)) reads the source with
a GRU encoder and hands the decoder *only* the encoder's final state,
``c = h_T``: one vector of ``hidden_size`` numbers must carry the whole input.
Chapter 2 adds attention to the same model and task.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.rnn import _make_gru

__all__ = [
    "Seq2SeqBatch",
    "make_batch",
    "Seq2Seq",
    "seq2seq_loss",
    "token_accuracy",
    "sequence_accuracy",
    "evaluate",
]

TASKS = ("copy", "reverse")


@dataclass
class Seq2SeqBatch:
    """One batch of the toy task.  B = batch size, T = length.

    ``src`` [B, T]: the input symbols.  ``tgt`` [B, T]: what the decoder must write.
    ``tgt_in`` [B, T]: the decoder's input under teacher forcing, ``BOS`` followed by
    ``tgt`` shifted right by one.  ``bos``: the start token (= ``num_symbols``).
    """

    src: Tensor
    tgt: Tensor
    tgt_in: Tensor
    bos: int

    def to(self, device: torch.device | str) -> Seq2SeqBatch:
        """The same batch on ``device``."""
        return Seq2SeqBatch(
            self.src.to(device), self.tgt.to(device), self.tgt_in.to(device), self.bos
        )


def make_batch(
    batch_size: int,
    length: int,
    num_symbols: int,
    *,
    task: str = "copy",
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Seq2SeqBatch:
    """A batch of the copy / reverse task, reproducible through ``generator``.

    Symbols are uniform on ``0 .. num_symbols - 1``; they are drawn on the CPU
    (so a seeded ``torch.Generator`` gives the same batch on every machine) and
    then moved to ``device``.
    """
    if task not in TASKS:
        raise ValueError(f"make_batch: task must be one of {TASKS}, got {task!r}")
    for name, value in (("batch_size", batch_size), ("length", length)):
        if value < 1:
            raise ValueError(f"make_batch: {name} must be >= 1, got {value}")
    if num_symbols < 2:
        raise ValueError(f"make_batch: num_symbols must be >= 2, got {num_symbols}")
    src = torch.randint(0, num_symbols, (batch_size, length), generator=generator)  # [B, T]
    tgt = src if task == "copy" else src.flip(1)  # [B, T]
    bos = num_symbols
    tgt_in = torch.cat([torch.full((batch_size, 1), bos), tgt[:, :-1]], dim=1)  # [B, T]
    return Seq2SeqBatch(src, tgt, tgt_in, bos).to(device)


class Seq2Seq(nn.Module):
    """GRU encoder-decoder whose decoder sees only the final encoder state.

    Encoder, eq. (1.13): ``h_t = GRU(E_src[x_t], h_{t-1})``, ``h_0 = 0``, context ``c = h_T``.
    Decoder, eq. (1.14): ``s_0 = c``, ``s_i = GRU(E_tgt[y_{i-1}], s_{i-1})``, ``y_0 = BOS``.
    Output,  eq. (1.15): ``p(y_i | y_<i, x) = softmax(W_out s_i + b_out)``.

    ``num_symbols`` output classes; the target embedding has one more row, for BOS.
    ``rnn="course"`` uses :class:`course_lib.rnn.GRU` (ours, checked equal to
    ``torch.nn.GRU`` in the tests); ``rnn="torch"`` uses ``torch.nn.GRU`` (faster on GPU).
    """

    def __init__(
        self, num_symbols: int, emb_dim: int = 16, hidden_size: int = 64, *, rnn: str = "course"
    ) -> None:
        super().__init__()
        make_gru = _make_gru(rnn, "Seq2Seq")
        self.num_symbols = num_symbols
        self.bos = num_symbols
        self.src_emb = nn.Embedding(num_symbols, emb_dim)  # [V, E]
        self.tgt_emb = nn.Embedding(num_symbols + 1, emb_dim)  # [V + 1, E], last row = BOS
        self.encoder = make_gru(emb_dim, hidden_size)
        self.decoder = make_gru(emb_dim, hidden_size)
        self.out = nn.Linear(hidden_size, num_symbols)  # W_out [V, H], b_out [V]

    def encode(self, src: Tensor) -> Tensor:
        """The context vector ``c = h_T`` (1.13), shape [1, B, H], for ``src`` [B, T]."""
        if src.dim() != 2:
            raise ValueError(f"Seq2Seq: src must be [batch, time], got {list(src.shape)}")
        _, c = self.encoder(self.src_emb(src))  # [1, B, H]
        return c

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits [B, T_out, V] for decoder inputs ``tgt_in`` [B, T_out]."""
        c = self.encode(src)  # [1, B, H]: all the decoder will know about src
        s, _ = self.decoder(self.tgt_emb(tgt_in), c)  # (1.14)        [B, T_out, H]
        return self.out(s)  # (1.15) logits                            [B, T_out, V]

    @torch.no_grad()
    def greedy_decode(self, src: Tensor, length: int) -> Tensor:
        """Write ``length`` symbols [B, length], each the argmax given the previous ones."""
        s = self.encode(src)  # s_0 = c                                    [1, B, H]
        y = torch.full((src.shape[0], 1), self.bos, dtype=torch.long, device=src.device)
        result = []
        for _ in range(length):
            out, s = self.decoder(self.tgt_emb(y), s)  # one step (1.14)   [B, 1, H]
            y = self.out(out).argmax(dim=-1)  # (1.15), greedy             [B, 1]
            result.append(y)
        return torch.cat(result, dim=1)  # [B, length]


def seq2seq_loss(model: Seq2Seq, batch: Seq2SeqBatch) -> Tensor:
    """Mean cross-entropy of the target symbols under teacher forcing."""
    logits = model(batch.src, batch.tgt_in)  # [B, T, V]
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt.flatten())


def token_accuracy(pred: Tensor, tgt: Tensor) -> float:
    """Fraction of positions where ``pred`` equals ``tgt`` (both [B, T])."""
    if pred.shape != tgt.shape:
        raise ValueError(f"token_accuracy: shapes differ, {list(pred.shape)} vs {list(tgt.shape)}")
    return (pred == tgt).float().mean().item()


def sequence_accuracy(pred: Tensor, tgt: Tensor) -> float:
    """Fraction of sequences (rows) that are right at every position."""
    if pred.shape != tgt.shape:
        raise ValueError(
            f"sequence_accuracy: shapes differ, {list(pred.shape)} vs {list(tgt.shape)}"
        )
    return (pred == tgt).all(dim=1).float().mean().item()


def evaluate(model: Seq2Seq, batch: Seq2SeqBatch) -> tuple[float, float]:
    """Greedy-decode ``batch.src`` and return (token accuracy, sequence accuracy)."""
    was_training = model.training
    model.eval()
    pred = model.greedy_decode(batch.src, batch.tgt.shape[1])  # [B, T]
    model.train(was_training)
    return token_accuracy(pred, batch.tgt), sequence_accuracy(pred, batch.tgt)
