"""What notebooks display: library source (so the book never redefines it), tables, differences,
smoothed curves."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from course_lib.shapes import fmt_shape

__all__ = ["show_source", "html_table", "max_diff", "moving_average"]


def show_source(obj: Any) -> str | None:
    """Show the source of a function, class or module, syntax-highlighted.

    In a notebook it displays a code block at once (also on the website),
    wherever the call stands in the cell, and returns None; outside a notebook
    it returns the plain source text.
    """
    try:
        source = inspect.getsource(obj)
    except (TypeError, OSError) as err:
        raise TypeError(
            f"show_source needs a function, class or module defined in a .py file; "
            f"got {type(obj).__name__}: {err}"
        ) from None
    try:
        from IPython import get_ipython
        from IPython.display import Code, display
    except ImportError:  # pragma: no cover - IPython always present with notebooks
        return source
    if get_ipython() is None:  # plain Python: nothing to display into
        return source
    display(Code(source, language="python"))
    return None


def html_table(header: list, rows: list[list], caption: str | None = None) -> Any:
    """A table as HTML, which renders the same in Jupyter, in Colab and on the website.

    ``header`` is one list of column titles, ``rows`` a list of rows of the same
    length (each cell is shown with ``str``); ``caption`` (HTML) goes above it.
    """
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(
                f"html_table: row {i} has {len(row)} cells but the header has {len(header)}"
            )
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{v}</td>" for v in row) + "</tr>" for row in rows)
    html = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if caption is not None:
        html = f"<p>{caption}</p>{html}"
    try:
        from IPython.display import HTML
    except ImportError:  # pragma: no cover - IPython always present with notebooks
        return html
    return HTML(html)


def max_diff(a: Any, b: Any) -> float:
    """The largest absolute difference between two tensors, or two tuples of tensors."""
    if isinstance(a, tuple | list):
        if not isinstance(b, tuple | list) or len(a) != len(b):
            raise ValueError("max_diff: a and b must both be tensors, or tuples of equal length")
        return max(max_diff(u, v) for u, v in zip(a, b, strict=True))
    if a.shape != b.shape:
        raise ValueError(f"max_diff: shapes differ, {fmt_shape(a.shape)} vs {fmt_shape(b.shape)}")
    return (a - b).abs().max().item()


def moving_average(values: Any, k: int = 10) -> np.ndarray:
    """The mean of each window of ``k`` consecutive values, for plotting a noisy curve.

    ``values``: a sequence of N numbers (a list, array or 1-d tensor). Returns
    N - k + 1 means (``np.convolve``'s "valid" mode), so the first point is the
    mean of steps 0..k-1; nothing is padded, so the ends are not biased to zero.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 1:
        raise ValueError(f"moving_average: values must be 1-d, got shape {v.shape}")
    if not 1 <= k <= len(v):
        raise ValueError(
            f"moving_average: the window k={k} must be between 1 and the number of values "
            f"({len(v)}); pass a smaller k or more values"
        )
    return np.convolve(v, np.ones(k) / k, mode="valid")
