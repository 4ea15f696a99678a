"""Hidden tests for ``ch11-sampling`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch

from course_lib.grading import test
from course_lib.grading.expect import expect_close, expect_equal


@test("q1", points=1)
def top_1_is_greedy_and_top_v_changes_nothing(sampling_probs):
    """top_k=1 is one-hot at the argmax for any temperature; top_k=V is the plain softmax."""
    logits = torch.randn(3, 7, generator=torch.Generator().manual_seed(41))
    onehot = torch.nn.functional.one_hot(logits.argmax(-1), 7).float()
    expect_close("hidden check: p", sampling_probs(logits, 3.0, 1), onehot, atol=1e-6)
    expected = torch.softmax(logits / 0.6, -1)
    expect_close("hidden check: p", sampling_probs(logits, 0.6, 7), expected, atol=1e-6)


@test("q2", points=1)
def one_row(sample_next):
    """A batch of one row gives one token, as torch.multinomial would."""
    logits = torch.randn(1, 20, generator=torch.Generator().manual_seed(42))
    expected = torch.multinomial(
        torch.softmax(logits, -1), 1, generator=torch.Generator().manual_seed(3)
    )[:, 0]
    got = sample_next(logits, torch.Generator().manual_seed(3))
    expect_equal("hidden check: the token", got, expected)
