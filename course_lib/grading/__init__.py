"""Graded exercises: student self-checks, exercise generation and batch grading.

In an exercise notebook, after the standard opening cells::

    from course_lib.grading import checker

    check = checker("ch01-lstm-cell")

then ``check("q1")`` after question 1 runs its visible tests and says, per
test, PASS or what was expected. Instructors use the command line::

    python -m course_lib.grading sync [--check]
    python -m course_lib.grading grade SUBMISSION.ipynb ... --csv gradebook.csv [--hidden DIR]
    python -m course_lib.grading gradebook CLASS.csv ... --out course.csv [--canvas canvas.csv]
    python -m course_lib.grading gradescope --assignment ID

Modules: :mod:`~course_lib.grading.registry` (``@test``, assignments),
:mod:`~course_lib.grading.expect` (comparisons with messages),
:mod:`~course_lib.grading.runner` (one test, any outcome),
:mod:`~course_lib.grading.check` (the student's ``check``),
:mod:`~course_lib.grading.sync` (solutions to exercises),
:mod:`~course_lib.grading.grade` (batch grading: one row per file, always),
:mod:`~course_lib.grading.judge` (one submission's tests, in a trusted process),
:mod:`~course_lib.grading.student` (the student's code, alone in its sandbox),
:mod:`~course_lib.grading.remote` (the judge's proxies of the student's functions),
:mod:`~course_lib.grading.wire` (plain data between the two),
:mod:`~course_lib.grading.sandbox` (bubblewrap),
:mod:`~course_lib.grading.cgroup` (memory and CPU share per submission),
:mod:`~course_lib.grading.flags` (what is worth the instructor's look);
for a whole class, :mod:`~course_lib.grading.roster` (who submitted what),
:mod:`~course_lib.grading.late` (deadlines), :mod:`~course_lib.grading.overrides`
(adjustments by hand), :mod:`~course_lib.grading.gradebook` (the class and course
gradebooks, Canvas and Moodle files), :mod:`~course_lib.grading.report` (the
HTML class report), :mod:`~course_lib.grading.outputs` (what ``grade`` writes)
and :mod:`~course_lib.grading.gradescope` (Gradescope's autograder).
"""

from course_lib.grading.check import check, checker
from course_lib.grading.expect import Partial, TestFailed, fail
from course_lib.grading.registry import test

__all__ = ["check", "checker", "test", "Partial", "TestFailed", "fail"]
