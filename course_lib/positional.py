"""Where a token is: absolute positions, added to the input (Chapter 7).

Attention by itself is blind to order: permute the keys and values together and
every output stays the same.  Position must be put back in, and there are two
families of ways to do it.  This module holds the first, **absolute** positions:
a vector per position, added to the token embedding before the first layer --
the fixed sinusoidal table of Vaswani et al. (:func:`sinusoidal_table`,
eq. (7.1)) or a learned table (:class:`LearnedPositions`, eq. (7.3)).  The
sinusoidal table has a linear shift property, ``PE(p + k) = M_k PE(p)``
(:func:`shift_matrix`, eq. (7.2)).

The second family, **relative** positions (Chapter 8: Shaw, T5, ALiBi, RoPE),
is in :mod:`course_lib.relative`, and their attention hooks in
:mod:`course_lib.position_hooks`; their names stay reachable from here as well
(``positional.apply_rope``), see the end of the file.

Shapes (``book/notation.md``): ``T`` positions, ``d`` a vector size (even: the
coordinates come in pairs).  Equation numbers refer to Chapter 7 of the course.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from course_lib.shapes import expect_positive

__all__ = [
    "sinusoidal_frequencies",
    "sinusoidal_table",
    "shift_matrix",
    "LearnedPositions",
]


def _even(where: str, name: str, value: int) -> None:
    expect_positive(where, **{name: value})
    if value % 2:
        raise ValueError(
            f"{where}: {name} must be even (coordinates are used in pairs (2i, 2i+1)), got {value}"
        )


def _frequency_args(where: str, dim: int, base: float) -> None:
    # The checks of sinusoidal_frequencies, made first by its callers so that
    # an error names the function that was called.
    _even(where, "dim", dim)
    if base <= 1:
        raise ValueError(f"{where}: base must be > 1, got {base}")


def sinusoidal_frequencies(dim: int, base: float = 10000.0) -> Tensor:
    """The angular frequencies of the sinusoidal table, Chapter 7, eq. (7.1).

    ``omega_i = base^(-2i / d)`` for the pair index ``i = 0 .. d/2 - 1``, float64
    ``[d/2]``.  Pair ``i`` has wavelength ``2 pi / omega_i``, from ``2 pi``
    (``i = 0``) to almost ``2 pi * base``.  RoPE (Chapter 8, eq. (8.7)) uses the same
    frequencies.
    """
    _frequency_args("sinusoidal_frequencies", dim, base)
    i = torch.arange(dim // 2, dtype=torch.float64)  # pair index          [d/2]
    return base ** (-2.0 * i / dim)  # omega_i = base^(-2i/d)                [d/2]


def sinusoidal_table(
    num_positions: int,
    dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The sinusoidal position table of Vaswani et al., Chapter 7, eq. (7.1).

    ``PE[p, 2i] = sin(p * omega_i)`` and ``PE[p, 2i + 1] = cos(p * omega_i)``,
    ``omega_i = base^(-2i/d)``, for positions ``p = 0 .. num_positions - 1``.
    Returns ``[num_positions, dim]``.  ``i`` indexes a *pair* of coordinates
    (sine and cosine share one frequency), not a single coordinate.  The angles
    are computed in float64, so far positions keep their precision.
    """
    expect_positive("sinusoidal_table", num_positions=num_positions)
    _frequency_args("sinusoidal_table", dim, base)
    omega = sinusoidal_frequencies(dim, base)  #                               [d/2]
    p = torch.arange(num_positions, dtype=torch.float64)  #                    [T]
    angles = p[:, None] * omega[None, :]  # p * omega_i                        [T, d/2]
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)  # (7.1) PE[p, 2i]   = sin(p omega_i)
    table[:, 1::2] = torch.cos(angles)  # (7.1) PE[p, 2i+1] = cos(p omega_i)
    return table.to(dtype=dtype, device=device)


