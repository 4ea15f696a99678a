"""Shape checks shared by every module: each error names the shape it expected.

A student who passes a tensor of the wrong shape gets one line saying which
function, which argument, the expected dimensions (with names) and what came in,
for example ``lstm_cell: x must be [batch, input_size=8], got [3, 5]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["fmt_shape", "expect_shape"]


def fmt_shape(shape: torch.Size | tuple[int, ...] | list[int]) -> str:
    """``torch.Size([3, 5])`` -> ``"[3, 5]"``."""
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def expect_shape(where: str, name: str, t: Tensor, dims: list[tuple[str, int | None]]) -> None:
    """Raise ValueError unless ``t`` has shape ``dims`` (size ``None`` means any size)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
    ok = t.dim() == len(dims) and all(
        size is None or t.shape[i] == size for i, (_, size) in enumerate(dims)
    )
    if not ok:
        want = ", ".join(label if size is None else f"{label}={size}" for label, size in dims)
        raise ValueError(f"{where}: {name} must be [{want}], got {fmt_shape(t.shape)}")
