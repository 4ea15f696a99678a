"""Notebook files as plain JSON: reading, writing byte-for-byte stably, and code extraction.

No dependency on ``nbformat``: notebooks are read with :mod:`json` (a file
that does not parse is reported, not raised) and written the way nbformat
writes them (sorted keys, one-space indent, sources split into lines, a final
newline), so a regenerated file is identical to the previous one.

:func:`code_cells` turns a submission's code cells into plain Python: IPython
syntax (``%pip``, ``!ls``, ``%%bash``, ``x = !cmd``) is translated by
IPython's own transformer into ``get_ipython()`` calls, which the student
process (:mod:`course_grader.sandboxed.student`) answers without running anything; top-level ``check(...)`` calls
are blanked out (they only print the student's self-check).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "NotebookError",
    "read_notebook",
    "dumps_notebook",
    "cell_source",
    "assignment_of",
    "code_cells",
]


class NotebookError(ValueError):
    """The file is not a readable Jupyter notebook (the message says why)."""


MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024


def read_notebook(path: str | Path) -> dict:
    """The notebook at ``path`` as a dict; ``NotebookError`` when it is not one.

    Never raises anything else for a file's content, however malformed: an empty
    file, JSON nested a million deep, a list of cells that are not cells, a
    source that is not text, metadata that is not a mapping all give a
    ``NotebookError`` with a short reason.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as err:
        raise NotebookError(f"cannot read the file: {err.strerror or err}") from None
    if size > MAX_NOTEBOOK_BYTES:
        raise NotebookError(
            f"too large ({size / 1e6:.0f} MB; a notebook without outputs is well under 1 MB)"
        )
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise NotebookError(f"cannot read the file: {err.strerror or err}") from None
    if not raw.strip():
        raise NotebookError("the file is empty (expected a .ipynb notebook, which is JSON)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotebookError("not a text file (expected a .ipynb notebook, which is JSON)") from None
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as err:
        raise NotebookError(f"not valid JSON ({err.msg} at line {err.lineno})") from None
    except RecursionError:
        raise NotebookError("not a notebook (JSON nested too deeply to read)") from None
    except (ValueError, MemoryError) as err:
        raise NotebookError(f"not valid JSON ({type(err).__name__})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError("valid JSON but not a notebook (no list of cells)")
    if not isinstance(nb.get("metadata", {}), dict):
        raise NotebookError("valid JSON but not a notebook (its metadata is not a mapping)")
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise NotebookError(f"cell {i} is malformed (no cell_type)")
        source = cell.get("source", "")
        if not (
            isinstance(source, str)
            or (isinstance(source, list) and all(isinstance(s, str) for s in source))
        ):
            raise NotebookError(f"cell {i} is malformed (its source is not text)")
        if not isinstance(cell.get("metadata", {}), dict):
            raise NotebookError(f"cell {i} is malformed (its metadata is not a mapping)")
    return nb


def cell_source(cell: dict) -> str:
    """A cell's source as one string (notebooks store it as a string or a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _split_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def dumps_notebook(nb: dict) -> str:
    """Serialise like nbformat: multi-line strings as lists of lines, sorted keys, indent 1."""
    nb = json.loads(json.dumps(nb))  # a deep copy
    for cell in nb.get("cells", []):
        if isinstance(cell.get("source"), str):
            cell["source"] = _split_lines(cell["source"])
        for out in cell.get("outputs", []):
            if isinstance(out.get("text"), str):
                out["text"] = _split_lines(out["text"])
            for key, value in out.get("data", {}).items():
                if isinstance(value, str) and not key.endswith("json"):
                    out["data"][key] = _split_lines(value)
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def assignment_of(nb: dict) -> str | None:
    """The assignment id stored in the notebook metadata (``{"course": {"assignment": id}}``)."""
    metadata = nb.get("metadata", {})
    course = metadata.get("course", {}) if isinstance(metadata, dict) else {}
    value = course.get("assignment") if isinstance(course, dict) else None
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class CodeCell:
    """A code cell ready to run: its number among the code cells (from 1) and Python source."""

    number: int
    source: str


def _transform_ipython(source: str) -> str:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # a grader installed without Jupyter: the same calls, line by line
        return transform_without_ipython(source)
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - leave it to the compiler to report
        return source


_ASSIGNED_SHELL = re.compile(r"^(\s*)([\w.,\s]+?)\s*=\s*!(.*)$")


def transform_without_ipython(source: str) -> str:
    """IPython-only lines as ``get_ipython()`` calls, where IPython is not installed.

    The same calls IPython's transformer makes, one line for one line (so line
    numbers stay): ``%%magic line`` as the first line of a cell, ``!cmd``,
    ``x = !cmd`` and ``%magic args``. Lines continued with a backslash are
    not joined.
    """
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        name, _, line = lines[0].lstrip()[2:].partition(" ")
        body = "\n".join(lines[1:]) + ("\n" if len(lines) > 1 else "")
        call = f"get_ipython().run_cell_magic({name!r}, {line!r}, {body!r})"
        return call + "\n" * (len(lines) - 1)
    out = []
    for line in lines:
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        assigned = _ASSIGNED_SHELL.match(line)
        if assigned and not stripped.startswith(("!", "%")):
            out.append(f"{assigned[1]}{assigned[2]} = get_ipython().getoutput({assigned[3]!r})")
        elif stripped.startswith("!"):
            out.append(f"{indent}get_ipython().system({stripped[1:]!r})")
        elif stripped.startswith("%") and not stripped.startswith("%%"):
            name, _, args = stripped[1:].partition(" ")
            out.append(f"{indent}get_ipython().run_line_magic({name!r}, {args!r})")
        else:
            out.append(line)
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def _blank_check_calls(source: str, names: tuple[str, ...] = ("check",)) -> str:
    """Replace top-level ``check(...)`` statements by ``pass``, keeping line numbers."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    lines = source.splitlines(keepends=True)
    calls = [
        node
        for node in tree.body
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id in names
        and node.col_offset == 0
    ]
    others = {n.lineno for n in tree.body if n not in calls} | {
        n.end_lineno for n in tree.body if n not in calls
    }
    for node in calls:
        span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        if others.intersection(span):
            continue  # shares a line with another statement: leave it (check is a no-op anyway)
        for i in span:
            lines[i - 1] = ("pass" if i == node.lineno else "") + (
                "\n" if lines[i - 1].endswith("\n") else ""
            )
    return "".join(lines)


def code_cells(nb: dict[str, Any]) -> list[CodeCell]:
    """The notebook's code cells as runnable Python, in order."""
    cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    return [
        CodeCell(i, _blank_check_calls(_transform_ipython(cell_source(c))))
        for i, c in enumerate(cells, start=1)
    ]
