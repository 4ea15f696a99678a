"""Visible tests of exercise ``ch11-sampling``: temperature and top-k sampling (11.3).

The probabilities are compared with ``torch.softmax`` of the scaled logits,
restricted to the ``k`` largest with ``torch.topk``; the draws with
``torch.multinomial`` on those probabilities under the same seed, and with the
probabilities themselves over many draws. Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch

from course_lib.grading.expect import expect_close, expect_equal, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch11-sampling"
TITLE = "Sampling with a temperature and top-k"


def _logits(b: int, v: int, seed: int) -> torch.Tensor:
    return torch.randn(b, v, generator=torch.Generator().manual_seed(seed)) * 2


def _reference(logits: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    z = logits / temperature
    if top_k is None:
        return torch.softmax(z, -1)
    values, index = z.topk(top_k, dim=-1)
    return torch.zeros_like(z).scatter(-1, index, torch.softmax(values, -1))


@test("q1", points=1)
def probabilities_have_the_right_shape_and_sum_to_one(sampling_probs):
    """returns (B, V) probabilities, each row summing to 1"""
    p = expect_tensor("p", sampling_probs(_logits(3, 8, 1), 0.7, 4), shape=(3, 8))
    expect_close("row sums", p.sum(-1), torch.ones(3), atol=1e-5)
    if (p < 0).any():
        fail("p: probabilities must not be negative")


@test("q1", points=2)
def temperature_scales_the_logits(sampling_probs):
    """without top-k, equals softmax(logits / temperature) for temperatures 0.5, 1 and 2"""
    logits = _logits(4, 10, 2)
    for tau in (0.5, 1.0, 2.0):
        expect_close(
            "p", sampling_probs(logits, tau), torch.softmax(logits / tau, -1), context=f"T={tau}"
        )


@test("q1", points=2)
def top_k_keeps_the_k_largest_logits(sampling_probs):
    """with top_k=k, only the k largest logits keep a probability, renormalised"""
    logits = _logits(5, 12, 3)
    for tau, k in ((1.0, 3), (0.8, 1), (1.5, 12), (2.0, 5)):
        got = sampling_probs(logits, tau, k)
        expect_close("p", got, _reference(logits, tau, k), context=f"T={tau}, top_k={k}")


@test("q1", points=1)
def temperature_zero_is_greedy(sampling_probs):
    """temperature 0 puts all the probability on the largest logit"""
    logits = _logits(4, 9, 4)
    expected = torch.nn.functional.one_hot(logits.argmax(-1), 9).float()
    expect_close("p", sampling_probs(logits, 0.0), expected, atol=0, rtol=0, context="T=0")


@test("q2", points=2)
def draws_like_torch_multinomial(sample_next):
    """equals torch.multinomial(p, 1, generator) with the same seed, as a (B,) tensor"""
    logits = _logits(100, 15, 5)
    for tau, k, seed in ((1.0, None, 0), (0.7, 4, 1), (1.3, 8, 2)):
        expected = torch.multinomial(
            _reference(logits, tau, k), 1, generator=torch.Generator().manual_seed(seed)
        )[:, 0]
        got = sample_next(logits, torch.Generator().manual_seed(seed), tau, k)
        expect_equal("the tokens", got, expected, context=f"T={tau}, top_k={k}, seed {seed}")


@test("q2", points=2)
def draws_follow_the_probabilities(sample_next):
    """over 40,000 draws, each token's share is its probability (within 0.01), none outside top-k"""
    logits = _logits(1, 10, 6).expand(40000, 10)
    p = _reference(logits[:1], 0.8, 6)[0]
    tokens = sample_next(logits, torch.Generator().manual_seed(7), 0.8, 6)
    tokens = expect_tensor("the tokens", tokens, shape=(40000,))
    if tokens.is_floating_point() or tokens.min() < 0 or tokens.max() >= 10:
        fail("the tokens should be integer ids in [0, V)")
    share = torch.bincount(tokens.long(), minlength=10).double() / 40000
    if (share[p == 0] > 0).any():
        fail("a token outside the top-k was drawn")
    expect_close("the share of each token", share, p, atol=0.01, rtol=0, context="T=0.8, top_k=6")


@test("q2", points=1)
def temperature_zero_takes_the_argmax(sample_next):
    """temperature 0 returns the argmax of each row"""
    logits = _logits(7, 11, 8)
    got = sample_next(logits, torch.Generator().manual_seed(0), 0.0)
    expect_equal("the tokens", got, logits.argmax(-1), context="T=0")
