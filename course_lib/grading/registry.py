"""Assignments and their tests: the ``@test`` decorator and how tests are found.

An assignment's visible tests live in ``course_lib/grading/assignments/<id>.py``
(dashes in the id become underscores in the module name), a module that sets
``ASSIGNMENT = "<id>"`` and defines plain functions decorated with
``@test("q1", points=2)``. A test's parameters name what it needs from the
student's notebook (``def matches_torch(lstm_step): ...``): the runner passes
the student's definitions by name. A test passes by returning (``None``),
fails by raising :class:`~course_lib.grading.expect.TestFailed` (or
``AssertionError``), and may return :class:`~course_lib.grading.expect.Partial`
for part of its points.

Hidden tests are a file ``<DIR>/<id>.py`` written the same way; they are read
from the instructor's folder at grading time and never ship with the package.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

__all__ = [
    "test",
    "TestSpec",
    "Assignment",
    "known_assignments",
    "load_assignment",
    "load_hidden_tests",
]

ASSIGNMENTS_PACKAGE = "course_lib.grading.assignments"


@dataclass(frozen=True)
class TestSpec:
    """One test: its question, points, function and the student names it needs."""

    __test__ = False  # not a pytest test class

    question: str
    points: float
    func: Callable
    hidden: bool = False

    @property
    def name(self) -> str:
        return self.func.__name__

    @property
    def id(self) -> str:
        """Column name in the gradebook, e.g. ``q1:matches_torch`` (``[hidden]`` appended)."""
        return f"{self.question}:{self.name}" + (" [hidden]" if self.hidden else "")

    @property
    def title(self) -> str:
        """What the test checks, in words (first docstring line, else the function name)."""
        doc = inspect.getdoc(self.func)
        return doc.splitlines()[0] if doc else self.name.replace("_", " ")

    @property
    def needs(self) -> list[str]:
        """Names the test takes from the student's namespace (its required parameters)."""
        return [
            p.name
            for p in inspect.signature(self.func).parameters.values()
            if p.default is inspect.Parameter.empty
        ]


def test(question: str, points: float = 1) -> Callable[[Callable], Callable]:
    """Mark a function as a test of ``question`` worth ``points``.

    >>> @test("q1", points=2)
    ... def matches_torch(lstm_step): ...
    """
    if not isinstance(question, str) or not question:
        raise TypeError(f'@test needs a question id such as "q1", got {question!r}')
    if not points > 0:
        raise ValueError(f"@test(points=...) must be positive, got {points!r}")

    def mark(func: Callable) -> Callable:
        func.__grading_test__ = (question, float(points))
        return func

    return mark


test.__test__ = False  # keep pytest from collecting the decorator if it is imported


def _collect(namespace: dict, hidden: bool) -> list[TestSpec]:
    return [
        TestSpec(obj.__grading_test__[0], obj.__grading_test__[1], obj, hidden)
        for obj in namespace.values()
        if callable(obj) and hasattr(obj, "__grading_test__")
    ]


@dataclass
class Assignment:
    """An assignment: its id, title and tests (visible first, then hidden, by question)."""

    id: str
    title: str
    tests: list[TestSpec] = field(default_factory=list)

    @property
    def questions(self) -> list[str]:
        """Question ids in the order their first test appears."""
        return list(dict.fromkeys(t.question for t in self.tests))

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests)

    def for_question(self, question: str, hidden: bool = False) -> list[TestSpec]:
        return [t for t in self.tests if t.question == question and (hidden or not t.hidden)]

    def with_hidden(self, hidden: list[TestSpec]) -> Assignment:
        """A copy with ``hidden`` tests added, ordered by question (visible before hidden)."""
        every = [*self.tests, *hidden]
        questions = dict.fromkeys(t.question for t in every)
        tests = [t for q in questions for t in every if t.question == q]
        return Assignment(self.id, self.title, tests)


def module_name(assignment_id: str) -> str:
    """``ch01-lstm-cell`` -> ``course_lib.grading.assignments.ch01_lstm_cell``."""
    return f"{ASSIGNMENTS_PACKAGE}.{assignment_id.replace('-', '_')}"


def known_assignments() -> list[str]:
    """Ids of every assignment with tests in the package, sorted."""
    package = importlib.import_module(ASSIGNMENTS_PACKAGE)
    ids = []
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            module = importlib.import_module(f"{ASSIGNMENTS_PACKAGE}.{info.name}")
            ids.append(getattr(module, "ASSIGNMENT", info.name.replace("_", "-")))
    return sorted(ids)


def load_assignment(assignment_id: str) -> Assignment:
    """The assignment ``assignment_id`` with its visible tests.

    Raises ``KeyError`` naming the known assignments when there is none.
    """
    try:
        module: ModuleType = importlib.import_module(module_name(assignment_id))
    except ModuleNotFoundError as err:
        if err.name != module_name(assignment_id):
            raise
        raise KeyError(
            f"no tests for assignment {assignment_id!r}: known assignments are "
            f"{', '.join(known_assignments()) or 'none'}; an instructor adds one as "
            f"course_lib/grading/assignments/{assignment_id.replace('-', '_')}.py"
        ) from None
    declared = getattr(module, "ASSIGNMENT", None)
    if declared != assignment_id:
        raise KeyError(
            f"{module.__name__} declares ASSIGNMENT = {declared!r}, not {assignment_id!r}"
        )
    tests = _collect(vars(module), hidden=False)
    title = getattr(module, "TITLE", assignment_id)
    return Assignment(assignment_id, title, tests)


def load_hidden_tests(source: str, filename: str = "<hidden tests>") -> list[TestSpec]:
    """The tests defined by the source text of a hidden-tests file."""
    namespace: dict = {"__name__": "course_lib_hidden_tests", "__file__": filename}
    exec(compile(source, filename, "exec"), namespace)
    return [
        TestSpec(t.question, t.points, t.func, hidden=True)
        for t in _collect(namespace, hidden=True)
    ]


def hidden_tests_file(hidden_dir: str | Path | None, assignment_id: str) -> Path | None:
    """``<hidden_dir>/<assignment_id>.py`` when it exists."""
    if hidden_dir is None:
        return None
    path = Path(hidden_dir) / f"{assignment_id}.py"
    return path if path.is_file() else None
