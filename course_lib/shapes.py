"""Shape checks whose errors name the shape they expected.

A student who passes a tensor of the wrong shape gets one line saying which
function, which argument, the expected dimensions (with the shape letters of
``book/notation.md``, and their sizes where they are known) and what came in,
for example ``lstm_cell: x must be [B, D=8], got [3, 5]``.

Modules check a tensor of a fixed number of dims with :func:`expect_shape`;
where the number of leading dims varies (``[..., T, d]``) they write the check
out and format the shapes with :func:`fmt_shape`, so that the message reads the
same.  Not every module uses them yet.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["fmt_shape", "expect_shape", "expect_positive"]


def fmt_shape(shape: torch.Size | tuple[int, ...] | list[int]) -> str:
    """``torch.Size([3, 5])`` -> ``"[3, 5]"``."""
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def expect_shape(where: str, name: str, t: Tensor, dims: list[tuple[str, int | None]]) -> None:
    """Raise ValueError unless ``t`` has shape ``dims`` (size ``None`` means any size).

    ``where`` names the calling function and ``name`` the argument; ``dims`` lists
    ``(letter, size)`` pairs, e.g. ``[("B", None), ("T", None), ("D", 16)]`` for [B, T, D=16].
    """
    if not isinstance(t, Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
    matches = t.dim() == len(dims) and all(
        size is None or t.shape[i] == size for i, (_, size) in enumerate(dims)
    )
    if not matches:
        expected = ", ".join(label if size is None else f"{label}={size}" for label, size in dims)
        raise ValueError(f"{where}: {name} must be [{expected}], got {fmt_shape(t.shape)}")


def expect_positive(where: str, **sizes: int) -> None:
    """Raise ValueError unless every keyword is a positive int (a size, a count)."""
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")
