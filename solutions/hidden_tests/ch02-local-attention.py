"""Hidden tests for ``ch02-local-attention`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import fail, test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def concat_is_the_additive_network(luong_scores):
    """The concat score equals v^T tanh(W_q s + W_k h) with W = [W_q | W_k]."""
    g = torch.Generator().manual_seed(311)
    q, k = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 3, generator=g)
    W, v = torch.randn(6, 7, generator=g), torch.randn(6, generator=g)
    expected = torch.tanh((q @ W[:, :4].T)[:, :, None] + (k @ W[:, 4:].T)[:, None]) @ v
    expect_close("hidden check: concat scores", luong_scores(q, k, "concat", W, v), expected)


@test("q2", points=1)
def window_of_zero_is_hard_alignment(local_weights):
    """D = 0 puts all the weight on the centre position."""
    scores = torch.randn(1, 4, 4, generator=torch.Generator().manual_seed(312))
    centers = torch.tensor([[3, 2, 1, 0]])
    got = local_weights(scores, centers, 0)
    if not torch.equal(got, torch.eye(4).flip(1)[None]):
        fail("hidden check: with D = 0 the weights should be one-hot at the centres")
