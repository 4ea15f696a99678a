"""The instructor's grader: exercises from solutions, batch grading, gradebooks and exports.

A student never imports this package: the notebook's ``check("q1")`` is
:mod:`course_lib.grading` (the registry, the expectations, the visible tests).
This package is the instructor's side, installed with ``pip install
"course-lib[grader]"`` and run as ``course-grader`` or ``python -m course_grader``::

    python -m course_grader sync [--check]
    python -m course_grader grade SUBMISSION.ipynb ... --csv gradebook.csv [--hidden DIR]
    python -m course_grader gradebook CLASS.csv ... --out course.csv [--canvas canvas.csv]
    python -m course_grader gradescope --assignment ID

The folder boundary is the trust boundary: :mod:`course_grader.sandboxed` is
the only part of this package bound into a submission's sandbox (with
``course_lib``); everything else runs in trusted processes.

Modules: :mod:`~course_grader.sync` (solutions to exercises),
:mod:`~course_grader.notebook` (reading notebooks),
:mod:`~course_grader.grade` (batch grading: one row per file, always),
:mod:`~course_grader.catalog` (the batch's assignments, hidden tests and solutions),
:mod:`~course_grader.results` (a submission's row; the CSV, feedback and summary),
:mod:`~course_grader.events` (what grade and the judge say to each other),
:mod:`~course_grader.judge` (one submission's tests, in a trusted process),
:mod:`~course_grader.remote` (the judge's proxies of the student's functions),
:mod:`~course_grader.process` (the student process's life: start, limits, end),
:mod:`~course_grader.sandbox` (bubblewrap),
:mod:`~course_grader.cgroup` (memory and CPU share per submission),
:mod:`~course_grader.flags` (what is worth the instructor's look);
inside the sandbox, :mod:`~course_grader.sandboxed.student` (the student's code,
alone), :mod:`~course_grader.sandboxed.rlimits` (its own resource limits),
:mod:`~course_grader.sandboxed.wire` (plain data between the two) and
:mod:`~course_grader.sandboxed.messages` (the limits and messages both sides share);
for a whole class, :mod:`~course_grader.roster` (who submitted what),
:mod:`~course_grader.late` (deadlines), :mod:`~course_grader.overrides`
(adjustments by hand), :mod:`~course_grader.gradebook` (the class and course
gradebooks, Canvas and Moodle files), :mod:`~course_grader.report` (the
HTML class report), :mod:`~course_grader.outputs` (what ``grade`` writes)
and :mod:`~course_grader.gradescope` (Gradescope's autograder).

This ``__init__`` imports nothing: it is bound into the sandbox beside
``sandboxed/``, and a student process must not load the judge's modules.
"""
