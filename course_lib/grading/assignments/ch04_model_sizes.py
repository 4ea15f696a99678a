"""Visible tests of exercise ``ch04-model-sizes``: counting a Transformer's parameters.

The counts are compared with ``torch.nn.TransformerEncoderLayer`` /
``TransformerDecoderLayer`` and with the library's decoder-only model
(``course_lib.transformer.DecoderOnly``), instantiated with the same sizes.
"""

from __future__ import annotations

from torch import nn

from course_lib.config import TransformerConfig
from course_lib.grading.expect import expect_number
from course_lib.grading.registry import test
from course_lib.transformer import DecoderOnly

ASSIGNMENT = "ch04-model-sizes"
TITLE = "How many parameters? Encoder, decoder and decoder-only models"


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@test("q1", points=2)
def encoder_block_matches_torch(encoder_block_parameters):
    """counts the parameters of torch.nn.TransformerEncoderLayer(d_model, nhead, d_ff)"""
    for d, heads, d_ff in ((8, 2, 32), (64, 4, 256), (12, 3, 20)):
        expected = _count(nn.TransformerEncoderLayer(d, heads, d_ff))
        expect_number(
            "the count",
            encoder_block_parameters(d, d_ff),
            expected,
            integer=True,
            context=f"d_model={d}, d_ff={d_ff}",
        )


@test("q2", points=2)
def decoder_block_matches_torch(decoder_block_parameters):
    """counts the parameters of torch.nn.TransformerDecoderLayer(d_model, nhead, d_ff)"""
    for d, heads, d_ff in ((8, 2, 32), (64, 4, 256), (12, 3, 20)):
        expected = _count(nn.TransformerDecoderLayer(d, heads, d_ff))
        expect_number(
            "the count",
            decoder_block_parameters(d, d_ff),
            expected,
            integer=True,
            context=f"d_model={d}, d_ff={d_ff}",
        )


@test("q3", points=2)
def decoder_only_model_matches_the_library(decoder_only_parameters):
    """counts the parameters of course_lib.transformer.DecoderOnly"""
    for vocab, max_len, d, d_ff, layers in ((10, 8, 8, 16, 1), (50, 32, 16, 64, 3)):
        config = TransformerConfig(
            d_model=d, num_heads=2, num_layers=layers, d_ff=d_ff, max_len=max_len
        )
        model = DecoderOnly(config, vocab)
        expect_number(
            "the count",
            decoder_only_parameters(vocab, max_len, d, d_ff, layers),
            _count(model),
            integer=True,
            context=f"vocab={vocab}, max_len={max_len}, d_model={d}, d_ff={d_ff}, layers={layers}",
        )
