"""Hidden tests for ``ch10-patchify`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import test
from course_lib.grading.expect import expect_number


@test("q1", points=1)
def patchtst_default(num_patches):
    """PatchTST's default look-back 336 with P = 16, S = 8 gives 41 patches (before padding)."""
    expect_number("hidden check: N", num_patches(336, 16, 8), 41, integer=True)


@test("q2", points=1)
def last_patch_ends_at_the_right_place(patchify):
    """The last patch of arange(20) with P = 6, S = 5 is 10, ..., 15."""
    out = patchify(torch.arange(20.0).reshape(1, 1, 20), 6, 5)
    expect_number("hidden check: the last value", out[0, 0, -1, -1], 15.0, tol=0)
