"""Hidden tests for ``ch13-cls-attention`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def uniform_attention_gives_a_uniform_map(last_layer_cls_map):
    """Uniform attention in every head gives 1 / N on every patch."""
    w = torch.full((2, 1, 2, 10, 10), 0.1)
    expect_close("hidden check: map", last_layer_cls_map(w, 3), torch.full((1, 3, 3), 1 / 9))


@test("q2", points=1)
def residual_one_is_the_identity(rollout):
    """With residual 1 every layer is the identity, and so is the rollout."""
    g = torch.Generator().manual_seed(61)
    w = torch.softmax(torch.randn(3, 2, 2, 5, 5, generator=g), dim=-1)
    expect_close("hidden check: R", rollout(w, 1.0), torch.eye(5).expand(2, 5, 5))
