"""Hidden tests for ``ch06-bilinear-heads`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import fail, test


@test("q2", points=1)
def finds_the_most_negative_direction(negative_self_score):
    """For A = diag(1, -3, 2), the answer is +-e_2 (the most negative self-score)."""
    x = negative_self_score(torch.diag(torch.tensor([1.0, -3.0, 2.0], dtype=torch.float64)))
    if x is None or abs(abs(float(x[1])) - 1) > 1e-6:
        fail("hidden check: expected the unit vector along the negative eigenvalue")


@test("q3", points=1)
def ignored_direction_is_none_for_full_rank(ignored_direction):
    """A full-rank head ignores no direction: the answer is None."""
    A = torch.eye(4, dtype=torch.float64) + 0.1 * torch.ones(4, 4, dtype=torch.float64)
    if ignored_direction(A) is not None:
        fail("hidden check: a full-rank A has no ignored direction, expected None")
