"""The shape checks every module's errors go through: the message names the function,
the argument, the expected dims (sizes where known) and what came in.

Covers course_lib.shapes; each module's own messages are tested in its test file.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.shapes import expect_positive, expect_shape, fmt_shape


def test_fmt_shape_writes_brackets():
    assert fmt_shape(torch.Size([3, 5])) == "[3, 5]"
    assert fmt_shape(()) == "[]" and fmt_shape([torch.tensor(2)]) == "[2]"


def test_expect_shape_accepts_any_size_where_none_and_names_the_rest():
    dims = [("B", None), ("D", 8)]
    expect_shape("f", "x", torch.zeros(3, 8), dims)
    with pytest.raises(ValueError, match=r"^f: x must be \[B, D=8\], got \[3, 5\]$"):
        expect_shape("f", "x", torch.zeros(3, 5), dims)
    with pytest.raises(ValueError, match=r"^f: x must be \[B, D=8\], got \[8\]$"):
        expect_shape("f", "x", torch.zeros(8), dims)  # the number of dims counts too
    with pytest.raises(TypeError, match=r"^f: x must be a torch.Tensor, got list$"):
        expect_shape("f", "x", [[0.0] * 8], dims)


def test_expect_positive_names_the_first_bad_size():
    expect_positive("f", n=1, d=4)
    for bad in (0, -1, 2.0, None):
        with pytest.raises(ValueError, match=rf"^f: d must be a positive int, got {bad!r}$"):
            expect_positive("f", n=1, d=bad)
