"""Show library source inside a notebook, so the book never redefines it."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["show_source"]


def show_source(obj: Any) -> Any:
    """Display the source of a function, class or module, syntax-highlighted.

    In a notebook this renders a code block (also on the website); outside
    IPython it returns the plain source text.
    """
    try:
        source = inspect.getsource(obj)
    except (TypeError, OSError) as err:
        raise TypeError(
            f"show_source needs a function, class or module defined in a .py file; "
            f"got {type(obj).__name__}: {err}"
        ) from None
    try:
        from IPython.display import Code
    except ImportError:  # pragma: no cover - IPython always present with notebooks
        return source
    return Code(source, language="python")
