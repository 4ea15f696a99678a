"""Hidden tests for ``ch14-neighbour-softmax`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import math

import torch

from course_lib.grading import test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def one_edge_per_node(node_max):
    """With one edge into each node, the maximum is that edge's score."""
    scores = torch.tensor([3.0, -2.0, 0.5, 7.0])
    target = torch.tensor([2, 0, 3, 1])
    expected = torch.tensor([-2.0, 7.0, 3.0, 0.5])
    expect_close("hidden check: m", node_max(scores, target, 4), expected)


@test("q2", points=1)
def huge_scores_and_a_single_edge(neighbour_softmax):
    """Scores of 1e4 into one node and one lone edge into another: finite, exact weights."""
    scores = torch.tensor([1e4, 1e4 - 1.0, 5.0, -1e4])
    target = torch.tensor([0, 0, 1, 0])
    expected = torch.tensor([1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1)), 1.0, 0.0])
    expect_close("hidden check: alpha", neighbour_softmax(scores, target, 3), expected)
