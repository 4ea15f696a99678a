"""Hidden tests for ``ch02-additive-attention`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import fail, test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def scores_are_differentiable(additive_scores):
    """Gradients reach W, U and v through the scores (no detach, no numpy)."""
    g = torch.Generator().manual_seed(301)
    W, U, v = (torch.randn(*s, generator=g, requires_grad=True) for s in ((4, 3), (4, 2), (4,)))
    scores = additive_scores(
        torch.randn(2, 3, generator=g), torch.randn(2, 5, 2, generator=g), W, U, v
    )
    if not scores.requires_grad:
        fail("hidden check: the scores are cut off from autograd")
    scores.sum().backward()
    if any(p.grad is None or not torch.isfinite(p.grad).all() for p in (W, U, v)):
        fail("hidden check: no finite gradient reaches W, U and v")


@test("q2", points=1)
def large_scores_do_not_overflow(attention_context):
    """Scores of +-1000 give a finite context (the softmax is computed stably)."""
    scores = torch.tensor([[1000.0, 0.0, -1000.0]])
    values = torch.tensor([[[1.0], [2.0], [3.0]]])
    context, weights = attention_context(scores, values)
    expect_close("hidden check: context", context, torch.tensor([[1.0]]))
    expect_close("hidden check: weights", weights, torch.tensor([[1.0, 0.0, 0.0]]))
