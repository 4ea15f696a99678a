"""Comparisons for assignment tests: each failure says what was expected and what came.

A test calls these helpers on whatever the student's function returned. They
never trust it: a tuple where a tensor was expected, a tensor on the GPU, a
NaN, a wrong shape or dtype each give a one-line message (``TestFailed``)
instead of an error from deep inside PyTorch. Tensors are moved to the CPU
before any comparison, so a result computed on a GPU is judged the same way.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "TestFailed",
    "Partial",
    "fail",
    "expect_tensor",
    "expect_close",
    "expect_equal",
    "expect_number",
]


class TestFailed(Exception):
    """A test's verdict: the student's result is not what was expected (the message says why)."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class Partial:
    """Returned by a test to give part of its points: ``fraction`` in [0, 1], with a reason."""

    fraction: float
    message: str = ""


def fail(message: str) -> None:
    """Fail the current test with ``message`` (what was expected, what came)."""
    raise TestFailed(message)


def _shape(shape: Any) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def expect_tensor(
    name: str,
    got: Any,
    shape: tuple[int, ...] | None = None,
    dtype: torch.dtype | None = None,
    finite: bool = True,
) -> torch.Tensor:
    """Check that ``got`` is a tensor (of ``shape`` and ``dtype`` if given); return it on the CPU.

    With ``finite`` (the default), floating-point values must all be finite (no NaN, no inf).
    """
    if not isinstance(got, torch.Tensor):
        fail(f"{name}: expected a torch.Tensor, got {type(got).__name__}")
    got = got.detach().cpu()
    if shape is not None and tuple(got.shape) != tuple(shape):
        fail(f"{name}: expected shape {_shape(shape)}, got {_shape(got.shape)}")
    if dtype is not None and got.dtype != dtype:
        fail(f"{name}: expected dtype {dtype}, got {got.dtype}")
    if finite and got.is_floating_point():
        bad = ~torch.isfinite(got)
        if bad.any():
            fail(f"{name}: contains NaN or infinite values ({int(bad.sum())} of {got.numel()})")
    return got


def expect_close(
    name: str,
    got: Any,
    expected: torch.Tensor,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    context: str = "",
) -> torch.Tensor:
    """Check shape, finiteness and values of ``got`` against ``expected`` (within tolerances)."""
    where = f" ({context})" if context else ""
    got = expect_tensor(name, got, shape=tuple(expected.shape), finite=False)
    if not got.is_floating_point():
        fail(f"{name}: expected floating-point values, got dtype {got.dtype}{where}")
    bad = ~torch.isfinite(got)
    if bad.any():
        fail(f"{name}: contains NaN or infinite values ({int(bad.sum())} of {got.numel()}){where}")
    expected = expected.detach().cpu().to(torch.float64)
    err = (got.to(torch.float64) - expected).abs()
    allowed = atol + rtol * expected.abs()
    wrong = err > allowed
    if wrong.any():
        fail(
            f"{name}: max abs error {err.max().item():.3g} exceeds the tolerance "
            f"(atol={atol:g}, rtol={rtol:g}){where}; {_differences(got, expected, err, wrong)}"
        )
    return got


def _values(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in t.reshape(-1).tolist()) + "]"


def _differences(got: torch.Tensor, expected: torch.Tensor, err: torch.Tensor, wrong) -> str:
    """Which elements differ: how many, the worst one, and all values when there are few."""
    worst = tuple(int(i) for i in torch.unravel_index(err.argmax(), err.shape)) if err.dim() else ()
    text = (
        f"{int(wrong.sum())} of {wrong.numel()} values differ; the largest difference is at "
        f"index {worst}: expected {expected[worst].item():.6g}, got {got[worst].item():.6g}"
    )
    if got.numel() <= 8:
        text += f" (expected {_values(expected)}, got {_values(got.to(torch.float64))})"
    return text


def expect_equal(name: str, got: Any, expected: torch.Tensor, context: str = "") -> torch.Tensor:
    """Check that integer tensor ``got`` equals ``expected`` exactly (shape, dtype, values)."""
    where = f" ({context})" if context else ""
    got = expect_tensor(name, got)
    if got.is_floating_point() or got.dtype == torch.bool:
        fail(f"{name}: expected integer token ids (torch.long), got dtype {got.dtype}{where}")
    if tuple(got.shape) != tuple(expected.shape):
        fail(f"{name}: expected shape {_shape(expected.shape)}, got {_shape(got.shape)}{where}")
    wrong = got.to(torch.long) != expected.cpu().to(torch.long)
    if wrong.any():
        first = tuple(int(i) for i in wrong.nonzero()[0])
        fail(
            f"{name}: {int(wrong.sum())} of {got.numel()} values differ; first at index {first}: "
            f"expected {int(expected[first])}, got {int(got[first])}{where}"
        )
    return got


def expect_number(
    name: str,
    got: Any,
    expected: float,
    tol: float = 1e-9,
    integer: bool = False,
    context: str = "",
) -> float:
    """Check a Python number (an ``int`` when ``integer``) against ``expected`` within ``tol``."""
    where = f" ({context})" if context else ""
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        kind = "an int" if integer else "a number"
        fail(f"{name}: expected {kind}, got {type(got).__name__}{where}")
    if integer and not isinstance(got, numbers.Integral):
        fail(f"{name}: expected an int, got {type(got).__name__} {got!r}{where}")
    got = int(got) if integer else float(got)
    if not math.isfinite(got):
        fail(f"{name}: expected {expected:g}, got {got}{where}")
    if abs(got - expected) > tol:
        fail(f"{name}: expected {expected:g}, got {got:g}{where}")
    return got
