"""Generate the student notebooks in ``exercises/`` from the instructor's ``solutions/``.

The rules (the nbgrader conventions):

* in a code cell, the lines from ``### BEGIN SOLUTION`` to ``### END SOLUTION``
  (markers included) become ``# YOUR CODE HERE`` and
  ``raise NotImplementedError(...)``, at the indentation of the BEGIN marker;
* a code cell tagged ``solution`` becomes that stub entirely; a markdown (or
  raw) cell tagged ``solution`` is dropped; in a markdown cell, a marked
  region becomes "*Your answer here.*";
* an "Open in Colab" link to ``solutions/<name>.ipynb`` in a markdown cell
  (the badge every notebook opens with) is pointed at ``exercises/<name>.ipynb``,
  so that the student's badge opens the student's notebook;
* outputs and execution counts are cleared, the metadata that the
  contributors' nbstripout hook strips is stripped, and the notebook keeps its
  assignment id (``{"course": {"assignment": "<id>"}}``), which every solution
  notebook must have.

The output is a pure function of the solution file, serialised stably, so a
second ``sync`` rewrites nothing and ``sync --check`` can compare bytes.
"""

from __future__ import annotations

import argparse
import copy
import re
from dataclasses import dataclass
from pathlib import Path

from course_grader.notebook import (
    NotebookError,
    assignment_of,
    cell_source,
    dumps_notebook,
    read_notebook,
)

__all__ = ["SyncError", "make_exercise", "sync"]

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
SOLUTION_TAG = "solution"
STUB = ("# YOUR CODE HERE", 'raise NotImplementedError("Replace this line with your code.")')
MARKDOWN_STUB = "*Your answer here.*"
# What nbstripout (see .pre-commit-config.yaml) removes; removed here too so the
# hook never changes a generated file.
STRIPPED_CELL_METADATA = (
    "collapsed",
    "scrolled",
    "ExecuteTime",
    "execution",
    "heading_collapsed",
    "hidden",
)
STRIPPED_NOTEBOOK_METADATA = ("signature", "widgets")
# A Colab link to a notebook of solutions/ (Colab opens GitHub files as
# https://colab.research.google.com/github/<owner>/<repo>/blob/<branch>/<path>).
COLAB_SOLUTION_LINK = re.compile(
    r"(https://colab\.research\.google\.com/github/[^/\s()]+/[^/\s()]+/blob/[^/\s()]+/)solutions/"
)


class SyncError(ValueError):
    """A solution notebook that cannot be turned into an exercise (the message names the fix)."""


def _replace_regions(source: str, where: str, markdown: bool) -> tuple[str, int]:
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    regions = 0
    inside = False
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise SyncError(
                    f"{where}, line {number}: {BEGIN} inside another one; close it first"
                )
            inside = True
            regions += 1
            indent = line[: len(line) - len(line.lstrip())]
            if markdown:
                out.append(f"{indent}{MARKDOWN_STUB}\n")
            else:
                out.extend(f"{indent}{stub}\n" for stub in STUB)
        elif stripped == END:
            if not inside:
                raise SyncError(f"{where}, line {number}: {END} without a {BEGIN} before it")
            inside = False
        elif not inside:
            out.append(line)
        elif BEGIN in stripped or END in stripped:
            raise SyncError(f"{where}, line {number}: a marker must be alone on its line")
    if inside:
        raise SyncError(f"{where}: {BEGIN} without {END}; add the END marker")
    text = "".join(out)
    if not source.endswith("\n"):
        text = text.removesuffix("\n")
    return text, regions


def _tags(cell: dict) -> list[str]:
    tags = cell.get("metadata", {}).get("tags", [])
    return tags if isinstance(tags, list) else []


