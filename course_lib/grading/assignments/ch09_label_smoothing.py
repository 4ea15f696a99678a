"""Visible tests of exercise ``ch09-label-smoothing``: label-smoothed cross-entropy (chapter 9).

The smoothed targets are checked against their definition on small cases, and
the loss against ``torch.nn.CrossEntropyLoss(label_smoothing=...)``.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.expect import expect_close, expect_tensor
from course_lib.grading.registry import test

ASSIGNMENT = "ch09-label-smoothing"
TITLE = "Label smoothing, from the target distribution to the loss"


@test("q1", points=1)
def targets_have_the_right_shape_and_sum_to_one(smoothed_targets):
    """returns a (N, C) tensor whose rows sum to 1"""
    q = expect_tensor("q", smoothed_targets(torch.tensor([0, 2, 1]), 4, 0.1), shape=(3, 4))
    expect_close("row sums", q.sum(dim=1), torch.ones(3), atol=1e-6)


@test("q1", points=2)
def targets_match_the_definition(smoothed_targets):
    """puts 1 - eps + eps / C on the true class and eps / C on the others"""
    q = smoothed_targets(torch.tensor([1, 0]), 5, 0.25)
    expected = torch.full((2, 5), 0.05)
    expected[0, 1] = expected[1, 0] = 0.8
    expect_close("q", q, expected, atol=1e-6, context="C=5, eps=0.25")
    expect_close("q (eps=0)", smoothed_targets(torch.tensor([3]), 4, 0.0), torch.eye(4)[3:4])


@test("q2", points=3)
def loss_matches_torch(label_smoothed_cross_entropy):
    """equals torch.nn.CrossEntropyLoss(label_smoothing=eps) (mean over the batch)"""
    g = torch.Generator().manual_seed(0)
    for n, c, eps in ((6, 3, 0.1), (20, 11, 0.0), (5, 7, 0.4)):
        logits = torch.randn(n, c, generator=g) * 3
        target = torch.randint(0, c, (n,), generator=g)
        expected = nn.CrossEntropyLoss(label_smoothing=eps)(logits, target)
        got = label_smoothed_cross_entropy(logits, target, eps)
        expect_close("the loss", got, expected, atol=1e-5, context=f"N={n}, C={c}, eps={eps}")
