"""Hidden tests for ``ch12-mlm-masking`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch
import torch.nn.functional as F

from course_lib.grading import test
from course_lib.grading.expect import expect_close, expect_equal, fail


@test("q1", points=1)
def one_dimensional_ids_and_prob_one(mask_tokens):
    """With prob=1 every non-special token of a 1-D sequence is selected, no special one."""
    ids = torch.tensor([0, 7, 8, 9, 1, 10, 11, 2])
    _, labels = mask_tokens(
        ids,
        vocab_size=20,
        mask_id=3,
        special_ids=(0, 1, 2, 3),
        generator=torch.Generator().manual_seed(43),
        prob=1.0,
    )
    expected = torch.where(ids < 4, torch.full_like(ids, -100), ids)
    if not isinstance(labels, torch.Tensor):
        fail("hidden check: labels should be a tensor")
    expect_equal("hidden check: labels", labels, expected)


@test("q2", points=1)
def a_single_selected_position(mlm_loss):
    """One selected position: the loss is that position's cross-entropy."""
    logits = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(44))
    labels = torch.full((2, 5), -100)
    labels[1, 3] = 6
    expected = F.cross_entropy(logits[1, 3:4], labels[1, 3:4])
    expect_close("hidden check: the loss", mlm_loss(logits, labels), expected, atol=1e-6)
