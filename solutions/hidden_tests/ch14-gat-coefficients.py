"""Hidden tests for ``ch14-gat-coefficients`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def equal_neighbours_share_equally(gat_coefficients):
    """Neighbours with identical features get identical coefficients, 1 / degree."""
    g = torch.Generator().manual_seed(71)
    x = torch.randn(1, 3, generator=g).repeat(5, 1)
    x[0] = torch.randn(3, generator=g)
    weight, att_src, att_dst = torch.randn(4, 3, generator=g), torch.randn(4), torch.randn(4)
    got = gat_coefficients(x, weight, att_src, att_dst, 0, [1, 2, 3, 4])
    expect_close("hidden check: alpha", got, torch.full((4,), 0.25))


@test("q2", points=1)
def large_scores_do_not_overflow(gat_output):
    """Scores in the hundreds still give finite outputs: the largest neighbour wins."""
    x = torch.tensor([[0.0], [1.0], [2.0]])
    weight, att_src, att_dst = torch.ones(1, 1), torch.full((1,), 500.0), torch.zeros(1)
    got = gat_output(x, weight, att_src, att_dst, 0, [1, 2])
    expect_close("hidden check: h_i", got, torch.tensor([2.0]))
