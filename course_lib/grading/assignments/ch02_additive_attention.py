"""Visible tests of exercise ``ch02-additive-attention``: Bahdanau's attention step (chapter 2).

The scores are compared with Luong's *concat* form built from ``torch.nn``
modules (chapter 2 shows the two are the same function), and the context with
``torch.nn.functional.scaled_dot_product_attention``. Inputs use fixed seeds,
on the CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch02-additive-attention"
TITLE = "Bahdanau's additive attention, one decoder step"


def _score_inputs(batch: int, src_len: int, d_q: int, d_k: int, a: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "query": torch.randn(batch, d_q, generator=g),
        "keys": torch.randn(batch, src_len, d_k, generator=g),
        "W": torch.randn(a, d_q, generator=g) * 0.5,
        "U": torch.randn(a, d_k, generator=g) * 0.5,
        "v": torch.randn(a, generator=g),
    }


def _concat_reference(p: dict) -> torch.Tensor:
    """v^T tanh(W_cat [s; h_j]) with W_cat = [W | U], built from nn.Linear layers."""
    a, d_q = p["W"].shape
    d_k = p["U"].shape[1]
    layer = nn.Linear(d_q + d_k, a, bias=False)
    out = nn.Linear(a, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.cat([p["W"], p["U"]], dim=1))
        out.weight.copy_(p["v"][None])
        s_len = p["keys"].shape[1]
        pairs = torch.cat([p["query"][:, None].expand(-1, s_len, -1), p["keys"]], dim=-1)
        return out(torch.tanh(layer(pairs)))[..., 0]


@test("q1", points=1)
def returns_one_score_per_source_position(additive_scores):
    """returns scores of shape (batch, S)"""
    p = _score_inputs(3, 5, 4, 6, 7, seed=1)
    expect_tensor("scores", additive_scores(**p), shape=(3, 5))


@test("q1", points=3)
def matches_the_concat_form(additive_scores):
    """equals v^T tanh(W s + U h_j) (checked against Luong's concat form with W_cat = [W | U])"""
    p = _score_inputs(4, 6, 5, 3, 8, seed=2)
    with torch.no_grad():
        got = additive_scores(**p)
    expect_close("scores", got, _concat_reference(p), context="batch 4, S 6, d_q 5, d_k 3, A 8")


@test("q1", points=1)
def works_for_other_sizes(additive_scores):
    """works for a batch of 1 and a single source position (no size is hard-coded)"""
    for batch, s_len in ((1, 4), (2, 1)):
        p = _score_inputs(batch, s_len, 2, 3, 4, seed=10 + batch)
        with torch.no_grad():
            got = additive_scores(**p)
        expect_close("scores", got, _concat_reference(p), context=f"batch {batch}, S {s_len}")


def _context_inputs(batch: int, src_len: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, 1, d, generator=g)
    k = torch.randn(batch, src_len, d, generator=g)
    v = torch.randn(batch, src_len, d + 1, generator=g)
    scores = (q @ k.transpose(1, 2))[:, 0]  # (batch, S)
    return q, k, v, scores


def _call_context(attention_context, scores, values):
    out = attention_context(scores, values)
    if not isinstance(out, tuple) or len(out) != 2:
        fail(f"attention_context should return (context, weights), got {type(out).__name__}")
    return out


@test("q2", points=1)
def returns_context_and_weights(attention_context):
    """returns (context of shape (batch, d_v), weights of shape (batch, S))"""
    _, _, v, scores = _context_inputs(2, 5, 3, seed=20)
    context, weights = _call_context(attention_context, scores, v)
    expect_tensor("context", context, shape=(2, 4))
    expect_tensor("weights", weights, shape=(2, 5))


@test("q2", points=2)
def weights_are_a_softmax(attention_context):
    """weights are positive and sum to 1 over the source positions"""
    _, _, v, scores = _context_inputs(3, 6, 2, seed=21)
    _, weights = _call_context(attention_context, scores * 5, v)
    weights = expect_tensor("weights", weights, shape=(3, 6))
    if (weights < 0).any():
        fail("weights: some are negative")
    expect_close("the sum of each row of weights", weights.sum(-1), torch.ones(3))


@test("q2", points=2)
def context_matches_torch_attention(attention_context):
    """the context equals torch's scaled_dot_product_attention (scale 1) on the same scores"""
    q, k, v, scores = _context_inputs(4, 7, 3, seed=22)
    expected = F.scaled_dot_product_attention(q, k, v, scale=1.0)[:, 0]
    with torch.no_grad():
        context, _ = _call_context(attention_context, scores, v)
    expect_close("context", context, expected, context="batch 4, S 7")