def make_exercise(solution: dict, name: str = "the notebook") -> dict:
    """The student version of a solution notebook (a new dict; the input is not changed)."""
    assignment = assignment_of(solution)
    if assignment is None:
        raise SyncError(
            f'{name} has no assignment id: add {{"course": {{"assignment": "<id>"}}}} to its '
            "notebook metadata (Edit > Notebook metadata in Jupyter), with <id> the name of "
            "its tests module in course_lib/grading/assignments/ (dashes for underscores)"
        )
    nb = copy.deepcopy(solution)
    cells = []
    regions = 0
    for index, cell in enumerate(nb["cells"]):
        where = f"{name}, cell {index}"
        tags = _tags(cell)
        metadata = cell.setdefault("metadata", {})
        for key in STRIPPED_CELL_METADATA:
            metadata.pop(key, None)
        if SOLUTION_TAG in tags:
            regions += 1
            if cell["cell_type"] != "code":
                continue  # markdown / raw solution cells are dropped
            metadata["tags"] = [t for t in tags if t != SOLUTION_TAG]
            if not metadata["tags"]:
                del metadata["tags"]
            cell["source"] = "\n".join(STUB)
        else:
            cell["source"], found = _replace_regions(
                cell_source(cell), where, markdown=cell["cell_type"] != "code"
            )
            regions += found
            if cell["cell_type"] == "markdown":
                cell["source"] = COLAB_SOLUTION_LINK.sub(r"\1exercises/", cell["source"])
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cells.append(cell)
    if regions == 0:
        raise SyncError(
            f"{name} has no solution to hide: mark code with {BEGIN} / {END}, "
            f'or tag whole cells "{SOLUTION_TAG}"'
        )
    nb["cells"] = cells
    metadata = nb.setdefault("metadata", {})
    for key in STRIPPED_NOTEBOOK_METADATA:
        metadata.pop(key, None)
    metadata.get("language_info", {}).pop("version", None)
    metadata["course"] = {"assignment": assignment}
    return nb


@dataclass(frozen=True)
class SyncResult:
    """What ``sync`` found: files that differ (or were written) and stale exercises."""

    changed: list[Path]
    stale: list[Path]
    unchanged: list[Path]


def sync(
    solutions: str | Path = "solutions", exercises: str | Path = "exercises", check: bool = False
) -> SyncResult:
    """Regenerate ``exercises/*.ipynb`` from ``solutions/*.ipynb`` (only compare when ``check``).

    An exercise with no solution of the same name, and carrying an assignment
    id (so it was generated), is stale: removed, or reported under ``check``.
    """
    solutions, exercises = Path(solutions), Path(exercises)
    if not solutions.is_dir():
        raise SyncError(
            f"no folder {solutions}/: run from the repository root, or pass --solutions DIR"
        )
    changed, unchanged, stale = [], [], []
    sources = sorted(solutions.glob("*.ipynb"))
    for src in sources:
        try:
            solution = read_notebook(src)
        except NotebookError as err:
            raise SyncError(f"{src}: {err}") from None
        text = dumps_notebook(make_exercise(solution, str(src)))
        dest = exercises / src.name
        current = dest.read_text(encoding="utf-8") if dest.is_file() else None
        if current == text:
            unchanged.append(dest)
            continue
        changed.append(dest)
        if not check:
            exercises.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
    names = {s.name for s in sources}
    for dest in sorted(exercises.glob("*.ipynb")) if exercises.is_dir() else []:
        if dest.name in names:
            continue
        try:
            generated = assignment_of(read_notebook(dest)) is not None
        except NotebookError:
            generated = False
        if generated:
            stale.append(dest)
            if not check:
                dest.unlink()
    return SyncResult(changed, stale, unchanged)


def run_cli(args: argparse.Namespace) -> int:
    """``python -m course_lib.grading sync [--check]``."""
    try:
        result = sync(args.solutions, args.exercises, check=args.check)
    except SyncError as err:
        print(f"error: {err}")
        return 2
    if args.check:
        for path in result.changed:
            print(f"{path} is out of date with its solution (or missing)")
        for path in result.stale:
            print(f"{path} has no solution notebook of the same name")
        if result.changed or result.stale:
            print("Run `python -m course_lib.grading sync` and commit exercises/.")
            return 1
        print(f"exercises/ is in sync with solutions/ ({len(result.unchanged)} notebooks)")
        return 0
    for path in result.changed:
        print(f"wrote {path}")
    for path in result.stale:
        print(f"removed {path} (no solution notebook of that name)")
    print(
        f"{len(result.changed)} written, {len(result.unchanged)} unchanged, "
        f"{len(result.stale)} removed"
    )
    return 0
