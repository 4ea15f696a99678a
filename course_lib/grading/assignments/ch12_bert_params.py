"""Visible tests of exercise ``ch12-bert-params``: a BERT's size from its configuration.

The counts are compared with the parameters of the library's modules
(``course_lib.bert.BertEncoder`` and ``MaskedLM``) built from small
configurations, and with ``course_lib.bert.encoder_parameters`` for BERT-base,
XLM-R large and GPT-1 (too large to build in a test).
"""

from __future__ import annotations

from torch import nn

from course_lib.bert import BERT_BASE, GPT1, XLMR_LARGE, BertConfig, BertEncoder, MaskedLM
from course_lib.bert import encoder_parameters as library_count
from course_lib.grading.expect import expect_number
from course_lib.grading.registry import test

ASSIGNMENT = "ch12-bert-params"
TITLE = "BERT's size from its configuration"

SMALL = (
    BertConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    ),
    BertConfig(
        vocab_size=257,
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=40,
        max_position_embeddings=20,
        type_vocab_size=3,
    ),
    BertConfig(
        vocab_size=50,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=8,
        max_position_embeddings=10,
        type_vocab_size=1,
    ),
)


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _describe(cfg: BertConfig) -> str:
    return (
        f"V={cfg.vocab_size}, d={cfg.hidden_size}, L={cfg.num_hidden_layers}, "
        f"d_ff={cfg.intermediate_size}, P={cfg.max_position_embeddings}, "
        f"S={cfg.type_vocab_size}"
    )


@test("q1", points=2)
def counts_the_library_encoder(bert_parameters):
    """counts the parameters of course_lib.bert.BertEncoder for three small configurations"""
    for cfg in SMALL:
        expected = _count(BertEncoder(cfg))
        expect_number(
            "the count", bert_parameters(cfg), expected, integer=True, context=_describe(cfg)
        )


@test("q1", points=1)
def counts_bert_base_and_xlmr_large(bert_parameters):
    """gives BERT-base (about 110M) and XLM-R large (about 560M) exactly"""
    for name, cfg in (("BERT-base", BERT_BASE), ("XLM-R large", XLMR_LARGE)):
        expect_number(
            "the count", bert_parameters(cfg), library_count(cfg), integer=True, context=name
        )


@test("q1", points=1)
def counts_gpt1_without_pooler_and_embedding_norm(bert_parameters):
    """gives GPT-1 (about 117M) with pooler=False, embedding_norm=False"""
    expected = library_count(GPT1, pooler=False, embedding_norm=False)
    got = bert_parameters(GPT1, pooler=False, embedding_norm=False)
    expect_number("the count", got, expected, integer=True, context="GPT-1, no segments")


@test("q2", points=2)
def counts_the_library_masked_lm(mlm_parameters):
    """counts the parameters of course_lib.bert.MaskedLM (tied read-out) for small configurations"""
    for cfg in SMALL:
        expected = _count(MaskedLM(cfg))
        expect_number(
            "the count", mlm_parameters(cfg), expected, integer=True, context=_describe(cfg)
        )
