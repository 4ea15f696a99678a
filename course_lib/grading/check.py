"""``check("q1")`` in a student's notebook: run one question's visible tests, explain failures.

The notebook sets it up once, right after the standard opening cells::

    from course_lib.grading import checker

    check = checker("ch01-lstm-cell")

and calls ``check("q1")`` after each question. ``check`` finds the student's
definitions in the namespace of the code that called it (the notebook's
globals, locally or in Colab), runs the question's visible tests on the CPU,
and prints one line per test: PASS, or FAIL with what was expected. It never
raises and never shows a traceback into the library. Under the batch grader
(environment variable ``COURSE_GRADING=1``) it does nothing, because the
grader runs every test itself.
"""

from __future__ import annotations

import inspect
import os

from course_lib.grading.registry import load_assignment
from course_lib.grading.runner import TestResult, run_test

__all__ = ["Checker", "checker", "check"]

HIDDEN_NOTE = (
    "These are the visible tests only: when your work is graded, hidden tests "
    "may also count towards your score."
)


def _points(x: float) -> str:
    return f"{x:g}"


def _report(assignment_id: str, question: str, results: list[TestResult]) -> str:
    lines = [f"{assignment_id}, question {question}:"]
    width = max(len(r.spec.title) for r in results)
    for r in results:
        verdict = "PASS" if r.passed else ("PART" if r.fraction > 0 else "FAIL")
        lines.append(
            f"  {verdict}  {r.spec.title:<{width}}  {_points(r.earned)}/{_points(r.spec.points)}"
        )
        if r.message and not r.passed:
            lines.append(f"        {r.message}")
    earned = sum(r.earned for r in results)
    total = sum(r.spec.points for r in results)
    lines.append(f"{question}: {_points(earned)}/{_points(total)} points from the visible tests.")
    lines.append(HIDDEN_NOTE)
    return "\n".join(lines)


def _caller_namespace(depth: int) -> dict:
    frame = inspect.currentframe()
    try:
        for _ in range(depth + 1):
            frame = frame.f_back
        return frame.f_globals
    finally:
        del frame


def check(question: str, assignment: str, namespace: dict | None = None) -> list[TestResult]:
    """Run ``question``'s visible tests of ``assignment`` on ``namespace`` and print the verdicts.

    ``namespace`` defaults to the globals of the caller (the notebook). Returns
    the results (an empty list when nothing was run).
    """
    if os.environ.get("COURSE_GRADING") == "1":
        return []
    if namespace is None:
        namespace = _caller_namespace(1)
    try:
        spec = load_assignment(assignment)
    except KeyError as err:
        print(
            f"check: {err.args[0]}. Is course_lib up to date? In Colab, rerun the first cell; "
            "locally, `pip install -e .` from the course repository."
        )
        return []
    tests = spec.for_question(question)
    if not tests:
        print(
            f"check: assignment {assignment!r} has no question {question!r}; "
            f"its questions are {', '.join(spec.questions)}."
        )
        return []
    results = [run_test(t, namespace) for t in tests]
    print(_report(assignment, question, results))
    return results


class Checker:
    """``check`` bound to one assignment: ``check("q1")`` runs question q1's visible tests."""

    def __init__(self, assignment: str) -> None:
        self.assignment = assignment

    def __call__(self, question: str) -> None:
        check(question, self.assignment, namespace=_caller_namespace(1))

    def __repr__(self) -> str:
        return f'checker("{self.assignment}")'


def checker(assignment: str) -> Checker:
    """The ``check`` function of ``assignment``, for a notebook: ``check = checker("<id>")``."""
    if os.environ.get("COURSE_GRADING") != "1":
        try:
            load_assignment(assignment)  # say so now, with the known ids, on a typo
        except KeyError as err:
            print(f"checker: {err.args[0]}")
    return Checker(assignment)
