"""Visible tests of exercise ``ch03-masked-attention``: masks and scaled dot-product attention.

Everything is compared with ``torch.nn.functional.scaled_dot_product_attention``,
whose boolean masks use the course's convention (True = may attend) and which
returns zero for a query that may attend to nothing. With the identity as the
values it returns the weights themselves. Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.grading.expect import expect_close, expect_tensor
from course_lib.grading.registry import test

ASSIGNMENT = "ch03-masked-attention"
TITLE = "Masks and scaled dot-product attention"


def _scores_and_mask(shape: tuple[int, ...], seed: int, keep: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape[:-1], 4, generator=g)
    k = torch.randn(*shape[:-2], shape[-1], 4, generator=g)
    mask = torch.rand(shape, generator=g) < keep
    return q, k, mask


def _weights_reference(q, k, mask):
    s = k.shape[-2]
    eye = torch.eye(s).expand(*k.shape[:-2], s, s)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, scale=1.0)


@test("q1", points=1)
def without_a_mask_it_is_the_softmax(masked_softmax):
    """with an all-True mask it is torch.softmax over the last axis"""
    q, k, _ = _scores_and_mask((2, 3, 5), seed=1)
    scores = q @ k.transpose(-2, -1)
    with torch.no_grad():
        got = masked_softmax(scores, torch.ones(2, 3, 5, dtype=torch.bool))
    expect_close("weights", got, torch.softmax(scores, -1))


@test("q1", points=2)
def masked_keys_get_zero_weight(masked_softmax):
    """matches torch's masked attention weights (False = masked out)"""
    q, k, mask = _scores_and_mask((2, 4, 6), seed=2)
    mask[..., 0] = True  # every row keeps at least one key here
    with torch.no_grad():
        got = masked_softmax(q @ k.transpose(-2, -1), mask)
    expect_close("weights", got, _weights_reference(q, k, mask), context="random boolean mask")


@test("q1", points=2)
def a_fully_masked_row_gives_zeros_not_nan(masked_softmax):
    """a row whose every key is masked gets all-zero weights (no NaN)"""
    q, k, mask = _scores_and_mask((1, 3, 4), seed=3)
    mask[..., 0] = True
    mask[0, 1] = False  # query 1 may attend to nothing
    with torch.no_grad():
        got = masked_softmax(q @ k.transpose(-2, -1), mask)
    got = expect_tensor("weights", got, shape=(1, 3, 4))
    expect_close("weights", got, _weights_reference(q, k, mask), context="row 1 fully masked")


@test("q1", points=1)
def the_mask_broadcasts(masked_softmax):
    """a mask of shape (T, S) applies to every batch element"""
    q, k, _ = _scores_and_mask((3, 4, 4), seed=4)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    with torch.no_grad():
        got = masked_softmax(q @ k.transpose(-2, -1), causal)
    expect_close("weights", got, _weights_reference(q, k, causal), context="causal (T, S) mask")


def _qkv(shape, s: int, d: int, dv: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*shape, d, generator=g),
        torch.randn(*shape[:-1], s, d, generator=g),
        torch.randn(*shape[:-1], s, dv, generator=g),
    )


@test("q2", points=2)
def matches_torch_without_a_mask(scaled_dot_product_attention):
    """matches torch's scaled_dot_product_attention (scale 1/sqrt(d_k)), batch and heads"""
    q, k, v = _qkv((2, 3, 5), s=6, d=8, dv=4, seed=10)
    with torch.no_grad():
        got = scaled_dot_product_attention(q, k, v)
    expect_close(
        "output", got, F.scaled_dot_product_attention(q, k, v), context="shape (2, 3, 5, 8)"
    )


@test("q2", points=2)
def matches_torch_with_a_mask(scaled_dot_product_attention):
    """matches torch with a boolean mask, including a fully masked query"""
    q, k, v = _qkv((2, 4), s=5, d=4, dv=3, seed=11)
    g = torch.Generator().manual_seed(12)
    mask = torch.rand(2, 4, 5, generator=g) < 0.6
    mask[1, 2] = False
    with torch.no_grad():
        got = scaled_dot_product_attention(q, k, v, mask)
    expect_close("output", got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@test("q2", points=1)
def causal_flag(scaled_dot_product_attention):
    """causal=True matches torch's is_causal=True"""
    q, k, v = _qkv((1, 6), s=6, d=4, dv=4, seed=13)
    with torch.no_grad():
        got = scaled_dot_product_attention(q, k, v, causal=True)
    expect_close("output", got, F.scaled_dot_product_attention(q, k, v, is_causal=True))
