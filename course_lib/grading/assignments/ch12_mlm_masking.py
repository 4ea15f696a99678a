"""Visible tests of exercise ``ch12-mlm-masking``: BERT's masking procedure and the MLM loss.

The masking is random, so it is checked by what must always hold (special
tokens never selected, labels -100 where nothing was selected) and by its
proportions over a million tokens with fixed seeds: 15% selected, and of those
80% [MASK], 10% a random token, 10% unchanged, the same targets as
``course_lib.bert.mask_tokens``. The loss is compared with
``torch.nn.functional.cross_entropy(..., ignore_index=-100)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.grading.expect import expect_close, expect_number, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch12-mlm-masking"
TITLE = "BERT's masking, measured"

V, MASK, SPECIAL = 1000, 3, (0, 1, 2, 3)


def _ids(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Token ids in [4, V), with one position in ten a special token (0, 1 or 2)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, V, shape, generator=g)
    special = torch.rand(shape, generator=g) < 0.1
    return torch.where(special, torch.randint(0, 3, shape, generator=g), ids)


def _mask(mask_tokens, ids, seed, prob=0.15, vocab_size=V, mask_id=MASK, special_ids=SPECIAL):
    out = mask_tokens(
        ids,
        vocab_size=vocab_size,
        mask_id=mask_id,
        special_ids=special_ids,
        generator=torch.Generator().manual_seed(seed),
        prob=prob,
    )
    if not isinstance(out, tuple) or len(out) != 2:
        fail(f"mask_tokens should return a tuple (inputs, labels), got {type(out).__name__}")
    inputs = expect_tensor("inputs", out[0], shape=tuple(ids.shape))
    labels = expect_tensor("labels", out[1], shape=tuple(ids.shape))
    for name, t in (("inputs", inputs), ("labels", labels)):
        if t.dtype != torch.long:
            fail(f"{name}: expected dtype torch.int64 (token ids), got {t.dtype}")
    return inputs, labels


def _share(name: str, got: float, expected: float, tol: float, context: str) -> None:
    expect_number(name, got, expected, tol=tol, context=context)


@test("q1", points=2)
def inputs_and_labels_are_consistent(mask_tokens):
    """labels are the original id or -100; unselected and special tokens stay unchanged"""
    ids = _ids((20, 50), seed=1)
    inputs, labels = _mask(mask_tokens, ids, seed=2)
    selected = labels != -100
    if (labels[selected] != ids[selected]).any():
        fail("labels: at a selected position the label should be the original token id")
    if (inputs[~selected] != ids[~selected]).any():
        fail("inputs: a position that was not selected (label -100) should keep its token")
    special = ids < 3
    if selected[special].any():
        fail(f"{int(selected[special].sum())} special tokens were selected; they never should be")
    if inputs.min() < 0 or inputs.max() >= V:
        fail(f"inputs: every id should be in [0, vocab_size={V})")


@test("q1", points=3)
def the_proportions_are_15_80_10_10(mask_tokens):
    """over 10^6 tokens: 15% selected (+-0.002); of those 80% [MASK], 10% random, 10% kept (+-0.005)"""
    ids = _ids((1000, 1000), seed=3)
    inputs, labels = _mask(mask_tokens, ids, seed=4)
    normal = ids >= 4
    selected = labels != -100
    n = int(selected.sum())
    _share("selected share", n / int(normal.sum()), 0.15, 0.002, "of the non-special tokens")
    if n == 0:
        fail("no token was selected")
    masked = float((inputs[selected] == MASK).sum()) / n
    kept = float((inputs[selected] == ids[selected]).sum()) / n
    swapped = 1 - masked - kept
    # A random replacement is the mask id with chance 1/V, the original token with chance 1/V.
    context = "as a share of the selected tokens"
    _share("share replaced by [MASK]", masked, 0.8 + 0.1 / V, 0.005, context)
    _share("share replaced by another token", swapped, 0.1 * (1 - 2 / V), 0.005, context)
    _share("share left unchanged", kept, 0.1 + 0.1 / V, 0.005, context)


@test("q1", points=1)
def random_replacements_are_uniform_over_the_vocabulary(mask_tokens):
    """a random replacement is drawn uniformly from all vocab_size ids (each 1% of selected, V=10)"""
    ids = torch.zeros(1000, 1000, dtype=torch.long)
    inputs, labels = _mask(mask_tokens, ids, seed=5, vocab_size=10, mask_id=9, special_ids=())
    selected = labels != -100
    n = int(selected.sum())
    if n == 0:
        fail("no token was selected")
    if inputs.min() < 0 or inputs.max() >= 10:
        fail("inputs: every id should be in [0, vocab_size=10)")
    shares = torch.bincount(inputs[selected], minlength=10).double() / n
    expect_close(
        "share of each replacement id 1..8",
        shares[1:9],
        torch.full((8,), 0.01, dtype=torch.float64),
        atol=0.002,
        rtol=0,
        context="every token is 0, vocab_size=10, mask_id=9: each other id gets 10% / 10",
    )


@test("q1", points=1)
def prob_and_the_generator_are_used(mask_tokens):
    """prob=0.4 selects 40% (+-0.005), prob=0 none; the same seed gives the same result"""
    ids = _ids((400, 500), seed=6)
    _, labels = _mask(mask_tokens, ids, seed=7, prob=0.4)
    share = float((labels != -100).sum()) / float((ids >= 4).sum())
    _share("selected share", share, 0.4, 0.005, "prob=0.4")
    inputs, labels = _mask(mask_tokens, ids, seed=8, prob=0.0)
    if (labels != -100).any() or (inputs != ids).any():
        fail("with prob=0 nothing should be selected or changed")
    torch.manual_seed(123)
    first = _mask(mask_tokens, ids, seed=9)
    torch.manual_seed(456)
    second = _mask(mask_tokens, ids, seed=9)
    if not (torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])):
        fail("two calls with generators seeded alike should give the same (inputs, labels)")


def _mlm_batch(b: int, t: int, v: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g) * 2
    labels = torch.randint(0, v, (b, t), generator=g)
    labels[torch.rand(b, t, generator=g) > 0.3] = -100
    labels[0, 0] = 1  # at least one selected position
    return logits, labels


@test("q2", points=2)
def the_loss_matches_torch(mlm_loss):
    """equals F.cross_entropy(logits, labels, ignore_index=-100) (mean over selected positions)"""
    for b, t, v, seed in ((2, 8, 11, 10), (4, 16, 50, 11)):
        logits, labels = _mlm_batch(b, t, v, seed)
        expected = F.cross_entropy(logits.reshape(-1, v), labels.reshape(-1), ignore_index=-100)
        got = mlm_loss(logits, labels)
        expect_close("the loss", got, expected, atol=1e-5, context=f"B={b}, T={t}, V={v}")


@test("q2", points=1)
def unselected_positions_do_not_count(mlm_loss):
    """changing the logits where the label is -100 does not change the loss"""
    logits, labels = _mlm_batch(3, 10, 9, seed=12)
    before = expect_tensor("the loss", mlm_loss(logits, labels), shape=())
    changed = torch.where((labels == -100)[..., None], logits * 5 + 3, logits)
    expect_close("the loss", mlm_loss(changed, labels), before, atol=1e-6, context="logits changed")
