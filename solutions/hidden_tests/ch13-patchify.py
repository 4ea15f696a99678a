"""Hidden tests for ``ch13-patchify`` (an example of an instructor's private tests).

Graded with ``python -m course_lib.grading grade ... --hidden solutions/hidden_tests``.
Students see only each test's name and whether it passed, never this file.
"""

import torch
from torch import nn

from course_lib.grading import test
from course_lib.grading.expect import expect_close


@test("q1", points=1)
def one_patch_per_image_and_one_pixel_patches(patchify):
    """P = H = W gives one patch (the whole image flattened); P = 1 gives one patch per pixel."""
    images = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(51))
    expect_close("hidden check: patches", patchify(images, 4), images.reshape(2, 1, 48), atol=0)
    expected = images.flatten(2).transpose(1, 2)
    expect_close("hidden check: patches", patchify(images, 1), expected, atol=0)


@test("q2", points=1)
def embedding_without_a_square_grid(patch_embed):
    """A 2 x 5 grid of patches of a single-channel image matches nn.Conv2d."""
    torch.manual_seed(52)
    conv = nn.Conv2d(1, 4, 2, stride=2)
    images = torch.randn(3, 1, 4, 10, generator=torch.Generator().manual_seed(53))
    with torch.no_grad():
        expected = conv(images).flatten(2).transpose(1, 2)
        got = patch_embed(images, conv.weight, conv.bias)
    expect_close("hidden check: embeddings", got, expected, atol=1e-5)