def shift_matrix(
    k: float, dim: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float64
) -> Tensor:
    """The matrix ``M_k`` with ``PE(p + k) = M_k PE(p)`` for every ``p``, Chapter 7, eq. (7.2).

    Block diagonal ``[d, d]``, one 2x2 block per pair ``(sin, cos)`` of eq. (7.1):

        [sin((p+k) w)]   [ cos(k w)  sin(k w)] [sin(p w)]
        [cos((p+k) w)] = [-sin(k w)  cos(k w)] [cos(p w)]

    (the angle-addition formulas).  The blocks depend on ``k`` only, each is a
    rotation (so ``M_k`` is orthogonal), and ``M_k M_j = M_(k+j)``.
    """
    _frequency_args("shift_matrix", dim, base)
    omega = sinusoidal_frequencies(dim, base)  #                               [d/2]
    c, s = torch.cos(k * omega), torch.sin(k * omega)  #                       [d/2]
    m = torch.zeros(dim, dim, dtype=torch.float64)
    idx = torch.arange(0, dim, 2)
    m[idx, idx] = c  # row sin: cos(k w) * sin(p w) ...
    m[idx, idx + 1] = s  # ... + sin(k w) * cos(p w)
    m[idx + 1, idx] = -s  # row cos: -sin(k w) * sin(p w) ...
    m[idx + 1, idx + 1] = c  # ... + cos(k w) * cos(p w)
    return m.to(dtype)


def _check_positions(max_len: int, length: int, offset: int) -> None:
    """Raise unless a table of ``max_len`` rows has the rows ``offset .. offset + length - 1``."""
    if length < 0 or offset < 0:
        raise ValueError(
            f"LearnedPositions: length and offset must be >= 0, got {length}, {offset}"
        )
    last = offset + length - 1
    if last >= max_len:
        raise ValueError(
            f"LearnedPositions: position {last} has no row: the table was made with "
            f"max_len={max_len} (positions 0..{max_len - 1}). A learned table "
            "cannot be evaluated beyond the length it was built for (Chapter 7)."
        )


class LearnedPositions(nn.Module):
    """A learned absolute position table, Chapter 7, eq. (7.3): ``z_p = x_p + P[p]``.

    ``P`` is a parameter ``[max_len, dim]`` initialised from N(0, ``init_std``^2)
    (GPT-2 uses 0.01-0.02).  ``forward(length, offset=0)`` returns the rows of
    positions ``offset .. offset + length - 1``, ``[length, dim]``.  There is no
    row for a position ``>= max_len``: asking for one raises ``ValueError``
    (a learned table cannot extrapolate).
    """

    def __init__(self, max_len: int, dim: int, init_std: float = 0.02) -> None:
        super().__init__()
        expect_positive("LearnedPositions", max_len=max_len, dim=dim)
        self.max_len, self.dim = max_len, dim
        self.weight = nn.Parameter(torch.randn(max_len, dim) * init_std)  # P  [max_len, d]

    def forward(self, length: int, offset: int = 0) -> Tensor:
        _check_positions(self.max_len, length, offset)
        return self.weight[offset : offset + length]  # (7.3) P[p]              [length, d]


# ===========================================================================
# Chapter 8's relative positions live in course_lib.relative (the equations)
# and course_lib.position_hooks (the attention hooks).  They are re-exported
# here, so that ``positional.apply_rope`` and
# ``course_lib.show_source(positional.RoPE)`` in the notebooks keep working.
# The import is lazy (PEP 562) because both modules import this module's
# frequencies: an eager import here would be a cycle.
# ===========================================================================

_MOVED_TO = ("relative", "position_hooks")  # each module's __all__ lists what it took


def _moved() -> dict[str, Any]:
    import importlib

    modules = [importlib.import_module(f"course_lib.{m}") for m in _MOVED_TO]
    return {name: module for module in modules for name in module.__all__}


def __getattr__(name: str) -> Any:
    # dunders (``__path__``, asked by every import from this module) never moved: answering
    # them without importing the other modules is what keeps the import from cycling
    module = None if name.startswith("__") else _moved().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_moved()))
