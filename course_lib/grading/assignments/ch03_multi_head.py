"""Visible tests of exercise ``ch03-multi-head``: multi-head attention from single-head attention.

``split_heads`` is checked by construction (each head's slice of the features);
``multi_head_attention`` against ``torch.nn.MultiheadAttention`` (batch_first)
with its weights passed in. Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.expect import expect_close, expect_tensor
from course_lib.grading.registry import test

ASSIGNMENT = "ch03-multi-head"
TITLE = "Multi-head attention from single-head attention"


@test("q1", points=1)
def split_heads_has_the_right_shape(split_heads):
    """(batch, n, D) becomes (batch, h, n, D / h)"""
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(1))
    expect_tensor("split", split_heads(x, 3), shape=(2, 3, 5, 4))


@test("q1", points=2)
def head_r_holds_features_r_times_d_to_r_plus_1_times_d(split_heads):
    """head r holds features r*d .. (r+1)*d - 1 of every position"""
    x = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(2))
    got = expect_tensor("split", split_heads(x, 4), shape=(3, 4, 4, 2))
    for r in range(4):
        expect_close(f"head {r}", got[:, r], x[..., 2 * r : 2 * r + 2], atol=0, rtol=0)


def _mha(embed: int, heads: int, seed: int) -> nn.MultiheadAttention:
    g = torch.Generator().manual_seed(seed)
    mha = nn.MultiheadAttention(embed, heads, batch_first=True)
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.4)
    return mha.eval()


def _run(multi_head_attention, mha: nn.MultiheadAttention, x: torch.Tensor):
    with torch.no_grad():
        return multi_head_attention(
            x,
            mha.in_proj_weight,
            mha.in_proj_bias,
            mha.out_proj.weight,
            mha.out_proj.bias,
            mha.num_heads,
        )


@test("q2", points=1)
def output_has_the_input_shape(multi_head_attention):
    """returns (batch, n, D)"""
    mha = _mha(8, 2, seed=10)
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(11))
    expect_tensor("output", _run(multi_head_attention, mha, x), shape=(2, 3, 8))


@test("q2", points=3)
def matches_torch_multihead_attention(multi_head_attention):
    """matches torch.nn.MultiheadAttention (self-attention) with the same weights"""
    for embed, heads in ((8, 2), (12, 4), (6, 1)):
        mha = _mha(embed, heads, seed=12 + heads)
        x = torch.randn(2, 5, embed, generator=torch.Generator().manual_seed(20 + heads))
        with torch.no_grad():
            expected, _ = mha(x, x, x, need_weights=False)
        got = _run(multi_head_attention, mha, x)
        expect_close("output", got, expected, context=f"D = {embed}, h = {heads}")
