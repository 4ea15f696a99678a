"""Visible tests of exercise ``ch01-encoder-decoder``: the context vector, greedy decoding, accuracy.

``encode`` is compared with ``torch.nn.GRU`` on packed sequences;
``greedy_decode`` is driven by scripted decoders whose greedy output is known
by construction; ``sequence_accuracy`` is checked on small hand-made batches.
All inputs are built on the CPU with fixed seeds.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from course_lib.grading.expect import expect_close, expect_equal, expect_number, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch01-encoder-decoder"
TITLE = "One vector for a whole sequence: encoding, greedy decoding, accuracy"


# -- q1: encode ---------------------------------------------------------------------------


def _cell(d_in: int, hidden: int, seed: int) -> nn.GRUCell:
    g = torch.Generator().manual_seed(seed)
    cell = nn.GRUCell(d_in, hidden)
    with torch.no_grad():
        for param in cell.parameters():
            param.copy_(torch.randn(param.shape, generator=g) * 0.5)
    return cell


def _padded(lengths: list[int], d_in: int, seed: int, pad_scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    steps = max(lengths)
    xs = torch.randn(steps, len(lengths), d_in, generator=g)
    garbage = torch.randn(steps, len(lengths), d_in, generator=g) * pad_scale
    for b, n in enumerate(lengths):
        xs[n:, b] = garbage[n:, b]  # padding: any values at all
    return xs, torch.tensor(lengths)


def _reference(cell: nn.GRUCell, xs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    gru = nn.GRU(cell.input_size, cell.hidden_size)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(gru, f"{name}_l0").copy_(getattr(cell, name))
        _, h_n = gru(pack_padded_sequence(xs, lengths, enforce_sorted=False))
    return h_n[0]


@test("q1", points=1)
def returns_one_vector_per_sequence(encode):
    """returns a context of shape (batch, hidden)"""
    cell = _cell(3, 5, seed=1)
    xs, lengths = _padded([4, 4], 3, seed=2)
    expect_tensor("context", encode(cell, xs, lengths), shape=(2, 5))


@test("q1", points=2)
def matches_torch_gru_for_equal_lengths(encode):
    """matches torch.nn.GRU's final state when no sequence is padded"""
    cell = _cell(3, 4, seed=3)
    xs, lengths = _padded([6, 6, 6], 3, seed=4)
    with torch.no_grad():
        got = encode(cell, xs, lengths)
    expect_close(
        "context",
        got,
        _reference(cell, xs, lengths),
        context="lengths [6, 6, 6], compared with torch.nn.GRU",
    )


@test("q1", points=2)
def matches_torch_gru_for_padded_batches(encode):
    """keeps each sequence's state at its own last token (lengths differ)"""
    cell = _cell(2, 4, seed=5)
    xs, lengths = _padded([5, 2, 7, 1], 2, seed=6)
    with torch.no_grad():
        got = encode(cell, xs, lengths)
    expect_close(
        "context",
        got,
        _reference(cell, xs, lengths),
        context="lengths [5, 2, 7, 1], compared with torch.nn.GRU on packed sequences",
    )


@test("q1", points=1)
def padding_values_do_not_matter(encode):
    """gives the same context whatever the padding holds"""
    cell = _cell(2, 3, seed=7)
    xs_a, lengths = _padded([3, 6, 2], 2, seed=8, pad_scale=0.0)
    xs_b, _ = _padded([3, 6, 2], 2, seed=8, pad_scale=100.0)
    with torch.no_grad():
        a = expect_tensor("context", encode(cell, xs_a, lengths), shape=(3, 3))
        b = encode(cell, xs_b, lengths)
    expect_close("context", b, a, context="same sequences, padding changed from 0 to 100*noise")


# -- q2: greedy_decode ----------------------------------------------------------------------

VOCAB = 16


