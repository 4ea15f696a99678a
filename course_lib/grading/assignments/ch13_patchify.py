"""Visible tests of exercise ``ch13-patchify``: an image as a sequence of patches (13.1).

Patches are compared with two computations of PyTorch that cut the same
windows: ``torch.Tensor.unfold`` and ``nn.functional.unfold``; the patch
embedding with ``nn.Conv2d`` of kernel and stride ``P``, whose output read in
row-major order is eq. (13.1). Inputs use fixed seeds, on the CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch13-patchify"
TITLE = "Cutting an image into patches, ViT-style"


def _images(b: int, c: int, h: int, w: int, seed: int) -> torch.Tensor:
    return torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(seed))


def _unfold_patches(images: torch.Tensor, p: int) -> torch.Tensor:
    # [B, C, H/P, W/P, P, P] -> [B, H/P, W/P, C, P, P] -> [B, N, C P^2]
    b, c = images.shape[:2]
    x = images.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5)
    return x.reshape(b, -1, c * p * p)


@test("q1", points=1)
def patches_have_the_right_shape(patchify):
    """returns [B, N, C P^2] with N = (H / P)(W / P)"""
    for (b, c, h, w), p in (((2, 3, 8, 8), 4), ((1, 1, 6, 9), 3), ((3, 2, 4, 10), 2)):
        got = patchify(_images(b, c, h, w, 1), p)
        expect_tensor("patches", got, shape=(b, (h // p) * (w // p), c * p * p))


@test("q1", points=3)
def patches_match_tensor_unfold(patchify):
    """equals Tensor.unfold: patches row by row, each flattened channel, then row, then column"""
    for (b, c, h, w), p in (((2, 3, 8, 8), 4), ((1, 1, 6, 9), 3), ((3, 2, 4, 10), 2)):
        images = _images(b, c, h, w, 2)
        expect_close(
            "patches",
            patchify(images, p),
            _unfold_patches(images, p),
            atol=0,
            rtol=0,
            context=f"images {[b, c, h, w]}, P={p}",
        )


@test("q1", points=1)
def patches_match_functional_unfold(patchify):
    """equals nn.functional.unfold(images, P, stride=P).transpose(1, 2)"""
    images = _images(2, 3, 12, 8, 3)
    expected = nn.functional.unfold(images, 4, stride=4).transpose(1, 2)
    expect_close("patches", patchify(images, 4), expected, atol=0, rtol=0, context="P=4")


@test("q2", points=3)
def embedding_matches_conv2d(patch_embed):
    """equals nn.Conv2d(C, D, P, stride=P) read in row-major patch order, [B, N, D]"""
    torch.manual_seed(0)
    for (b, c, h, w), p, d in (((2, 3, 8, 8), 4, 5), ((1, 2, 6, 9), 3, 7)):
        conv = nn.Conv2d(c, d, p, stride=p)
        images = _images(b, c, h, w, 4)
        with torch.no_grad():
            expected = conv(images).flatten(2).transpose(1, 2)
            got = patch_embed(images, conv.weight, conv.bias)
        expect_close("embeddings", got, expected, atol=1e-5, context=f"P={p}, D={d}")


@test("q2", points=1)
def embedding_is_linear_in_the_patches(patch_embed):
    """with a zero bias, one patch set to zero gives a zero embedding for that patch only"""
    images = _images(1, 2, 4, 4, 5)
    images[:, :, :2, 2:] = 0  # the second patch (row 0, column 1) is zero
    weight = torch.randn(3, 2, 2, 2, generator=torch.Generator().manual_seed(6))
    got = expect_tensor("embeddings", patch_embed(images, weight, torch.zeros(3)), shape=(1, 4, 3))
    expect_close("the embedding of patch 1", got[0, 1], torch.zeros(3), atol=1e-6)
    if (got[0, [0, 2, 3]].abs().sum(-1) == 0).any():
        fail("embeddings: a non-zero patch got a zero embedding (are the patches in order?)")
