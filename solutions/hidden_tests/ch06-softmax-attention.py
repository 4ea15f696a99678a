"""Hidden tests for ``ch06-softmax-attention`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import fail, test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def softmax_is_differentiable(softmax):
    """Gradients flow through softmax (no detach, no numpy)."""
    s = torch.randn(4, 5, requires_grad=True, generator=torch.Generator().manual_seed(301))
    out = softmax(s)
    if not out.requires_grad:
        fail("hidden check: softmax output is cut off from autograd")
    (out[:, 0]).sum().backward()
    ref = s.detach().clone().requires_grad_(True)
    torch.softmax(ref, -1)[:, 0].sum().backward()
    expect_close("hidden check: gradient", s.grad, ref.grad)


@test("q3", points=1)
def jacobian_rows_sum_to_zero(softmax_jacobian):
    """Each row of the Jacobian sums to 0 (adding a constant to the scores changes nothing)."""
    w = torch.softmax(
        torch.randn(8, dtype=torch.float64, generator=torch.Generator().manual_seed(302)), 0
    )
    expect_close(
        "hidden check: row sums",
        softmax_jacobian(w).sum(1),
        torch.zeros(8, dtype=torch.float64),
        atol=1e-12,
    )
