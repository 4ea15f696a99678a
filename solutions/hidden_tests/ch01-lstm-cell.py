"""Hidden tests for ``ch01-lstm-cell`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Written like the visible tests in course_lib/grading/assignments/ch01_lstm_cell.py;
students see only each test's name and whether it passed, never this file.
"""

import torch
from torch import nn

from course_lib.grading import fail, test
from course_lib.grading.expect import expect_close


@test("q1", points=2)
def gradients_match_lstmcell(lstm_step):
    """The step is differentiable like torch.nn.LSTMCell (no detach, no in-place edits)."""
    g = torch.Generator().manual_seed(101)
    cell = nn.LSTMCell(3, 4)
    x, h, c = (torch.randn(2, n, generator=g, requires_grad=True) for n in (3, 4, 4))
    h_ref, c_ref = cell(x, (h, c))
    (h_ref.sum() + 2 * c_ref.sum()).backward()
    expected = [t.grad.clone() for t in (x, h, c, cell.weight_ih, cell.weight_hh)]
    weights = [p.detach().clone().requires_grad_(True) for p in cell.parameters()]
    for t in (x, h, c):
        t.grad = None
    h_new, c_new = lstm_step(x, h, c, *weights)
    if not (h_new.requires_grad and c_new.requires_grad):
        fail("hidden check: the outputs of lstm_step are cut off from autograd")
    (h_new.sum() + 2 * c_new.sum()).backward()
    got = [x.grad, h.grad, c.grad, weights[0].grad, weights[1].grad]
    for name, a, b in zip(("x", "h", "c", "W_ih", "W_hh"), got, expected, strict=True):
        if a is None:
            fail(f"hidden check: no gradient reaches {name} through lstm_step")
        expect_close(f"hidden check: gradient with respect to {name}", a, b, atol=1e-5)


@test("q1", points=1)
def keeps_double_precision(lstm_step):
    """float64 inputs give float64 outputs, accurate to 1e-10."""
    g = torch.Generator().manual_seed(102)
    cell = nn.LSTMCell(5, 3).double()
    x, h, c = (torch.randn(4, n, generator=g, dtype=torch.float64) for n in (5, 3, 3))
    with torch.no_grad():
        h_ref, c_ref = cell(x, (h, c))
        h_new, c_new = lstm_step(x, h, c, *cell.parameters())
    if h_new.dtype != torch.float64:
        fail(f"hidden check: float64 in, {h_new.dtype} out")
    expect_close("hidden check: h in float64", h_new, h_ref, atol=1e-10, rtol=0)


@test("q2", points=1)
def long_sequences_stay_accurate(lstm_forward):
    """60 steps, batch 1, still equal to torch.nn.LSTM."""
    g = torch.Generator().manual_seed(103)
    lstm = nn.LSTM(2, 3)
    xs = torch.randn(60, 1, 2, generator=g)
    h0 = torch.zeros(1, 3)
    with torch.no_grad():
        expected, _ = lstm(xs)
        hs, _ = lstm_forward(xs, h0, h0, *lstm.parameters())
    expect_close("hidden check: hs over 60 steps", hs, expected, atol=1e-5)


@test("q3", points=1)
def counts_wide_layers(lstm_num_parameters):
    """A wide, deep LSTM: 4 layers of 256 units over 300 inputs."""
    expected = sum(p.numel() for p in nn.LSTM(300, 256, num_layers=4).parameters())
    got = lstm_num_parameters(300, 256, 4)
    if got != expected:
        fail(f"hidden check: expected {expected} parameters for the wide LSTM, got {got}")
