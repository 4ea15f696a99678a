"""The grader as a Gradescope autograder: ``run_autograder`` writes ``results.json``.

Gradescope runs ``/autograder/run_autograder`` in a fresh container per
submission, with the student's files in ``/autograder/submission/`` and
expects ``/autograder/results/results.json`` (its "autograder specification").
``python -m course_lib.grading gradescope --setup DIR --assignment ID`` writes
the two files the autograder zip needs (``setup.sh``, ``run_autograder``);
the zip also holds a copy of this repository as ``course/`` and, optionally,
the hidden tests as ``hidden/<assignment>.py``.

``run_autograder`` calls ``python -m course_lib.grading gradescope
--assignment ID``, which grades the notebook found in the submission folder
and writes one Gradescope test per course test: its score, its maximum, its
visibility and its output (the same message as the feedback file). Hidden
tests have visibility ``hidden`` (students never see them; instructors do),
and their output says only passed or failed, as in the feedback. The
top-level ``output`` gives the status and reason.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from course_grader.grade import grade_batch
from course_grader.sandbox import SandboxUnavailable

__all__ = ["results", "run", "write_setup"]

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, when the autograder image is built.
set -euo pipefail
apt-get update
apt-get install -y python3 python3-pip bubblewrap
pip3 install /autograder/source/course
"""
RUN = """#!/usr/bin/env bash
# Gradescope runs this once per submission.
cd /autograder/source
hidden=()
[ -d hidden ] && hidden=(--hidden hidden)
exec python3 -m course_lib.grading gradescope --assignment {assignment} "${{hidden[@]}}"
"""


def results(row) -> dict:
    """Gradescope's ``results.json`` for one graded row (see the module docstring)."""
    tests = []
    if row.spec is not None:
        for number, t in enumerate(row.spec.tests, start=1):
            earned = row.earned.get(t.id, 0.0)
            passed = earned >= t.points
            message = row.messages.get(t.id, "")
            title = "hidden test" if t.hidden else t.title
            tests.append(
                {
                    "name": f"{t.id}: {title}" if not t.hidden else t.id,
                    "number": str(number),
                    "score": earned,
                    "max_score": t.points,
                    "visibility": "hidden" if t.hidden else "visible",
                    "output": ("passed" if passed else message or "failed"),
                }
            )
    output = f"Status: {row.status}" + (f" ({row.reason})" if row.reason else "")
    return {"score": round(row.score, 6), "output": output, "tests": tests}


def _notebook(folder: Path) -> Path | None:
    found = sorted(folder.rglob("*.ipynb"))
    found = [p for p in found if ".ipynb_checkpoints" not in p.parts]
    return found[0] if found else None


def run(assignment: str, submission_dir: str, out: str, hidden: str | None) -> int:
    """Grade the notebook in ``submission_dir``; write ``results.json`` to ``out``."""
    path = _notebook(Path(submission_dir))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    if path is None:
        data = {"score": 0, "output": "No .ipynb file was submitted.", "tests": []}
        Path(out).write_text(json.dumps(data, indent=1))
        return 0
    kwargs = {"assignment": assignment, "hidden_dir": hidden, "jobs": 1}
    try:
        (row,) = grade_batch([path], **kwargs)
    except SandboxUnavailable as err:
        # Gradescope's container is the submission's own; its logs (this) go to instructors only.
        print(f"no sandbox here ({err}); grading without it", file=sys.stderr)
        (row,) = grade_batch([path], sandbox=False, **kwargs)
    Path(out).write_text(json.dumps(results(row), indent=1))
    return 0


def write_setup(folder: str, assignment: str) -> list[Path]:
    """Write ``setup.sh`` and ``run_autograder`` for ``assignment`` into ``folder``."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("setup.sh", SETUP), ("run_autograder", RUN.format(assignment=assignment))):
        path = target / name
        path.write_text(text)
        os.chmod(path, 0o755)
        written.append(path)
    return written


def run_cli(args) -> int:
    if args.setup:
        for path in write_setup(args.setup, args.assignment):
            print(f"wrote {path}")
        return 0
    return run(args.assignment, args.submission_dir, args.results, args.hidden)
