"""Graded exercises: student self-checks, exercise generation and batch grading.

In an exercise notebook, after the standard opening cells::

    from course_lib.grading import checker

    check = checker("ch01-lstm-cell")

then ``check("q1")`` after question 1 runs its visible tests and says, per
test, PASS or what was expected. This is the student's side of grading, all a
student's install needs: :mod:`~course_lib.grading.registry` (``@test``,
assignments), :mod:`~course_lib.grading.expect` (comparisons with messages),
:mod:`~course_lib.grading.runner` (one test, any outcome),
:mod:`~course_lib.grading.check` (the student's ``check``) and
``assignments/`` (the visible tests). The hidden tests are never here.

The instructor's side (``sync``, ``grade``, the judge, the sandbox, the
gradebooks) is the separate package :mod:`course_grader`
(``pip install "course-lib[grader]"``; ``python -m course_grader ...``). Nothing
here imports it.
"""

from course_lib.grading.check import check, checker
from course_lib.grading.expect import Partial, TestFailed, fail
from course_lib.grading.registry import test

__all__ = ["check", "checker", "test", "Partial", "TestFailed", "fail"]
