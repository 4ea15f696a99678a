"""Visible tests of exercise ``ch06-softmax-attention``: weights, context, saturation (chapter 6).

Compared with ``torch.softmax``, ``torch.nn.functional.scaled_dot_product_attention``
and ``torch.autograd.functional.jacobian``, on fixed random inputs on the CPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch06-softmax-attention"
TITLE = "Softmax weights, the context, and saturation"


@test("q1", points=2)
def softmax_matches_torch(softmax):
    """softmax(scores) equals torch.softmax over the last axis"""
    scores = torch.randn(3, 4, 7, generator=torch.Generator().manual_seed(1))
    expect_close("softmax(scores)", softmax(scores), torch.softmax(scores, -1))


@test("q1", points=1)
def softmax_divides_by_the_temperature(softmax):
    """softmax(scores, temperature=T) equals torch.softmax(scores / T)"""
    scores = torch.randn(5, 6, generator=torch.Generator().manual_seed(2))
    for t in (0.1, 0.5, 3.0):
        expect_close(f"softmax(scores, {t})", softmax(scores, t), torch.softmax(scores / t, -1))


@test("q1", points=1)
def softmax_is_stable_for_large_scores(softmax):
    """scores of 1000 and more give finite weights (subtract the maximum first)"""
    scores = torch.tensor([[1000.0, 999.0, -1000.0], [5000.0, 5000.0, 0.0]])
    expect_close("softmax(large scores)", softmax(scores), torch.softmax(scores, -1))


@test("q2", points=2)
def attend_matches_scaled_dot_product_attention(attend):
    """attend(q, keys, values) equals F.scaled_dot_product_attention for one query per row"""
    g = torch.Generator().manual_seed(3)
    q, keys, values = (
        torch.randn(4, 8, generator=g),
        torch.randn(4, 6, 8, generator=g),
        torch.randn(4, 6, 3, generator=g),
    )
    out = attend(q, keys, values)
    if not (isinstance(out, tuple) and len(out) == 2):
        fail(f"attend should return (context, weights), got {type(out).__name__}")
    context, weights = out
    ref = F.scaled_dot_product_attention(q[:, None], keys, values)[:, 0]
    expect_close("context", context, ref, context="q (4, 8), keys (4, 6, 8), values (4, 6, 3)")
    expect_close(
        "weights", weights, torch.softmax(torch.einsum("bd,bnd->bn", q, keys) / math.sqrt(8), -1)
    )


@test("q2", points=1)
def context_is_a_convex_combination(attend):
    """the weights are positive, sum to 1, and the context is their average of the values"""
    g = torch.Generator().manual_seed(4)
    q, keys, values = (
        torch.randn(2, 5, generator=g),
        torch.randn(2, 9, 5, generator=g),
        torch.randn(2, 9, 2, generator=g),
    )
    context, weights = attend(q, keys, values)
    weights = expect_tensor("weights", weights, shape=(2, 9))
    if (weights <= 0).any():
        fail("every softmax weight should be positive")
    expect_close("weights.sum(-1)", weights.sum(-1), torch.ones(2))
    expect_close("context", context, torch.einsum("bn,bnd->bd", weights, values))


@test("q3", points=2)
def jacobian_matches_autograd(softmax_jacobian):
    """softmax_jacobian(weights) equals the Jacobian of torch.softmax computed by autograd"""
    scores = torch.randn(6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    weights = torch.softmax(scores, 0)
    expected = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, 0), scores)
    expect_close("softmax_jacobian", softmax_jacobian(weights), expected, atol=1e-10)


@test("q3", points=1)
def a_saturated_softmax_has_a_vanishing_jacobian(softmax_jacobian):
    """for weights (1 - 2e, e, e) every entry of the Jacobian is below 3e"""
    eps = 1e-6
    weights = torch.tensor([1 - 2 * eps, eps, eps], dtype=torch.float64)
    J = expect_tensor("softmax_jacobian", softmax_jacobian(weights), shape=(3, 3))
    if J.abs().max() > 3 * eps:
        fail(f"the largest entry is {J.abs().max().item():.2e}, expected below {3 * eps:.0e}")
