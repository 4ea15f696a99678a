"""Hidden tests for ``ch09-warmup-cosine`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

from course_lib.grading import test
from course_lib.grading.expect import expect_number


@test("q1", points=1)
def halfway_through_the_decay(warmup_cosine_lr):
    """Halfway through the decay the rate is the mean of the peak and the floor."""
    expect_number("hidden check: the rate", warmup_cosine_lr(60, 1.0, 20, 100, 0.2), 0.6, tol=1e-12)


@test("q2", points=1)
def four_times_warmup_halves_the_rate(inverse_sqrt_lr):
    """At four times the warmup the inverse-sqrt rate is half the peak."""
    expect_number("hidden check: the rate", inverse_sqrt_lr(400, 2e-3, 100), 1e-3, tol=1e-15)
