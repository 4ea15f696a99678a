"""Hidden tests for ``ch01-encoder-decoder`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch
from torch import nn

from course_lib.grading import fail, test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def sequences_of_length_one(encode):
    """Every sequence one token long: the context is one GRU step from zero."""
    g = torch.Generator().manual_seed(201)
    cell = nn.GRUCell(3, 2)
    xs = torch.randn(4, 5, 3, generator=g)
    lengths = torch.ones(5, dtype=torch.long)
    with torch.no_grad():
        expected = cell(xs[0], torch.zeros(5, 2))
        got = encode(cell, xs, lengths)
    expect_close("hidden check: context after one token", got, expected)


@test("q2", points=1)
def one_step_only(greedy_decode):
    """max_len=1 gives exactly one token per row, the argmax of the first step."""
    logits = torch.tensor([[0.0, 1.0, 5.0], [3.0, 0.0, 1.0]])

    def step(tokens, h):
        return logits, h

    out = greedy_decode(step, torch.zeros(2, 1), 1, 0, 1)
    if not isinstance(out, torch.Tensor) or out.tolist() != [[2], [0]]:
        fail(f"hidden check: with max_len=1 expected [[2], [0]], got {out}")


@test("q3", points=1)
def targets_without_an_end_token(sequence_accuracy):
    """A target row with no eos is compared over its whole length."""
    target = torch.tensor([[4, 5, 6], [7, 8, 9]])
    pred = torch.tensor([[4, 5, 6], [7, 8, 2]])
    got = sequence_accuracy(pred, target, 1)
    if not isinstance(got, float) or abs(got - 0.5) > 1e-9:
        fail(f"hidden check: expected 0.5 when one row without eos is wrong, got {got!r}")
