"""Visible tests of exercise ``ch13-cls-attention``: where the CLS token looks (13.5).

The maps are compared with :func:`course_lib.vit.cls_attention_map` (last layer,
``rollout=False``) and :func:`course_lib.vit.attention_rollout`, the functions
the chapter draws its figures with, on random row-stochastic attention weights
``[L, B, h, T, T]`` made with ``torch.softmax``. Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test
from course_lib.vit import attention_rollout, cls_attention_map

ASSIGNMENT = "ch13-cls-attention"
TITLE = "What the CLS token looks at: last layer and rollout"


def _weights(layers: int, b: int, heads: int, grid: int, seed: int) -> torch.Tensor:
    t = grid * grid + 1
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(layers, b, heads, t, t, generator=g) * 2, dim=-1)


@test("q1", points=1)
def last_layer_map_has_the_right_shape_and_sums_to_one(last_layer_cls_map):
    """returns [B, grid, grid], each map summing to 1"""
    got = expect_tensor("map", last_layer_cls_map(_weights(2, 3, 2, 3, 1), 3), shape=(3, 3, 3))
    expect_close("map sums", got.sum((1, 2)), torch.ones(3), atol=1e-5)
    if (got < 0).any():
        fail("map: attention must not be negative")


@test("q1", points=3)
def last_layer_map_matches_course_lib(last_layer_cls_map):
    """equals the CLS row of the last layer, averaged over heads, CLS column dropped, renormalised"""
    for layers, b, heads, grid, seed in ((2, 3, 2, 3, 2), (1, 1, 4, 2, 3), (3, 2, 1, 4, 4)):
        w = _weights(layers, b, heads, grid, seed)
        expect_close(
            "map",
            last_layer_cls_map(w, grid),
            cls_attention_map(w, grid, rollout=False),
            context=f"L={layers}, B={b}, h={heads}, grid={grid}",
        )


@test("q2", points=1)
def rollout_rows_sum_to_one(rollout):
    """returns [B, T, T] whose rows sum to 1"""
    got = expect_tensor("R", rollout(_weights(3, 2, 2, 2, 5)), shape=(2, 5, 5))
    expect_close("row sums", got.sum(-1), torch.ones(2, 5), atol=1e-5)


@test("q2", points=3)
def rollout_matches_course_lib(rollout):
    """equals A_L' ... A_1' with A_l' = r I + (1 - r) mean_h A_l, for r = 0.5, 0 and 0.9"""
    for layers, b, heads, grid, r, seed in (
        (3, 2, 2, 2, 0.5, 6),
        (2, 1, 3, 3, 0.0, 7),
        (4, 2, 1, 2, 0.9, 8),
    ):
        w = _weights(layers, b, heads, grid, seed)
        expect_close(
            "R",
            rollout(w, r),
            attention_rollout(w, r),
            context=f"L={layers}, h={heads}, residual={r}",
        )


@test("q2", points=1)
def rollout_of_one_layer_without_residual_is_the_head_mean(rollout):
    """with one layer and residual 0, R is the head-averaged attention itself"""
    w = _weights(1, 2, 3, 2, 9)
    expect_close("R", rollout(w, 0.0), w[0].mean(1), context="L=1, residual=0")
