"""Visible tests of exercise ``ch06-bilinear-heads``: what a head compares (chapter 6).

The head's matrix is checked against the attention scores computed from the
projections; the two vectors the student finds are checked for the property
asked (negative self-score, zero scores), on fixed random heads on the CPU.
"""

from __future__ import annotations

import torch

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch06-bilinear-heads"
TITLE = "A head is a bilinear form, not a metric"


def _head(d_model: int, d_k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(d_model, d_k, generator=g, dtype=torch.float64),
        torch.randn(d_model, d_k, generator=g, dtype=torch.float64),
    )


@test("q1", points=2)
def head_matrix_gives_the_scores(head_matrix):
    """x^T A y equals (x W_Q) . (y W_K) for every pair of tokens"""
    W_Q, W_K = _head(8, 2, seed=1)
    A = expect_tensor("head_matrix(W_Q, W_K)", head_matrix(W_Q, W_K), shape=(8, 8))
    X = torch.randn(5, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    expect_close("X A X^T", X @ A @ X.T, (X @ W_Q) @ (X @ W_K).T, atol=1e-10)


@test("q2", points=2)
def finds_a_token_that_scores_itself_negatively(negative_self_score):
    """negative_self_score(A) returns a unit x with x^T A x < 0 for a random head"""
    W_Q, W_K = _head(6, 3, seed=3)
    A = W_Q @ W_K.T
    x = expect_tensor("x", negative_self_score(A), shape=(6,))
    expect_close(
        "the norm of x", x.norm().reshape(1), torch.ones(1, dtype=torch.float64), atol=1e-6
    )
    if not (x.to(A.dtype) @ A @ x.to(A.dtype)) < -1e-9:
        fail(f"x^T A x should be negative, got {(x.to(A.dtype) @ A @ x.to(A.dtype)).item():.3g}")


@test("q2", points=1)
def returns_none_for_a_positive_semidefinite_form(negative_self_score):
    """negative_self_score(A) is None when x^T A x >= 0 for every x (e.g. A = W W^T)"""
    W, _ = _head(5, 2, seed=4)
    if negative_self_score(W @ W.T) is not None:
        fail("for A = W W^T no x has x^T A x < 0: expected None")


@test("q3", points=2)
def finds_a_direction_the_head_ignores(ignored_direction):
    """ignored_direction(A) returns a unit x with x^T A y = 0 for every y (rank A < d)"""
    W_Q, W_K = _head(7, 2, seed=5)
    A = W_Q @ W_K.T
    x = expect_tensor("x", ignored_direction(A), shape=(7,))
    expect_close(
        "the norm of x", x.norm().reshape(1), torch.ones(1, dtype=torch.float64), atol=1e-6
    )
    expect_close("x^T A", x.to(A.dtype) @ A, torch.zeros(7, dtype=torch.float64), atol=1e-8)
