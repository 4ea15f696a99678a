"""Visible tests of exercise ``ch11-next-token-loss``: the next-token loss and perplexity.

The loss is compared with ``torch.nn.functional.cross_entropy`` applied to the
shifted logits and targets, and the perplexity with its exponential; uniform
and certain predictions give values known by construction. Inputs use fixed
seeds, on the CPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.grading.expect import expect_close, expect_number, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch11-next-token-loss"
TITLE = "The next-token loss and perplexity"


def _batch(b: int, t: int, v: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, v, generator=g) * 2, torch.randint(0, v, (b, t), generator=g)


def _reference(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, v), tokens[:, 1:].reshape(-1))


@test("q1", points=1)
def the_loss_is_a_scalar(next_token_loss):
    """returns a scalar tensor (shape ())"""
    logits, tokens = _batch(2, 5, 7, seed=1)
    expect_tensor("the loss", next_token_loss(logits, tokens), shape=())


@test("q1", points=3)
def the_loss_matches_torch_on_shifted_targets(next_token_loss):
    """equals F.cross_entropy of logits[:, :-1] against tokens[:, 1:] (mean over B (T - 1))"""
    for b, t, v, seed in ((2, 5, 7, 2), (4, 9, 3, 3), (1, 16, 30, 4)):
        logits, tokens = _batch(b, t, v, seed)
        expect_close(
            "the loss",
            next_token_loss(logits, tokens),
            _reference(logits, tokens),
            atol=1e-5,
            context=f"B={b}, T={t}, V={v}; the output at t predicts the token at t + 1",
        )


@test("q1", points=1)
def uniform_logits_cost_log_v(next_token_loss):
    """equal logits cost ln V nats per token"""
    tokens = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(5))
    expect_number("the loss", next_token_loss(torch.zeros(3, 6, 11), tokens), math.log(11), 1e-5)


@test("q1", points=1)
def the_last_position_has_no_target(next_token_loss):
    """the logits at the last position get zero gradient (nothing follows them)"""
    logits, tokens = _batch(2, 4, 5, seed=6)
    logits.requires_grad_(True)
    loss = next_token_loss(logits, tokens)
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        fail("the loss should be a tensor computed from the logits (it must carry a gradient)")
    loss.backward()
    grad = expect_tensor("the gradient of the logits", logits.grad, shape=(2, 4, 5))
    expect_close(
        "the gradient at the last position", grad[:, -1], torch.zeros(2, 5), atol=0, rtol=0
    )
    if not grad[:, 0].abs().sum() > 0:
        fail("the logits at the first position should get a gradient: they predict token 1")


@test("q2", points=2)
def perplexity_is_the_exponential_of_the_loss(perplexity):
    """equals exp(F.cross_entropy) of the shifted logits and targets"""
    for b, t, v, seed in ((2, 6, 5, 7), (3, 10, 20, 8)):
        logits, tokens = _batch(b, t, v, seed)
        expected = math.exp(_reference(logits, tokens).item())
        got = perplexity(logits, tokens)
        expect_number("the perplexity", got, expected, tol=1e-4 * expected, context=f"V={v}")


@test("q2", points=1)
def a_uniform_model_has_perplexity_v(perplexity):
    """equal logits give perplexity V (the size of the vocabulary)"""
    tokens = torch.randint(0, 13, (2, 8), generator=torch.Generator().manual_seed(9))
    expect_number("the perplexity", perplexity(torch.zeros(2, 8, 13), tokens), 13.0, tol=1e-4)


@test("q2", points=1)
def a_certain_and_right_model_has_perplexity_one(perplexity):
    """a model sure of every right next token has perplexity 1"""
    tokens = torch.randint(0, 6, (2, 7), generator=torch.Generator().manual_seed(10))
    logits = torch.zeros(2, 7, 6)
    logits[:, :-1].scatter_(-1, tokens[:, 1:, None], 50.0)
    expect_number("the perplexity", perplexity(logits, tokens), 1.0, tol=1e-6)
