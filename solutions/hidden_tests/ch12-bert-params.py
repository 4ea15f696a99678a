"""Hidden tests for ``ch12-bert-params`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

from course_lib.bert import BertConfig, BertEncoder
from course_lib.grading import test
from course_lib.grading.expect import expect_number


@test("q1", points=1)
def an_encoder_without_blocks(bert_parameters):
    """With no blocks only the embeddings, their norm and the pooler remain."""
    cfg = BertConfig(
        vocab_size=30,
        hidden_size=6,
        num_hidden_layers=0,
        num_attention_heads=2,
        intermediate_size=12,
        max_position_embeddings=9,
    )
    expected = sum(p.numel() for p in BertEncoder(cfg).parameters())
    expect_number("hidden check: the count", bert_parameters(cfg), expected, integer=True)
