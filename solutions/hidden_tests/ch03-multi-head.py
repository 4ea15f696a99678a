"""Hidden tests for ``ch03-multi-head`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch
from torch import nn

from course_lib.grading import test
from course_lib.grading.expect import expect_close


@test("q2", points=1)
def one_position_and_many_heads(multi_head_attention):
    """A single position (n = 1) with 8 heads: each head attends to itself only."""
    torch.manual_seed(331)
    mha = nn.MultiheadAttention(16, 8, batch_first=True).eval()
    x = torch.randn(3, 1, 16)
    with torch.no_grad():
        expected, _ = mha(x, x, x, need_weights=False)
        got = multi_head_attention(
            x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias, 8
        )
    expect_close("hidden check: output", got, expected)
