"""Visible tests of exercise ``ch02-local-attention``: Luong's scores and a local window (chapter 2).

The scores are compared with ``torch.nn.Bilinear`` (a bilinear form is the
general score; with the identity it is the dot score), and the local weights
with ``torch.nn.functional.scaled_dot_product_attention`` given the window as
its boolean mask and the identity as values (which returns the weights).
Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch02-local-attention"
TITLE = "Luong's scores and local attention"


def _qk(batch: int, t: int, s: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, t, d, generator=g), torch.randn(batch, s, d, generator=g)


def _bilinear(query: torch.Tensor, keys: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """s_i^T W h_j for every pair, with torch.nn.Bilinear."""
    b, t, d_q = query.shape
    s, d_k = keys.shape[1], keys.shape[2]
    layer = nn.Bilinear(d_q, d_k, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(W[None])
        x1 = query[:, :, None].expand(b, t, s, d_q).reshape(-1, d_q)
        x2 = keys[:, None].expand(b, t, s, d_k).reshape(-1, d_k)
        return layer(x1, x2).reshape(b, t, s)


@test("q1", points=1)
def dot_scores_match_a_bilinear_form_with_the_identity(luong_scores):
    """the dot score equals s_i . h_j, shape (batch, T, S)"""
    q, k = _qk(2, 3, 5, 4, seed=1)
    with torch.no_grad():
        got = luong_scores(q, k, "dot")
    expect_close("dot scores", got, _bilinear(q, k, torch.eye(4)), context="batch 2, T 3, S 5")


@test("q1", points=2)
def general_scores_match_torch_bilinear(luong_scores):
    """the general score equals s_i^T W h_j (torch.nn.Bilinear), also when d_q != d_k"""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(3, 4, 5, generator=g)
    k = torch.randn(3, 6, 2, generator=g)
    W = torch.randn(5, 2, generator=g)
    with torch.no_grad():
        got = luong_scores(q, k, "general", W)
    expect_close("general scores", got, _bilinear(q, k, W), context="d_q 5, d_k 2")


@test("q1", points=1)
def general_with_the_identity_is_dot(luong_scores):
    """the general score with W = I gives the dot score"""
    q, k = _qk(1, 2, 3, 3, seed=3)
    with torch.no_grad():
        dot = luong_scores(q, k, "dot")
        general = luong_scores(q, k, "general", torch.eye(3))
    expect_close("general scores with W = I", general, expect_tensor("dot scores", dot))


def _window(t: int, s: int, centers: torch.Tensor, width: int) -> torch.Tensor:
    j = torch.arange(s)
    return (j[None, None, :] - centers[:, :, None]).abs() <= width  # (batch, T, S)


def _reference_weights(q, k, centers, width):
    s = k.shape[1]
    eye = torch.eye(s).expand(q.shape[0], s, s)
    return F.scaled_dot_product_attention(
        q, k, eye, attn_mask=_window(q.shape[1], s, centers, width), scale=1.0
    )


def _local_case(seed: int, batch=2, t=6, s=8, d=4):
    q, k = _qk(batch, t, s, d, seed)
    scores = q @ k.transpose(1, 2)
    g = torch.Generator().manual_seed(seed + 100)
    centers = torch.randint(0, s, (batch, t), generator=g)
    return q, k, scores, centers


@test("q2", points=1)
def local_weights_vanish_outside_the_window(local_weights):
    """weights are exactly 0 where |j - p_i| > D"""
    _, _, scores, centers = _local_case(seed=10)
    with torch.no_grad():
        got = expect_tensor("weights", local_weights(scores, centers, 1), shape=(2, 6, 8))
    outside = ~_window(6, 8, centers, 1)
    if (got[outside] != 0).any():
        fail(f"weights: {int((got[outside] != 0).sum())} nonzero weights outside the window")


@test("q2", points=3)
def local_weights_match_a_masked_softmax(local_weights):
    """equal the softmax of the scores restricted to the window (compared with torch)"""
    for width in (1, 2):
        q, k, scores, centers = _local_case(seed=11 + width)
        with torch.no_grad():
            got = local_weights(scores, centers, width)
        expected = _reference_weights(q, k, centers, width)
        expect_close("weights", got, expected, context=f"D = {width}")


@test("q2", points=1)
def a_window_wider_than_the_input_is_global_attention(local_weights):
    """with D >= S the local weights are the global softmax"""
    _, _, scores, centers = _local_case(seed=20)
    with torch.no_grad():
        got = local_weights(scores, centers, 8)
    expect_close("weights", got, torch.softmax(scores, dim=-1), context="D = 8 = S")
