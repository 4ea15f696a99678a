"""Hidden tests for ``ch09-label-smoothing`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import math

import torch

from course_lib.grading import test
from course_lib.grading.expect import expect_number


@test("q1", points=1)
def full_smoothing_is_uniform(smoothed_targets):
    """With eps = 1 every class gets 1 / C."""
    q = smoothed_targets(torch.tensor([2]), 8, 1.0)
    expect_number("hidden check: a target", q[0, 5].item(), 1 / 8, tol=1e-6)


@test("q2", points=1)
def uniform_logits_cost_log_c(label_smoothed_cross_entropy):
    """Equal logits cost log C whatever eps is."""
    loss = label_smoothed_cross_entropy(torch.zeros(3, 6), torch.tensor([0, 4, 5]), 0.3)
    expect_number("hidden check: the loss", loss, math.log(6), tol=1e-5)
