"""Visible tests of exercise ``ch01-lstm-cell``: an LSTM from its equations (chapter 1).

Every test builds its inputs with a fixed seed on the CPU and compares the
student's function with ``torch.nn.LSTMCell`` / ``torch.nn.LSTM`` after copying
the same weights into them.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.expect import (
    Partial,
    TestFailed,
    expect_close,
    expect_number,
    expect_tensor,
    fail,
)
from course_lib.grading.registry import test
from course_lib.grading.runner import student_error

ASSIGNMENT = "ch01-lstm-cell"
TITLE = "An LSTM, one equation at a time"


def _inputs(batch: int, d_in: int, hidden: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(batch, d_in, generator=g),
        "h": torch.randn(batch, hidden, generator=g),
        "c": torch.randn(batch, hidden, generator=g),
        "W_ih": torch.randn(4 * hidden, d_in, generator=g) * 0.5,
        "W_hh": torch.randn(4 * hidden, hidden, generator=g) * 0.5,
        "b_ih": torch.randn(4 * hidden, generator=g) * 0.5,
        "b_hh": torch.randn(4 * hidden, generator=g) * 0.5,
    }


def _torch_cell(p: dict) -> nn.LSTMCell:
    hidden, d_in = p["W_hh"].shape[1], p["W_ih"].shape[1]
    cell = nn.LSTMCell(d_in, hidden)
    with torch.no_grad():
        for name in ("W_ih", "W_hh", "b_ih", "b_hh"):
            getattr(cell, name.replace("W_", "weight_").replace("b_", "bias_")).copy_(p[name])
    return cell


def _step(lstm_step, p: dict) -> tuple:
    out = lstm_step(p["x"], p["h"], p["c"], p["W_ih"], p["W_hh"], p["b_ih"], p["b_hh"])
    if not isinstance(out, tuple) or len(out) != 2:
        fail(f"lstm_step should return a tuple (h, c), got {type(out).__name__}")
    return out


@test("q1", points=1)
def returns_h_and_c_of_shape_batch_by_hidden(lstm_step):
    """returns (h, c), each of shape (batch, hidden)"""
    p = _inputs(batch=3, d_in=4, hidden=5, seed=1)
    h, c = _step(lstm_step, p)
    expect_tensor("h", h, shape=(3, 5))
    expect_tensor("c", c, shape=(3, 5))


@test("q1", points=3)
def matches_torch_lstmcell(lstm_step):
    """matches torch.nn.LSTMCell with the same weights"""
    p = _inputs(batch=4, d_in=3, hidden=6, seed=2)
    with torch.no_grad():
        h_ref, c_ref = _torch_cell(p)(p["x"], (p["h"], p["c"]))
    h, c = _step(lstm_step, p)
    context = "batch 4, input 3, hidden 6, compared with torch.nn.LSTMCell"
    expect_close("c", c, c_ref, atol=1e-5, context=context)
    expect_close("h", h, h_ref, atol=1e-5, context=context)


@test("q1", points=1)
def works_for_any_batch_size(lstm_step):
    """works for batch sizes 1, 2 and 7 (no size is hard-coded)"""
    passed, problems = 0, []
    sizes = (1, 2, 7)
    for batch in sizes:
        p = _inputs(batch=batch, d_in=2, hidden=3, seed=10 + batch)
        with torch.no_grad():
            h_ref, c_ref = _torch_cell(p)(p["x"], (p["h"], p["c"]))
        try:
            h, c = _step(lstm_step, p)
            expect_close("h", h, h_ref, context=f"batch {batch}")
            expect_close("c", c, c_ref, context=f"batch {batch}")
        except TestFailed as err:
            problems.append(f"batch {batch}: {err}")
        except Exception as err:  # noqa: BLE001 - the student's error, reported as such
            problems.append(f"batch {batch}: {student_error(err)}")
        else:
            passed += 1
    if problems:
        return Partial(
            passed / len(sizes), f"{passed} of {len(sizes)} batch sizes right; " + problems[0]
        )
    return None


def _lstm(d_in: int, hidden: int, seed: int) -> nn.LSTM:
    g = torch.Generator().manual_seed(seed)
    lstm = nn.LSTM(d_in, hidden)
    with torch.no_grad():
        for param in lstm.parameters():
            param.copy_(torch.randn(param.shape, generator=g) * 0.5)
    return lstm


def _forward(lstm_forward, lstm: nn.LSTM, xs, h0, c0):
    out = lstm_forward(
        xs,
        h0,
        c0,
        lstm.weight_ih_l0.detach(),
        lstm.weight_hh_l0.detach(),
        lstm.bias_ih_l0.detach(),
        lstm.bias_hh_l0.detach(),
    )
    if not (
        isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], tuple) and len(out[1]) == 2
    ):
        fail(
            "lstm_forward should return (hs, (h_T, c_T)), like torch.nn.LSTM, "
            f"got {type(out).__name__}"
        )
    return out


def _sequence(steps: int, batch: int, d_in: int, hidden: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(steps, batch, d_in, generator=g)
    h0 = torch.randn(batch, hidden, generator=g)
    c0 = torch.randn(batch, hidden, generator=g)
    return xs, h0, c0


@test("q2", points=1)
def returns_every_hidden_state_and_the_last_state(lstm_forward):
    """returns hs of shape (T, batch, hidden) and (h_T, c_T) of shape (batch, hidden)"""
    lstm = _lstm(3, 4, seed=20)
    xs, h0, c0 = _sequence(5, 2, 3, 4, seed=21)
    hs, (h, c) = _forward(lstm_forward, lstm, xs, h0, c0)
    expect_tensor("hs", hs, shape=(5, 2, 4))
    expect_tensor("h_T", h, shape=(2, 4))
    expect_tensor("c_T", c, shape=(2, 4))


@test("q2", points=2)
def matches_torch_lstm_over_a_sequence(lstm_forward):
    """matches torch.nn.LSTM over a sequence of 7 steps"""
    lstm = _lstm(3, 5, seed=22)
    xs, h0, c0 = _sequence(7, 3, 3, 5, seed=23)
    with torch.no_grad():
        hs_ref, (h_ref, c_ref) = lstm(xs, (h0[None], c0[None]))
    hs, (h, c) = _forward(lstm_forward, lstm, xs, h0, c0)
    context = "7 steps, batch 3, compared with torch.nn.LSTM"
    expect_close("hs", hs, hs_ref, context=context)
    expect_close("h_T", h, h_ref[0], context=context)
    expect_close("c_T", c, c_ref[0], context=context)


@test("q2", points=1)
def the_last_output_is_the_final_state(lstm_forward):
    """hs[-1] is h_T (the one vector an encoder hands on)"""
    lstm = _lstm(2, 3, seed=24)
    xs, h0, c0 = _sequence(4, 2, 2, 3, seed=25)
    hs, (h, _) = _forward(lstm_forward, lstm, xs, h0, c0)
    hs = expect_tensor("hs", hs, shape=(4, 2, 3))
    expect_close("h_T", h, hs[-1], atol=0, rtol=0, context="h_T should equal hs[-1] exactly")


@test("q3", points=1)
def counts_the_parameters_of_one_layer(lstm_num_parameters):
    """counts the parameters of a one-layer LSTM like torch.nn.LSTM"""
    for d_in, hidden in ((3, 5), (10, 1), (1, 8)):
        expected = sum(p.numel() for p in nn.LSTM(d_in, hidden).parameters())
        got = lstm_num_parameters(d_in, hidden)
        expect_number(
            "the count",
            got,
            expected,
            integer=True,
            context=f"input_size={d_in}, hidden_size={hidden}, one layer",
        )


@test("q3", points=1)
def counts_the_parameters_of_stacked_layers(lstm_num_parameters):
    """counts the parameters of stacked layers (num_layers=3)"""
    for d_in, hidden, layers in ((3, 5, 3), (16, 4, 2)):
        expected = sum(p.numel() for p in nn.LSTM(d_in, hidden, num_layers=layers).parameters())
        got = lstm_num_parameters(d_in, hidden, layers)
        expect_number(
            "the count",
            got,
            expected,
            integer=True,
            context=f"input_size={d_in}, hidden_size={hidden}, num_layers={layers}",
        )
