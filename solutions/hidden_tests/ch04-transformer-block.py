"""Hidden tests for ``ch04-transformer-block`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch
from torch import nn

from course_lib.grading import test
from course_lib.grading.expect import expect_close


@test("q2", points=1)
def pre_norm_with_identity_sublayers(pre_norm_block):
    """With both sub-layers returning zeros, a pre-norm block is the identity."""
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(341))

    def zero(z):
        return torch.zeros_like(z)

    got = pre_norm_block(x, zero, zero, nn.LayerNorm(4), nn.LayerNorm(4))
    expect_close("hidden check: output", got, x)


@test("q3", points=1)
def post_norm_with_zero_sublayers(post_norm_block):
    """With both sub-layers returning zeros, a post-norm block is LN2(LN1(x))."""
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(342))

    def zero(z):
        return torch.zeros_like(z)

    ln1, ln2 = nn.LayerNorm(4), nn.LayerNorm(4)
    with torch.no_grad():
        ln1.bias.fill_(0.5)
        got = post_norm_block(x, zero, zero, ln1, ln2)
        expected = ln2(ln1(x))
    expect_close("hidden check: output", got, expected)
