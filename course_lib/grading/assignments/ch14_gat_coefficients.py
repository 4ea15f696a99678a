"""Visible tests of exercise ``ch14-gat-coefficients``: one node's GAT attention (14.2)-(14.4).

The coefficients and the output are compared with :class:`course_lib.gat.GATLayer`
(one head, no self-loops added, zero bias) whose weights are copied from the
test's ``W``, ``a_src`` and ``a_dst``; that layer matches PyG's ``GATConv`` in
the course's own tests. Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch

from course_lib.gat import GATLayer
from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch14-gat-coefficients"
TITLE = "The attention coefficients of one node in a GAT layer"

# (number of nodes, F, C, node i, its neighbours j)
CASES = (
    (5, 4, 3, 0, [1, 2, 4]),
    (6, 3, 5, 2, [2, 0, 5]),
    (4, 2, 2, 3, [1]),
    (7, 6, 4, 6, [0, 1, 2, 3, 4, 5, 6]),
)


def _inputs(n: int, f: int, c: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    weight = torch.randn(c, f, generator=g)
    att_src, att_dst = torch.randn(c, generator=g), torch.randn(c, generator=g)
    return x, weight, att_src, att_dst


def _reference(x, weight, att_src, att_dst, i, neighbours):
    """(alpha over the neighbours, h_i) from course_lib's GATLayer with copied weights."""
    layer = GATLayer(x.shape[1], weight.shape[0], heads=1, add_self_loops=False)
    with torch.no_grad():
        layer.lin.weight.copy_(weight)
        layer.att_src.copy_(att_src.view(1, 1, -1))
        layer.att_dst.copy_(att_dst.view(1, 1, -1))
        layer.bias.zero_()
        edges = torch.tensor([neighbours, [i] * len(neighbours)])
        out, (_, alpha) = layer(x, edges, return_attention=True)
    return alpha[:, 0], out[i]


@test("q1", points=1)
def coefficients_are_a_distribution(gat_coefficients):
    """returns one coefficient per neighbour, positive, summing to 1"""
    x, weight, att_src, att_dst = _inputs(5, 4, 3, 1)
    got = expect_tensor(
        "alpha", gat_coefficients(x, weight, att_src, att_dst, 0, [1, 2, 4]), shape=(3,)
    )
    expect_close("the sum of alpha", got.sum(), torch.tensor(1.0), atol=1e-5)
    if (got <= 0).any():
        fail("alpha: every coefficient should be positive")


@test("q1", points=3)
def coefficients_match_gat_layer(gat_coefficients):
    """equals softmax_j LeakyReLU_0.2(a_dst . W x_i + a_src . W x_j), as GATLayer computes it"""
    for seed, (n, f, c, i, nbrs) in enumerate(CASES, start=2):
        x, weight, att_src, att_dst = _inputs(n, f, c, seed)
        expected, _ = _reference(x, weight, att_src, att_dst, i, nbrs)
        got = gat_coefficients(x, weight, att_src, att_dst, i, nbrs)
        expect_close("alpha", got, expected, context=f"node {i}, neighbours {nbrs}")


@test("q1", points=1)
def negative_scores_use_slope_0_2(gat_coefficients):
    """a negative score is multiplied by 0.2 (LeakyReLU), not set to zero"""
    x = torch.tensor([[1.0], [-1.0], [-3.0]])
    weight, att_src, att_dst = torch.ones(1, 1), torch.ones(1), torch.zeros(1)
    expected = torch.softmax(torch.tensor([-0.2, -0.6]), 0)  # e = 0.2 * (-1), 0.2 * (-3)
    got = gat_coefficients(x, weight, att_src, att_dst, 0, [1, 2])
    expect_close("alpha", got, expected, context="scores -1 and -3")


@test("q2", points=3)
def output_matches_gat_layer(gat_output):
    """equals h_i = sum_j alpha_ij W x_j, row i of GATLayer's output (zero bias)"""
    for seed, (n, f, c, i, nbrs) in enumerate(CASES, start=10):
        x, weight, att_src, att_dst = _inputs(n, f, c, seed)
        _, expected = _reference(x, weight, att_src, att_dst, i, nbrs)
        got = gat_output(x, weight, att_src, att_dst, i, nbrs)
        expect_close("h_i", got, expected, context=f"node {i}, neighbours {nbrs}")


@test("q2", points=1)
def one_neighbour_passes_its_message_unchanged(gat_output):
    """with a single neighbour j, alpha_ij = 1 and h_i = W x_j"""
    x, weight, att_src, att_dst = _inputs(4, 3, 2, 20)
    got = gat_output(x, weight, att_src, att_dst, 1, [3])
    expect_close("h_i", got, weight @ x[3], context="node 1, neighbours [3]")
