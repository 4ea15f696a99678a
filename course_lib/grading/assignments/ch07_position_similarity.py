"""Visible tests of exercise ``ch07-position-similarity``: similarity and aliasing (chapter 7).

The closed-form similarity is compared with dot products of rows of the table
computed with Python's ``math``; the first alias with a direct search over the
distances between rows.
"""

from __future__ import annotations

import math

from course_lib.grading.expect import expect_number, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch07-position-similarity"
TITLE = "Similarity and aliasing of sinusoidal positions"


def _row(p: int, dim: int) -> list[float]:
    return [
        (math.sin if c % 2 == 0 else math.cos)(p / 10000 ** (2 * (c // 2) / dim))
        for c in range(dim)
    ]


def _dot(p: int, q: int, dim: int) -> float:
    return sum(a * b for a, b in zip(_row(p, dim), _row(q, dim), strict=True))


@test("q1", points=2)
def similarity_is_the_dot_product_of_two_rows(similarity):
    """similarity(k, d) equals PE(p) . PE(p + k), for any p"""
    for k, dim, p in ((0, 8, 3), (1, 8, 0), (17, 16, 40), (250, 32, 7)):
        expect_number(
            "similarity",
            similarity(k, dim),
            _dot(p, p + k, dim),
            tol=1e-6,
            context=f"k={k}, d={dim}",
        )


@test("q1", points=1)
def similarity_is_symmetric(similarity):
    """similarity(-k, d) equals similarity(k, d), and similarity(0, d) = d / 2"""
    expect_number("similarity(-5, 10)", similarity(-5, 10), similarity(5, 10), tol=1e-9)
    expect_number("similarity(0, 10)", similarity(0, 10), 5.0, tol=1e-9)


def _first_alias_search(dim: int, max_offset: int):
    def dist(k: int) -> float:
        return math.sqrt(sum(2 - 2 * math.cos(k / 10000 ** (2 * i / dim)) for i in range(dim // 2)))

    neighbour = dist(1)
    return next((k for k in range(2, max_offset + 1) if dist(k) < neighbour), None)


@test("q2", points=2)
def finds_the_first_alias_of_a_small_table(first_alias):
    """first_alias(4, 1000) and first_alias(8, 1000) are the first offsets closer than a neighbour"""
    for dim in (4, 8, 6):
        expected = _first_alias_search(dim, 1000)
        got = first_alias(dim, 1000)
        if got != expected:
            fail(f"first_alias({dim}, 1000) should be {expected}, got {got}")


@test("q2", points=1)
def wide_tables_do_not_alias(first_alias):
    """first_alias(16, 5000) is None: no offset up to 5000 comes closer than a neighbour"""
    got = first_alias(16, 5000)
    if got is not None:
        fail(f"first_alias(16, 5000) should be None, got {got}")
