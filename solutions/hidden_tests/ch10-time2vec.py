"""Hidden tests for ``ch10-time2vec`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import pandas as pd
import torch

from course_lib.grading import test
from course_lib.grading.expect import expect_number


@test("q1", points=1)
def one_periodic_component(time2vec):
    """Works with k = 1: sin(pi / 2) = 1 at tau = 1, w = pi / 2, b = 0."""
    out = time2vec(
        torch.ones(1),
        torch.tensor(0.0),
        torch.tensor(0.0),
        torch.tensor([torch.pi / 2]),
        torch.zeros(1),
    )
    expect_number("hidden check: the periodic component", out[0, 1], 1.0, tol=1e-6)


@test("q2", points=1)
def new_year_in_a_leap_year(calendar_features):
    """31 December of a leap year is 365/366 of the way through its year."""
    f = calendar_features(pd.DatetimeIndex(["2000-12-31"]))
    expect_number(
        "hidden check: the cosine",
        f[0, 1],
        float(torch.cos(torch.tensor(2 * torch.pi * 365 / 366, dtype=torch.float64))),
        tol=1e-6,
    )
