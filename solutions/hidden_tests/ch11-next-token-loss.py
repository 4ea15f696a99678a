"""Hidden tests for ``ch11-next-token-loss`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import math

import torch
import torch.nn.functional as F

from course_lib.grading import test
from course_lib.grading.expect import expect_close, expect_number


@test("q1", points=1)
def two_token_windows_in_float64(next_token_loss):
    """A window of two tokens has one target per sequence; float64 logits work."""
    g = torch.Generator().manual_seed(40)
    logits = torch.randn(5, 2, 9, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, 9, (5, 2), generator=g)
    expected = F.cross_entropy(logits[:, 0], tokens[:, 1])
    expect_close("hidden check: the loss", next_token_loss(logits, tokens), expected, atol=1e-9)


@test("q2", points=1)
def confident_and_wrong_is_large_but_finite(perplexity):
    """Logits 10 apart on the wrong tokens give exp(loss), about e^10, not inf."""
    tokens = torch.zeros(2, 6, dtype=torch.long)
    logits = torch.zeros(2, 6, 4)
    logits[..., 1] = 10.0
    expected = math.exp(math.log(math.exp(10) + 3))
    expect_number("hidden check: the perplexity", perplexity(logits, tokens), expected, tol=1.0)
