"""GRU encoder-decoders without and with attention, and the toy task that compares them.

The task (Chapters 1 and 2): the source is ``length`` random symbols drawn from
``num_symbols``; the target is the same sequence (``"copy"``) or the same
sequence reversed (``"reverse"``).  Lengths are fixed within a batch, so no
padding or end token is needed: the decoder writes exactly ``length`` symbols.
One extra token, ``BOS = num_symbols``, starts the decoder.

The models share one scaffolding, :class:`GRUEncoderDecoder` (the embeddings,
a GRU encoder and a GRU decoder, BOS, and the decoding loop written once), and
each adds only its own equations:

* :class:`Seq2Seq` (Chapter 1, eqs. (1.13)-(1.15)) hands the decoder *only* the
  encoder's final state, ``c = h_T``: one vector of ``hidden_size`` numbers must
  carry the whole input;
* :class:`BahdanauSeq2Seq` (Chapter 2, eqs. (2.9)-(2.10)) attends with the
  previous decoder state and feeds the context into the recurrence;
* :class:`LuongSeq2Seq` (Chapter 2, eqs. (2.11)-(2.12), local window (2.13), local-p (2.14))
  attends with the current decoder state and combines afterwards.

All three have the interface ``forward(src, tgt_in) -> logits`` and
``greedy_decode(src, length)``, so :func:`seq2seq_loss`, :func:`evaluate` and
:func:`course_lib.training.train` work for each.  The attention itself (scores,
:class:`~course_lib.attention.AdditiveAttention`,
:class:`~course_lib.attention.LuongAttention`) is in :mod:`course_lib.attention`.

Shapes (``book/notation.md``): ``B`` batch, ``S`` source length, ``T`` target
length (the decoder's steps), ``D`` embedding width (``emb_dim``), ``H`` GRU
hidden size, ``V`` = ``num_symbols`` (the target embedding has ``V + 1`` rows,
the last for BOS).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import AdditiveAttention, LuongAttention
from course_lib.masks import masked_softmax, window_mask
from course_lib.rnn import GRU, gru_step, make_gru
from course_lib.shapes import expect_shape

__all__ = [
    "Seq2SeqBatch",
    "make_batch",
    "GRUEncoderDecoder",
    "Seq2Seq",
    "BahdanauSeq2Seq",
    "LuongSeq2Seq",
    "seq2seq_loss",
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


class GRUEncoderDecoder(nn.Module):
    """The scaffolding of :class:`Seq2Seq`, :class:`BahdanauSeq2Seq` and :class:`LuongSeq2Seq`.

    Builds, in this order (the order of the random initialisation and of the
    ``state_dict``): ``src_emb`` [V, D], ``tgt_emb`` [V + 1, D] (last row: BOS),
    ``encoder``, a GRU from D to H, and ``decoder``, a GRU from ``decoder_input``
    to H; a model adds its own layers after these.  ``gru`` is the GRU class,
    :class:`course_lib.rnn.GRU` (ours, checked equal to ``torch.nn.GRU`` in the
    tests) or ``torch.nn.GRU`` (faster on a GPU); see :func:`course_lib.rnn.make_gru`.

    A model writes its equations in two methods and inherits the rest:

    * ``start(src) -> (memory, state)``: what the decoder reads from the encoder
      (every encoder state [B, S, H], or None) and the decoder's first state;
    * ``step(y_prev [B], state, memory, t) -> (logits [B, V], state, weights [B, S]
      or None)``: output step ``t`` given the previous symbol ``y_{t-1}``.

    :meth:`decode_steps` runs ``step`` over the target, :meth:`greedy_decode` and
    :meth:`alignments` use it, and so does :meth:`forward_with_weights` unless a
    model overrides it: Seq2Seq and Luong run their teacher-forced steps at once,
    Bahdanau runs its steps with the keys' half of its score computed once.
    """

    def __init__(
        self,
        num_symbols: int,
        emb_dim: int,
        hidden_size: int,
        *,
        decoder_input: int,
        gru: type[nn.Module] = GRU,
    ) -> None:
        super().__init__()
        self.num_symbols = num_symbols
        self.bos = num_symbols
        self.src_emb = nn.Embedding(num_symbols, emb_dim)  # [V, D]
        self.tgt_emb = nn.Embedding(num_symbols + 1, emb_dim)  # [V + 1, D], last row = BOS
        self.encoder = make_gru(gru, emb_dim, hidden_size)
        self.decoder = make_gru(gru, decoder_input, hidden_size)

    def read_source(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """The encoder (1.13) over ``src`` [B, S]: every state [B, S, H] and the last, h_S [1, B, H]."""
        expect_shape(type(self).__name__, "src", src, [("B", None), ("S", None)])
        return self.encoder(self.src_emb(src))

    def start(self, src: Tensor) -> tuple[Tensor | None, Tensor]:
        """What the decoder reads from the encoder, and its first state."""
        raise NotImplementedError

    def step(
        self, y_prev: Tensor, state: Tensor, memory: Tensor | None, t: int
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """One output step: (logits [B, V], new state, weights [B, S] or None)."""
        raise NotImplementedError

    def decode_steps(
        self, src: Tensor, length: int, tgt_in: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Run :meth:`step` ``length`` times, one output symbol after the other.

        Step t reads ``tgt_in[:, t]`` when it is given (teacher forcing), else the
        symbol the previous step chose, its argmax (greedy decoding; BOS at step 0).
        Returns (logits [B, length, V], the argmax symbols [B, length], the weights
        [B, length, S] or None for a model without attention).
        """
        memory, state = self.start(src)
        y = torch.full((src.shape[0],), self.bos, dtype=torch.long, device=src.device)  # [B]
        logits, symbols, weights = [], [], []
        for t in range(length):
            y_prev = y if tgt_in is None else tgt_in[:, t]
            out, state, alpha = self.step(y_prev, state, memory, t)  # [B, V], _, [B, S]
            y = out.argmax(-1)  # greedy: the most probable symbol                [B]
            logits.append(out)
            symbols.append(y)
            weights.append(alpha)
        has_weights = bool(weights) and weights[0] is not None
        return (
            torch.stack(logits, 1),
            torch.stack(symbols, 1),
            torch.stack(weights, 1) if has_weights else None,
        )

    def forward_with_weights(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing, step by step: (logits [B, T, V], weights [B, T, S] or None)."""
        expect_shape(type(self).__name__, "tgt_in", tgt_in, [("B", src.shape[0]), ("T", None)])
        logits, _, weights = self.decode_steps(src, tgt_in.shape[1], tgt_in)
        return logits, weights

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits [B, T, V] for decoder inputs ``tgt_in`` [B, T]."""
        return self.forward_with_weights(src, tgt_in)[0]

    @torch.no_grad()
    def greedy_decode(
        self, src: Tensor, length: int, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Write ``length`` symbols [B, length], each the argmax given the previous ones.

        With ``return_weights``, also the attention weights [B, length, S].
        """
        _, pred, weights = self.decode_steps(src, length)
        if not return_weights:
            return pred
        if weights is None:
            raise ValueError(f"{type(self).__name__}: has no attention, so no weights to return")
        return pred, weights

    @torch.no_grad()
    def alignments(self, src: Tensor, length: int) -> Tensor:
        """The weights [B, length, S] of greedy decoding: the alignment heatmap."""
        return self.greedy_decode(src, length, return_weights=True)[1]


class Seq2Seq(GRUEncoderDecoder):
    """GRU encoder-decoder whose decoder sees only the final encoder state (Chapter 1).

    Encoder, eq. (1.13): ``h_t = GRU(E_src[x_t], h_{t-1})``, ``h_0 = 0``, context ``c = h_T``.
    Decoder, eq. (1.14): ``s_0 = c``, ``s_i = GRU(E_tgt[y_{i-1}], s_{i-1})``, ``y_0 = BOS``.
    Output,  eq. (1.15): ``p(y_i | y_<i, x) = softmax(W_out s_i + b_out)``.

    ``num_symbols`` output classes; the target embedding has one more row, for BOS.
    ``gru`` is :class:`course_lib.rnn.GRU` (ours, the default) or ``torch.nn.GRU``.
    """

    def __init__(
        self,
        num_symbols: int,
        emb_dim: int = 16,
        hidden_size: int = 64,
        *,
        gru: type[nn.Module] = GRU,
    ) -> None:
        super().__init__(num_symbols, emb_dim, hidden_size, decoder_input=emb_dim, gru=gru)
        self.out = nn.Linear(hidden_size, num_symbols)  # W_out [V, H], b_out [V]

    def encode(self, src: Tensor) -> Tensor:
        """The context vector ``c = h_T`` (1.13), shape [1, B, H], for ``src`` [B, S]."""
        _, c = self.read_source(src)  # [1, B, H]
        return c

    def start(self, src: Tensor) -> tuple[None, Tensor]:
        """No memory: the decoder starts from ``s_0 = c`` [1, B, H] and sees nothing else."""
        return None, self.encode(src)

    def step(self, y_prev: Tensor, s: Tensor, memory: None, t: int) -> tuple[Tensor, Tensor, None]:
        """One step of (1.14)-(1.15): (logits [B, V], s_i [1, B, H], no weights)."""
        out, s = self.decoder(self.tgt_emb(y_prev).unsqueeze(1), s)  # (1.14)     [B, 1, H]
        return self.out(out)[:, 0], s, None  # (1.15) logits                      [B, V]

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: logits [B, T, V] for decoder inputs ``tgt_in`` [B, T]."""
        c = self.encode(src)  # [1, B, H]: all the decoder will know about src
        s, _ = self.decoder(self.tgt_emb(tgt_in), c)  # (1.14), every step at once [B, T, H]
        return self.out(s)  # (1.15) logits                                       [B, T, V]


class BahdanauSeq2Seq(GRUEncoderDecoder):
    """GRU encoder-decoder with additive attention, Chapter 2, eqs. (2.9)-(2.10).

    Encoder as in Chapter 1 (1.13), keeping every state ``h_1 .. h_S`` [B, S, H].
    At decoder step i, with ``s_0 = h_S``:

    * (2.4)/(2.2)/(2.3) ``c_i = sum_j alpha_ij h_j``, ``alpha_i = softmax(v^T tanh(W s_{i-1} + U h_j))``
      (the query is the *previous* decoder state, so steps run one after the other);
    * (2.9)  ``s_i = GRU([E y_{i-1}; c_i], s_{i-1})``;
    * (2.10) ``p(y_i | y_<i, x) = softmax(W_out [s_i; c_i] + b_out)``.

    ``forward(src [B, S], tgt_in [B, T]) -> logits [B, T, V]``;
    ``greedy_decode(src, length) -> [B, length]``; :meth:`alignments` gives the weights.
    ``attn_size`` is A, the hidden size of the additive score (default H).
    """

    def __init__(
        self,
        num_symbols: int,
        emb_dim: int = 16,
        hidden_size: int = 64,
        *,
        attn_size: int | None = None,
        gru: type[nn.Module] = GRU,
    ) -> None:
        super().__init__(  # decoder input [E y; c]: D + H
            num_symbols, emb_dim, hidden_size, decoder_input=emb_dim + hidden_size, gru=gru
        )
        self.attention = AdditiveAttention(hidden_size, hidden_size, attn_size)
        self.out = nn.Linear(2 * hidden_size, num_symbols)  # W_out [V, 2H]

    def start(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Every encoder state [B, S, H] and the decoder's first state ``s_0 = h_S`` [B, H]."""
        states, last = self.read_source(src)  # [B, S, H], [1, B, H]
        return states, last[0]

    def step(
        self, y_prev: Tensor, s: Tensor, states: Tensor, t: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One decoder step: (logits [B, V], new state [B, H], weights [B, S])."""
        c, alpha = self.attention(s.unsqueeze(1), states)  # (2.2)-(2.4)  [B, 1, H], [B, 1, S]
        c = c[:, 0]
        s = gru_step(self.decoder, torch.cat([self.tgt_emb(y_prev), c], -1), s)  # (2.9) [B, H]
        return self.out(torch.cat([s, c], -1)), s, alpha[:, 0]  # (2.10)        [B, V]

    def forward_with_weights(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing: :meth:`step` at every position, with ``U h_j`` computed once.

        The keys' half of the score (2.4), ``U h_j`` [B, S, A], is the same at every
        step; :meth:`step` (the equations as written, used by greedy decoding) recomputes
        it, this training path does not.  Same numbers (``tests/test_seq2seq.py``).
        Returns (logits [B, T, V], weights [B, T, S]).
        """
        expect_shape("BahdanauSeq2Seq", "tgt_in", tgt_in, [("B", src.shape[0]), ("T", None)])
        states, s = self.start(src)  # [B, S, H], s_0 = h_S [B, H]
        att = self.attention
        keys = F.linear(states, att.w_key.weight)  # U h_j, once                   [B, S, A]
        emb = self.tgt_emb(tgt_in)  # E y_{i-1} for every step                     [B, T, D]
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            e = torch.tanh(att.w_query(s).unsqueeze(1) + keys) @ att.v  # (2.4)    [B, S]
            alpha = torch.softmax(e, dim=-1)  # (2.2)                              [B, S]
            c = (alpha.unsqueeze(1) @ states)[:, 0]  # (2.3)                       [B, H]
            s = gru_step(self.decoder, torch.cat([emb[:, t], c], -1), s)  # (2.9) [B, H]
            logits.append(self.out(torch.cat([s, c], -1)))  # (2.10)             [B, V]
            weights.append(alpha)
        return torch.stack(logits, 1), torch.stack(weights, 1)


class LuongSeq2Seq(GRUEncoderDecoder):
    """GRU encoder-decoder with Luong attention, Chapter 2, eqs. (2.11)-(2.12).

    In the chapter's notation (Luong et al. write ``h_t`` for the decoder state
    ``s_i`` and ``hbar_s`` for the encoder state ``h_j``; the code keeps ``h`` for
    the decoder state and ``states`` for the encoder's): the decoder runs first,
    ``s_i = GRU(E y_{i-1}, s_{i-1})`` with ``s_0`` the last encoder state; then the
    *current* state ``s_i`` attends (so under teacher forcing all steps run at once):

    * ``c_i = sum_j alpha_ij h_j`` with ``alpha_i = softmax_j(score(s_i, h_j))``, score
      ``"dot"``, ``"general"`` or ``"concat"`` (2.5)-(2.7);
    * (2.11) ``stilde_i = tanh(W_c [c_i; s_i])``;
    * (2.12) ``p(y_i | y_<i, x) = softmax(W_s stilde_i + b_s)``.

    ``window`` (written D in (2.13), a number of positions) makes the attention
    *local*: the softmax is restricted to the keys with ``|j - p_i| <= window``,
    centred on an aligned position ``p_i`` (positions counted from 0):

    * ``align="monotonic"`` (Luong's local-m): ``p_i = i``;
    * ``align="predictive"`` (local-p, (2.14)): ``p_i = (S - 1) sigmoid(v_p^T tanh(W_p s_i))``,
      and the weights are multiplied by ``exp(-(j - p_i)^2 / (2 sigma^2))``, ``sigma = window / 2``.

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
        gru: type[nn.Module] = GRU,
    ) -> None:
        if window is not None and window < 1:
            raise ValueError(f"LuongSeq2Seq: window must be >= 1 or None, got {window}")
        if align not in ("monotonic", "predictive"):
            raise ValueError(
                f"LuongSeq2Seq: align must be 'monotonic' or 'predictive', got {align!r}"
            )
        super().__init__(num_symbols, emb_dim, hidden_size, decoder_input=emb_dim, gru=gru)
        self.window = window
        self.align = align if window is not None else None
        self.attention = LuongAttention(hidden_size, hidden_size, score)
        self.combine = nn.Linear(2 * hidden_size, hidden_size, bias=False)  # W_c [H, 2H]
        self.out = nn.Linear(hidden_size, num_symbols)  # W_s [V, H]
        if self.align == "predictive":
            self.w_p = nn.Linear(hidden_size, hidden_size, bias=False)  # W_p [H, H]
            self.v_p = nn.Linear(hidden_size, 1, bias=False)  # v_p [1, H]

    def predict(self, h: Tensor, states: Tensor, first_step: int = 0) -> tuple[Tensor, Tensor]:
        """Attention and output for decoder states ``h`` [B, T, H] at steps first_step, ...

        Returns the logits [B, T, V] and the weights [B, T, S] over ``states`` [B, S, H].
        """
        scores = self.attention.score(h, states)  # (2.5)-(2.7)               [B, T, S]
        t, s = h.shape[1], states.shape[1]
        if self.window is None:
            weights = masked_softmax(scores)  # global                       [B, T, S]
        elif self.align == "monotonic":  # local-m: p_t = t
            centers = torch.arange(first_step, first_step + t, device=h.device)  # [T]
            weights = masked_softmax(scores, window_mask(t, s, self.window, centers))  # (2.13)
        else:  # local-p: predicted p_t and a Gaussian around it
            centers = (s - 1) * torch.sigmoid(self.v_p(torch.tanh(self.w_p(h))))[..., 0]  # [B, T]
            weights = masked_softmax(scores, window_mask(t, s, self.window, centers))  # (2.13)
            positions = torch.arange(s, device=h.device, dtype=h.dtype)  # [S]
            sigma = self.window / 2
            gaussian = torch.exp(-((positions - centers.unsqueeze(-1)) ** 2) / (2 * sigma**2))
            weights = weights * gaussian  # [B, T, S]
        c = weights @ states  # (2.3)                                          [B, T, H]
        h_tilde = torch.tanh(self.combine(torch.cat([c, h], -1)))  # (2.11)     [B, T, H]
        return self.out(h_tilde), weights  # (2.12)                            [B, T, V]

    def start(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Every encoder state [B, S, H] and the decoder's first state ``h_0 = h_S`` [B, H]."""
        states, last = self.read_source(src)  # [B, S, H], [1, B, H]
        return states, last[0]

    def step(
        self, y_prev: Tensor, h: Tensor, states: Tensor, t: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One decoder step, then attention: (logits [B, V], h_t [B, H], weights [B, S])."""
        h = gru_step(self.decoder, self.tgt_emb(y_prev), h)  # h_t               [B, H]
        logits, weights = self.predict(h.unsqueeze(1), states, t)  # [B, 1, V], [B, 1, S]
        return logits[:, 0], h, weights[:, 0]

    def forward_with_weights(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing, every step at once: (logits [B, T, V], weights [B, T, S])."""
        expect_shape("LuongSeq2Seq", "tgt_in", tgt_in, [("B", src.shape[0]), ("T", None)])
        states, h0 = self.read_source(src)  # [B, S, H], [1, B, H]
        h, _ = self.decoder(self.tgt_emb(tgt_in), h0)  # every h_t at once      [B, T, H]
        return self.predict(h, states)


def seq2seq_loss(model: nn.Module, batch: Seq2SeqBatch) -> Tensor:
    """Mean cross-entropy of the target symbols under teacher forcing (any model above)."""
    logits = model(batch.src, batch.tgt_in)  # [B, T, V]
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt.flatten())


def _check_same_shape(where: str, pred: Tensor, tgt: Tensor) -> None:
    expect_shape(where, "tgt", tgt, [("B", None), ("T", None)])
    expect_shape(where, "pred", pred, [("B", tgt.shape[0]), ("T", tgt.shape[1])])


def token_accuracy(pred: Tensor, tgt: Tensor) -> float:
    """Fraction of positions where ``pred`` equals ``tgt`` (both [B, T])."""
    _check_same_shape("token_accuracy", pred, tgt)
    return (pred == tgt).float().mean().item()


def sequence_accuracy(pred: Tensor, tgt: Tensor) -> float:
    """Fraction of sequences (rows) that are right at every position (both [B, T])."""
    _check_same_shape("sequence_accuracy", pred, tgt)
    return (pred == tgt).all(dim=1).float().mean().item()


def evaluate(model: nn.Module, batch: Seq2SeqBatch) -> tuple[float, float]:
    """Greedy-decode ``batch.src`` and return (token accuracy, sequence accuracy).

    ``model`` is any model with ``greedy_decode(src, length)``: the three above, or
    Chapter 4's :class:`course_lib.transformer.EncoderDecoder`.
    """
    was_training = model.training
    model.eval()
    pred = model.greedy_decode(batch.src, batch.tgt.shape[1])  # [B, T]
    model.train(was_training)
    return token_accuracy(pred, batch.tgt), sequence_accuracy(pred, batch.tgt)
