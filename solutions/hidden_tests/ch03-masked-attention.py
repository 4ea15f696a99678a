"""Hidden tests for ``ch03-masked-attention`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch
import torch.nn.functional as F

from course_lib.grading import test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def padding_mask_over_heads(masked_softmax):
    """A (batch, 1, 1, S) padding mask broadcasts over heads and queries."""
    g = torch.Generator().manual_seed(321)
    scores = torch.randn(2, 3, 4, 5, generator=g)
    pad = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, None]
    expected = torch.softmax(scores.masked_fill(~pad, float("-inf")), -1)
    expect_close("hidden check: weights", masked_softmax(scores, pad), expected)


@test("q2", points=1)
def float64_and_a_mask_with_causal(scaled_dot_product_attention):
    """float64 inputs, a padding mask combined with causal=True."""
    g = torch.Generator().manual_seed(322)
    q, k, v = (torch.randn(2, 4, 3, dtype=torch.float64, generator=g) for _ in range(3))
    pad = torch.tensor([[True] * 4, [True, True, True, False]])[:, None, :]
    both = pad & torch.ones(4, 4, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=both)
    got = scaled_dot_product_attention(q, k, v, pad, causal=True)
    expect_close("hidden check: output", got, expected, atol=1e-10)
