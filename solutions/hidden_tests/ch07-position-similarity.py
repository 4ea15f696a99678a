"""Hidden tests for ``ch07-position-similarity`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

from course_lib.grading import fail, test
from course_lib.grading.expect import expect_number


@test("q1", points=1)
def similarity_of_a_wide_table(similarity):
    """similarity(1, 512) is 249.10 (the slow pairs barely move)."""
    expect_number("hidden check: similarity(1, 512)", similarity(1, 512), 249.102, tol=0.01)


@test("q2", points=1)
def respects_max_offset(first_alias):
    """first_alias(4, 5) is None: the first alias of d = 4 is at offset 6."""
    if first_alias(4, 5) is not None:
        fail("hidden check: first_alias(4, 5) should be None")
