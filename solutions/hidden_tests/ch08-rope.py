"""Hidden tests for ``ch08-rope`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import fail, test


@test("q1", points=1)
def position_zero_is_not_rotated(apply_rope):
    """At position 0 the rotation is the identity."""
    x = torch.randn(1, 12, generator=torch.Generator().manual_seed(801))
    if not torch.allclose(apply_rope(x, torch.tensor([0])), x, atol=1e-6):
        fail("hidden check: position 0 should leave the vector unchanged")


@test("q2", points=1)
def permutation_of_width_2(interleaved_to_half):
    """For d = 2 both layouts coincide: the permutation is [0, 1]."""
    if [int(i) for i in interleaved_to_half(2)] != [0, 1]:
        fail("hidden check: interleaved_to_half(2) should be [0, 1]")
