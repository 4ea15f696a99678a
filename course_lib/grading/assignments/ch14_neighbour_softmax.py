"""Visible tests of exercise ``ch14-neighbour-softmax``: a softmax per node over an edge list (14.3).

The per-node maximum is compared with a loop over the nodes; the softmax with a
dense masked softmax (``torch.softmax`` of a ``[N, N]`` score matrix filled with
``-inf`` where there is no edge), in float64 where the scores are large. Edge
lists have no duplicate edges. Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch14-neighbour-softmax"
TITLE = "A stable softmax over each node's incoming edges"


def _graph(n: int, p: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random edge list [2, E] without duplicates (degrees vary, some may be 0), and scores [E]."""
    g = torch.Generator().manual_seed(seed)
    adj = torch.rand(n, n, generator=g) < p  # adj[i, j]: an edge j -> i
    target, source = adj.nonzero(as_tuple=True)
    perm = torch.randperm(target.shape[0], generator=g)  # edges in no particular order
    edges = torch.stack([source[perm], target[perm]])
    return edges, torch.randn(edges.shape[1], generator=g) * 3


def _dense_softmax(scores: torch.Tensor, edges: torch.Tensor, n: int) -> torch.Tensor:
    dense = torch.full((n, n), float("-inf"), dtype=torch.float64)
    dense[edges[1], edges[0]] = scores.double()
    alpha = torch.softmax(dense, dim=1)  # row i: over the sources of the edges into i
    return alpha[edges[1], edges[0]]


@test("q1", points=2)
def node_max_matches_a_loop(node_max):
    """returns [N]: the largest score into each node, -inf for a node without incoming edges"""
    for n, p, seed in ((6, 0.4, 1), (8, 0.2, 2), (3, 0.9, 3)):
        edges, scores = _graph(n, p, seed)
        expected = torch.full((n,), float("-inf"))
        for i in range(n):
            into = scores[edges[1] == i]
            if into.numel():
                expected[i] = into.max()
        got = expect_tensor("m", node_max(scores, edges[1], n), shape=(n,), finite=False)
        has = torch.isfinite(expected)
        expect_close("m (nodes with edges)", got[has], expected[has], context=f"N={n}, seed {seed}")
        if (got[~has] != float("-inf")).any():
            fail(f"m: a node without incoming edges should get -inf (N={n}, seed {seed})")


@test("q2", points=3)
def softmax_matches_dense_masked_softmax(neighbour_softmax):
    """equals the dense softmax over each node's incoming edges (degrees 0 to N)"""
    for n, p, seed in ((6, 0.4, 4), (10, 0.25, 5), (4, 1.0, 6)):
        edges, scores = _graph(n, p, seed)
        got = neighbour_softmax(scores, edges[1], n)
        expected = _dense_softmax(scores, edges, n)
        expect_close("alpha", got, expected, context=f"N={n}, E={edges.shape[1]}")


@test("q2", points=2)
def softmax_is_stable_for_large_scores(neighbour_softmax):
    """scores around +-1000 give finite weights, equal to the dense softmax in float64"""
    edges, scores = _graph(7, 0.5, 7)
    scores = scores * 300 + torch.where(edges[1] % 2 == 0, 1000.0, -1000.0)
    got = neighbour_softmax(scores, edges[1], 7)
    expected = _dense_softmax(scores, edges, 7)
    expect_close("alpha", got, expected, atol=1e-5, context="scores near +-1000")


@test("q2", points=1)
def weights_into_each_node_sum_to_one(neighbour_softmax):
    """the weights of the edges into each node with an edge sum to 1"""
    edges, scores = _graph(9, 0.3, 8)
    got = expect_tensor("alpha", neighbour_softmax(scores, edges[1], 9), shape=scores.shape)
    sums = torch.zeros(9, dtype=got.dtype).index_add_(0, edges[1], got)
    has = torch.bincount(edges[1], minlength=9) > 0
    expect_close("the sums per node", sums[has], torch.ones(int(has.sum())), atol=1e-5)
