"""Visible tests of exercise ``ch04-transformer-block``: the feed-forward block, pre-norm and post-norm.

Each function is checked against ``torch.nn.TransformerEncoderLayer``
(``norm_first=True`` for pre-norm, ``False`` for post-norm, dropout 0, eval mode)
with the layer's own sub-modules passed in. Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.expect import expect_close, expect_tensor
from course_lib.grading.registry import test

ASSIGNMENT = "ch04-transformer-block"
TITLE = "A Transformer block: feed-forward, pre-norm and post-norm"


def _layer(
    d: int, heads: int, d_ff: int, norm_first: bool, seed: int
) -> nn.TransformerEncoderLayer:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        d, heads, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    with torch.no_grad():  # layer norms that are not the identity, so a misplaced one shows
        for norm in (layer.norm1, layer.norm2):
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.3)
    return layer


def _parts(layer: nn.TransformerEncoderLayer):
    def self_attention(z):
        return layer.self_attn(z, z, z, need_weights=False)[0]

    def ffn(z):
        return layer.linear2(torch.relu(layer.linear1(z)))

    return self_attention, ffn, layer.norm1, layer.norm2


def _x(shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@test("q1", points=1)
def feed_forward_keeps_the_shape(feed_forward):
    """returns a tensor of the input's shape (..., d)"""
    layer = _layer(6, 2, 10, False, seed=1)
    u = _x((2, 3, 6), seed=2)
    with torch.no_grad():
        got = feed_forward(
            u, layer.linear1.weight, layer.linear1.bias, layer.linear2.weight, layer.linear2.bias
        )
    expect_tensor("FFN(u)", got, shape=(2, 3, 6))


@test("q1", points=2)
def feed_forward_matches_the_layer(feed_forward):
    """matches linear2(relu(linear1(u))) of a torch.nn.TransformerEncoderLayer"""
    layer = _layer(8, 2, 16, False, seed=3)
    u = _x((3, 5, 8), seed=4)
    with torch.no_grad():
        expected = layer.linear2(torch.relu(layer.linear1(u)))
        got = feed_forward(
            u, layer.linear1.weight, layer.linear1.bias, layer.linear2.weight, layer.linear2.bias
        )
    expect_close("FFN(u)", got, expected)


@test("q2", points=3)
def pre_norm_matches_torch(pre_norm_block):
    """matches torch.nn.TransformerEncoderLayer(norm_first=True)"""
    layer = _layer(8, 2, 16, True, seed=10)
    x = _x((2, 5, 8), seed=11)
    with torch.no_grad():
        got = pre_norm_block(x, *_parts(layer))
        expected = layer(x)
    expect_close("block output", got, expected, context="pre-norm, compared with torch")


@test("q2", points=1)
def pre_norm_keeps_the_shape(pre_norm_block):
    """returns (batch, n, d)"""
    layer = _layer(4, 1, 8, True, seed=12)
    with torch.no_grad():
        got = pre_norm_block(_x((1, 3, 4), seed=13), *_parts(layer))
    expect_tensor("block output", got, shape=(1, 3, 4))


@test("q3", points=3)
def post_norm_matches_torch(post_norm_block):
    """matches torch.nn.TransformerEncoderLayer(norm_first=False), the 2017 block"""
    layer = _layer(8, 2, 16, False, seed=20)
    x = _x((2, 5, 8), seed=21)
    with torch.no_grad():
        got = post_norm_block(x, *_parts(layer))
        expected = layer(x)
    expect_close("block output", got, expected, context="post-norm, compared with torch")


@test("q3", points=1)
def post_norm_output_is_normalised(post_norm_block):
    """with plain layer norms, every output position has mean 0 and variance 1"""
    layer = _layer(8, 2, 16, False, seed=22)
    self_attention, ffn, _, _ = _parts(layer)
    plain1, plain2 = nn.LayerNorm(8), nn.LayerNorm(8)
    with torch.no_grad():
        got = post_norm_block(_x((2, 4, 8), seed=23), self_attention, ffn, plain1, plain2)
    got = expect_tensor("block output", got, shape=(2, 4, 8))
    expect_close("mean over features", got.mean(-1), torch.zeros(2, 4), atol=1e-5)
    expect_close("variance over features", got.var(-1, unbiased=False), torch.ones(2, 4), atol=1e-3)