class _Decoder:
    """A decoder step whose greedy output is known: a fixed next-token table per row.

    ``paths[b]`` is the sequence row ``b`` produces when each prediction is fed
    back; after ``eos_at[b]`` tokens the row emits ``eos_id``, and after that,
    anything (a decoder must keep finished rows finished itself).
    """

    def __init__(
        self, paths: list[list[int]], bos_id: int, eos_id: int, seed: int, by_time: bool = False
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        self.batch, self.bos_id, self.eos_id, self.by_time = len(paths), bos_id, eos_id, by_time
        ordinary = [v for v in range(VOCAB) if v not in (bos_id, eos_id)]
        pick = torch.tensor(ordinary)
        self.table = pick[torch.randint(len(ordinary), (self.batch, VOCAB), generator=g)]
        for b, path in enumerate(paths):
            previous = bos_id
            for token in path:
                self.table[b, previous] = token
                previous = token
        self.paths = paths
        self.noise = torch.Generator().manual_seed(seed + 1)
        self.calls = 0
        self.fed: list[torch.Tensor] = []

    def __call__(self, tokens, h):
        if not isinstance(tokens, torch.Tensor) or tuple(tokens.shape) != (self.batch,):
            shape = (
                tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            )
            fail(
                f"step(tokens, h) expects tokens of shape ({self.batch},), one per row; got {shape}"
            )
        if tokens.dtype != torch.long:
            fail(f"step(tokens, h) expects token ids of dtype torch.long, got {tokens.dtype}")
        tokens = tokens.cpu()
        self.calls += 1
        self.fed.append(tokens.clone())
        if self.by_time:
            t = h[:, 0].round().long().cpu()
            nxt = torch.tensor(
                [self.paths[b][min(int(t[b]), len(self.paths[b]) - 1)] for b in range(self.batch)]
            )
        else:
            nxt = self.table[torch.arange(self.batch), tokens.clamp(0, VOCAB - 1)]
        logits = torch.randn(self.batch, VOCAB, generator=self.noise) * 0.3
        logits[torch.arange(self.batch), nxt] += 4.0
        h = h.clone()
        h[:, 0] += 1
        return logits.to(h.device), h


def _paths(lengths: list[int], seed: int, bos_id: int, eos_id: int, end: bool) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    ordinary = torch.tensor([v for v in range(VOCAB) if v not in (bos_id, eos_id)])
    paths = []
    for n in lengths:
        tokens = ordinary[torch.randperm(len(ordinary), generator=g)[: n - 1 if end else n]]
        paths.append(tokens.tolist() + ([eos_id] if end else []))
    return paths


def _decode(greedy_decode, step, batch: int, bos_id: int, eos_id: int, max_len: int):
    h = torch.zeros(batch, 4)
    return greedy_decode(step, h, bos_id, eos_id, max_len)


@test("q2", points=1)
def starts_from_bos_and_returns_token_ids(greedy_decode):
    """feeds bos_id first and returns token ids of shape (batch, max_len)"""
    bos, eos = 2, 3
    step = _Decoder(_paths([9, 9, 9], seed=10, bos_id=bos, eos_id=eos, end=False), bos, eos, 11)
    out = _decode(greedy_decode, step, 3, bos, eos, max_len=4)
    if not step.fed:
        fail("greedy_decode never called step(tokens, h)")
    expect_equal(
        "the first tokens fed to step", step.fed[0], torch.full((3,), bos), context=f"bos_id={bos}"
    )
    expect_tensor("the output", out, shape=(3, 4), dtype=torch.long)


@test("q2", points=2)
def feeds_back_its_own_prediction(greedy_decode):
    """feeds each step's argmax back in as the next input"""
    bos, eos = 0, 1
    paths = _paths([8, 8, 8, 8], seed=12, bos_id=bos, eos_id=eos, end=False)
    step = _Decoder(paths, bos, eos, 13)
    out = _decode(greedy_decode, step, 4, bos, eos, max_len=6)
    expected = torch.tensor([p[:6] for p in paths])
    expect_equal("the decoded tokens", out, expected, context="no row reaches eos in 6 steps")


@test("q2", points=1)
def threads_the_decoder_state(greedy_decode):
    """passes each step's returned state h to the next step"""
    bos, eos = 0, 1
    paths = _paths([5, 5], seed=14, bos_id=bos, eos_id=eos, end=False)
    step = _Decoder(paths, bos, eos, 15, by_time=True)
    out = _decode(greedy_decode, step, 2, bos, eos, max_len=5)
    expect_equal(
        "the decoded tokens",
        out,
        torch.tensor(paths),
        context="this decoder's output depends on the state it is given",
    )


@test("q2", points=2)
def stops_when_every_sequence_has_ended(greedy_decode):
    """stops once every row has produced eos_id; later positions of a row hold eos_id"""
    bos, eos = 4, 5
    ends = [2, 5, 3]
    paths = _paths(ends, seed=16, bos_id=bos, eos_id=eos, end=True)
    step = _Decoder(paths, bos, eos, 17)
    out = _decode(greedy_decode, step, 3, bos, eos, max_len=10)
    expected = torch.tensor([p + [eos] * (max(ends) - len(p)) for p in paths])
    expect_equal(
        "the decoded tokens",
        out,
        expected,
        context=f"rows end after {ends} tokens, max_len=10, eos_id={eos}",
    )
    if step.calls != max(ends):
        fail(
            f"step was called {step.calls} times; the last row ends after {max(ends)}, "
            "so decoding should stop there"
        )


# -- q3: sequence_accuracy ------------------------------------------------------------------

EOS = 1


def _acc(sequence_accuracy, pred: list[list[int]], target: list[list[int]]):
    return sequence_accuracy(torch.tensor(pred), torch.tensor(target), EOS)


@test("q3", points=1)
def all_right_is_one_and_all_wrong_is_zero(sequence_accuracy):
    """returns 1.0 when every sequence matches and 0.0 when none does"""
    target = [[5, 6, 7, EOS], [8, 9, EOS, 0]]
    expect_number(
        "the accuracy", _acc(sequence_accuracy, target, target), 1.0, context="prediction == target"
    )
    wrong = [[6, 6, 7, EOS], [8, 8, EOS, 0]]
    expect_number(
        "the accuracy",
        _acc(sequence_accuracy, wrong, target),
        0.0,
        context="one wrong token in every sequence",
    )


@test("q3", points=1)
def one_wrong_token_fails_the_whole_sequence(sequence_accuracy):
    """scores whole sequences: one wrong token makes its sequence wrong"""
    target = [[2, 3, 4, 5, EOS], [3, 4, 5, 6, EOS], [4, 5, 6, 7, EOS], [5, 6, 7, 8, EOS]]
    pred = [row[:] for row in target]
    pred[2][1] = 9
    expect_number(
        "the accuracy",
        _acc(sequence_accuracy, pred, target),
        0.75,
        context="3 of 4 sequences exact (19 of 20 tokens right)",
    )


@test("q3", points=1)
def ignores_what_comes_after_the_end(sequence_accuracy):
    """ignores positions after the target's eos, but needs the eos itself"""
    target = [[3, 4, EOS, 0, 0], [5, EOS, 0, 0, 0], [6, 7, 8, EOS, 0]]
    pred = [[3, 4, EOS, 9, 9], [5, EOS, 7, 7, 7], [6, 7, 8, 2, 0]]
    expect_number(
        "the accuracy",
        _acc(sequence_accuracy, pred, target),
        2 / 3,
        tol=1e-6,
        context="rows 1-2 differ only after eos; row 3 misses its eos",
    )


@test("q3", points=1)
def compares_predictions_of_another_length(sequence_accuracy):
    """handles a prediction shorter or longer than the target"""
    target = [[3, 4, 5, EOS], [6, EOS, 0, 0]]
    short = [[3, 4], [6, EOS]]
    expect_number(
        "the accuracy",
        _acc(sequence_accuracy, short, target),
        0.5,
        tol=1e-6,
        context="prediction of length 2: row 1 stops too early, row 2 is complete",
    )
    long = [[3, 4, 5, EOS, 8, 8], [6, EOS, 9, 9, 9, 9]]
    expect_number(
        "the accuracy",
        _acc(sequence_accuracy, long, target),
        1.0,
        tol=1e-6,
        context="prediction of length 6, right up to eos",
    )
