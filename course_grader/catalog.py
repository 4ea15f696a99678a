"""The assignments one batch grades: their visible tests, the instructor's hidden tests,
the published solutions (for the copies-solution flag), and the :class:`Redactor` that
keeps the tests' source out of what a student reads.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import threading
from pathlib import Path

from course_grader.notebook import NotebookError, assignment_of, read_notebook
from course_lib.grading.registry import (
    Assignment,
    hidden_tests_file,
    known_assignments,
    load_assignment,
    load_hidden_tests,
    module_name,
)

__all__ = ["Redactor"]

#: The checkout's published solutions (for the copies-solution flag); absent in an install.
SOLUTIONS_DIR = Path(__file__).resolve().parents[1] / "solutions"


class Redactor:
    """Blanks out any piece of a hidden test's source that would appear in grading output.

    The pieces are every line of the hidden tests' files and every string in
    them (at least 8 characters), except those the public tests module shows
    anyway. The grader never puts hidden text in a row; this is the second
    lock, for text a submission produced (an error message, a returned value).
    """

    MIN_LENGTH = 8

    def __init__(self, hidden_sources: list[str] = (), public_sources: list[str] = ()) -> None:
        public = "\n".join(public_sources)
        pieces: set[str] = set()
        for source in hidden_sources:
            pieces.update(line.strip() for line in source.splitlines())
            try:
                tree = ast.parse(source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    pieces.update(p.strip() for p in node.value.splitlines())
                    pieces.add(node.value)
        self.pieces = sorted(
            (p for p in pieces if len(p.strip()) >= self.MIN_LENGTH and p not in public),
            key=len,
            reverse=True,
        )

    def __call__(self, text: str) -> str:
        for piece in self.pieces:
            if piece in text:
                text = text.replace(piece, "[hidden]")
        return text


class _Assignments:
    """Assignments with their hidden tests, loaded once per batch."""

    def __init__(self, hidden_dir: str | Path | None) -> None:
        self.hidden_dir = hidden_dir
        self.known = known_assignments()
        self._cache: dict[str, tuple[Assignment, str | None]] = {}
        self._lock = threading.Lock()
        self.redactor = Redactor()

    def get(self, assignment_id: str) -> tuple[Assignment, str | None]:
        with self._lock:
            return self._get(assignment_id)

    def _get(self, assignment_id: str) -> tuple[Assignment, str | None]:
        if assignment_id not in self._cache:
            spec = load_assignment(assignment_id)
            source = None
            path = hidden_tests_file(self.hidden_dir, assignment_id)
            if path is not None:
                source = path.read_text(encoding="utf-8")
                try:
                    hidden = load_hidden_tests(source)
                except Exception as err:
                    raise SystemExit(
                        f"error: the hidden tests in {path} do not load "
                        f"({type(err).__name__}: {err}); fix that file and grade again"
                    ) from None
                spec = spec.with_hidden(hidden)
            self._cache[assignment_id] = (spec, source)
            self.redactor = Redactor(
                [src for _, src in self._cache.values() if src],
                [inspect.getsource(importlib.import_module(module_name(a))) for a in self._cache],
            )
        return self._cache[assignment_id]

    def solution(self, assignment_id: str) -> dict | None:
        """The published solution notebook of ``assignment_id`` (for the copies-solution flag)."""
        with self._lock:
            if not hasattr(self, "_solutions"):
                self._solutions: dict[str, dict] = {}
                for path in sorted(SOLUTIONS_DIR.glob("*.ipynb")):
                    try:
                        nb = read_notebook(path)
                    except NotebookError:
                        continue
                    aid = assignment_of(nb)
                    if aid:
                        self._solutions.setdefault(aid, nb)
            return self._solutions.get(assignment_id)

    def from_file_name(self, path: Path) -> str | None:
        name = path.name.lower().replace("_", "-")
        matches = [a for a in self.known if a in name]
        return max(matches, key=len) if matches else None
