"""Visible tests of exercise ``ch10-time2vec``: Time2Vec and calendar features (chapter 10).

Time2Vec is checked by its defining properties (the first component affine,
the others periodic with period 2 pi / w_i, their values at known points); the
calendar features against dates whose position in the year is known.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from course_lib.grading.expect import expect_close, expect_tensor
from course_lib.grading.registry import test

ASSIGNMENT = "ch10-time2vec"
TITLE = "Time2Vec and calendar features"


def _params():
    return (
        torch.tensor(0.7),
        torch.tensor(-0.3),
        torch.tensor([1.0, 2.5, 0.4]),
        torch.tensor([0.0, 1.0, -2.0]),
    )


@test("q1", points=1)
def returns_k_plus_one_components(time2vec):
    """maps tau of shape (T,) to (T, k + 1)"""
    w0, b0, w, b = _params()
    expect_tensor("t2v", time2vec(torch.linspace(0, 5, 11), w0, b0, w, b), shape=(11, 4))


@test("q1", points=2)
def first_component_is_affine(time2vec):
    """component 0 is w0 * tau + b0"""
    w0, b0, w, b = _params()
    tau = torch.tensor([-2.0, 0.0, 1.0, 10.0])
    expect_close(
        "t2v[:, 0]", time2vec(tau, w0, b0, w, b)[:, 0], torch.tensor([-1.7, -0.3, 0.4, 6.7])
    )


@test("q1", points=2)
def other_components_are_periodic_sines(time2vec):
    """component i is sin(w_i tau + b_i): sin(b_i) at tau = 0 and periodic with period 2 pi / w_i"""
    w0, b0, w, b = _params()
    tau = torch.linspace(-3, 3, 13)
    out = time2vec(tau, w0, b0, w, b)
    expect_close("t2v(0)[1:]", time2vec(torch.zeros(1), w0, b0, w, b)[0, 1:], torch.sin(b))
    for i in range(3):
        shifted = time2vec(tau + 2 * math.pi / w[i], w0, b0, w, b)[:, i + 1]
        expect_close(f"t2v[:, {i + 1}] one period later", shifted, out[:, i + 1], atol=1e-4)


@test("q2", points=2)
def calendar_features_follow_the_year(calendar_features):
    """(sin 2 pi a, cos 2 pi a) with a the fraction of the year elapsed"""
    idx = pd.DatetimeIndex(["2001-01-01", "2001-04-02", "2001-07-02", "2004-07-02"])
    f = expect_tensor("features", calendar_features(idx), shape=(4, 2))
    a = torch.tensor([0 / 365, 91 / 365, 182 / 365, 183 / 366], dtype=torch.float64)
    expected = torch.stack([torch.sin(2 * math.pi * a), torch.cos(2 * math.pi * a)], dim=1)
    expect_close("features", f, expected, atol=1e-5, context="2004 is a leap year")
