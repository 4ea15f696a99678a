"""Hidden tests for ``ch07-sinusoidal-table`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import math

from course_lib.grading import fail, test


@test("q1", points=1)
def far_positions_are_accurate(sinusoidal_table):
    """Position 100,000 is accurate to 1e-4 (compute the angles in double precision)."""
    row = sinusoidal_table(100_001, 4)[-1]
    expected = [math.sin(1e5), math.cos(1e5), math.sin(1e3), math.cos(1e3)]
    if max(abs(float(a) - b) for a, b in zip(row, expected, strict=True)) > 1e-4:
        fail("hidden check: position 100000 is not accurate to 1e-4")


@test("q2", points=1)
def the_shift_by_zero_is_the_identity(shift_matrix):
    """shift_matrix(0, d) is the identity."""
    M = shift_matrix(0, 6)
    if any(abs(float(M[i, j]) - (i == j)) > 1e-12 for i in range(6) for j in range(6)):
        fail("hidden check: shift_matrix(0, 6) should be the identity")
