"""Hidden tests for ``ch04-model-sizes`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

from course_lib.grading import test
from course_lib.grading.expect import expect_number


@test("q1", points=1)
def bert_base_block(encoder_block_parameters):
    """A BERT-base block (d = 768, d_ff = 3072) has 7,087,872 parameters."""
    expect_number(
        "hidden check: the count", encoder_block_parameters(768, 3072), 7_087_872, integer=True
    )


@test("q2", points=1)
def cross_attention_is_the_difference(decoder_block_parameters):
    """A decoder block has 4 d^2 + 6 d more parameters than an encoder block (d = 100)."""
    expected = 4 * 100**2 + 2 * 100 * 400 + 9 * 100 + 400 + 4 * 100**2 + 6 * 100
    expect_number(
        "hidden check: the count", decoder_block_parameters(100, 400), expected, integer=True
    )
