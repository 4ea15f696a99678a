"""Visible tests of exercise ``ch07-sinusoidal-table``: the table and its shift matrix (chapter 7).

The table is compared entry by entry with the formula of Vaswani et al.
evaluated with Python's ``math``; the shift matrix is checked by what it must
do (map every row to the row k further) and by being orthogonal.
"""

from __future__ import annotations

import math

import torch

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch07-sinusoidal-table"
TITLE = "The sinusoidal table and its shift matrix"


def _formula(length: int, dim: int) -> torch.Tensor:
    out = torch.empty(length, dim, dtype=torch.float64)
    for p in range(length):
        for c in range(dim):
            angle = p / 10000 ** (2 * (c // 2) / dim)
            out[p, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return out


@test("q1", points=1)
def the_d4_example(sinusoidal_table):
    """sinusoidal_table(2, 4) is [[0, 1, 0, 1], [sin 1, cos 1, sin 0.01, cos 0.01]]"""
    got = expect_tensor("sinusoidal_table(2, 4)", sinusoidal_table(2, 4), shape=(2, 4))
    expect_close("sinusoidal_table(2, 4)", got, _formula(2, 4), atol=1e-6)


@test("q1", points=2)
def matches_the_formula(sinusoidal_table):
    """sinusoidal_table(L, d) matches PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i)"""
    for length, dim in ((50, 16), (7, 6)):
        got = expect_tensor(
            f"sinusoidal_table({length}, {dim})", sinusoidal_table(length, dim), shape=(length, dim)
        )
        expect_close(f"sinusoidal_table({length}, {dim})", got, _formula(length, dim), atol=1e-5)


@test("q2", points=2)
def the_shift_matrix_moves_every_row(shift_matrix):
    """shift_matrix(k, d) @ PE[p] equals PE[p + k] for every p"""
    dim = 12
    pe = _formula(300, dim)
    for k in (1, 5, 40):
        M = expect_tensor(
            f"shift_matrix({k}, {dim})", shift_matrix(k, dim), shape=(dim, dim)
        ).double()
        expect_close(
            f"PE[p] @ M^T (k = {k})", pe[: 300 - k] @ M.T, pe[k:], atol=1e-6, context="all p"
        )


@test("q2", points=1)
def the_shift_matrix_is_orthogonal(shift_matrix):
    """shift_matrix(k, d) is orthogonal, and M_3 M_4 = M_7"""
    M3, M4, M7 = (shift_matrix(k, 8).double() for k in (3, 4, 7))
    expect_close("M^T M", M3.T @ M3, torch.eye(8, dtype=torch.float64), atol=1e-6)
    expect_close("M_3 M_4", M3 @ M4, M7, atol=1e-6)
    if torch.allclose(M3, M3.T):
        fail(
            "M_3 is symmetric, but a rotation by a non-zero angle is not: check the signs of the sines"
        )
