"""Visible tests of exercise ``ch10-patchify``: cutting a series into patches (chapter 10).

Patches are compared with ``torch.Tensor.unfold``, which computes the same
windows (the exercise asks for an implementation without it).
"""

from __future__ import annotations

import torch

from course_lib.grading.expect import expect_close, expect_number
from course_lib.grading.registry import test

ASSIGNMENT = "ch10-patchify"
TITLE = "Patching a series, PatchTST-style"

CASES = ((64, 16, 8), (65, 16, 8), (30, 5, 5), (10, 10, 3), (12, 4, 1))


@test("q1", points=2)
def counts_patches_like_unfold(num_patches):
    """N = (L - P) // S + 1, the number of windows unfold makes"""
    for length, p, s in CASES:
        expected = torch.zeros(length).unfold(0, p, s).shape[0]
        expect_number(
            "N",
            num_patches(length, p, s),
            expected,
            integer=True,
            context=f"L={length}, P={p}, S={s}",
        )


@test("q2", points=3)
def patches_match_unfold(patchify):
    """patchify(x [B, C, L]) equals x.unfold(-1, P, S), shape [B, C, N, P]"""
    g = torch.Generator().manual_seed(0)
    for length, p, s in CASES:
        x = torch.randn(2, 3, length, generator=g)
        expect_close(
            "patches",
            patchify(x, p, s),
            x.unfold(-1, p, s),
            atol=0,
            rtol=0,
            context=f"L={length}, P={p}, S={s}",
        )
