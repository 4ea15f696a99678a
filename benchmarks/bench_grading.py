"""Batch grading of 30 submissions of one assignment, wall time (issue 3's target: under 2 minutes).

The 30 submissions are 10 copies each of the solution, the untouched stub and
a wrong solution (every output of the wrong shape), all of
``ch01-lstm-cell``, graded exactly as ``python -m course_grader grade``
does: each in its own bwrap sandbox with its tests in a judge process, ``jobs``
submissions at once (default: every core).
There is no peer: the row compares the time with the goal.  ``--quick``
grades one of each kind.  ``python tests/bench_grading.py`` runs this alone.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Config

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 120.0  # issue 3: 30 submissions in under 2 minutes on the course's 2-core machine
WRONG = (
    "def lstm_step(x, h, c, *weights):\n    return x, x\n\n\n"
    "def lstm_forward(xs, h0, c0, *weights):\n    return xs, (xs[-1], xs[-1])\n"
)


def grade_submissions(
    copies: int = 10, jobs: int | None = None, hidden: bool = False, sandbox: bool = True
):
    """Grade ``copies`` x (solution, stub, wrong); returns ``(rows, seconds)``."""
    from course_grader.grade import grade_batch, write_csv
    from course_grader.notebook import read_notebook

    solution = read_notebook(ROOT / "solutions" / "ch01_lstm_cell.ipynb")
    stub = read_notebook(ROOT / "exercises" / "ch01_lstm_cell.ipynb")
    wrong = copy.deepcopy(solution)
    wrong["cells"].append(
        {
            "cell_type": "code",
            "metadata": {},
            "source": WRONG,
            "outputs": [],
            "execution_count": None,
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(copies):
            for kind, nb in (("solution", solution), ("stub", stub), ("wrong", wrong)):
                path = Path(tmp) / f"student{i:02d}_{kind}.ipynb"
                path.write_text(json.dumps(nb))
                paths.append(path)
        start = time.perf_counter()
        rows = grade_batch(
            paths,
            assignment="ch01-lstm-cell",
            hidden_dir=ROOT / "tests" / "fixtures" / "hidden_examples" if hidden else None,
            jobs=jobs,
            sandbox=sandbox,
        )
        write_csv(rows, Path(tmp) / "gradebook.csv")
        seconds = time.perf_counter() - start
    return rows, seconds


def run(cfg: Config) -> list[dict]:
    copies = 1 if cfg.quick else 10
    row = {
        "group": "grading",
        "what": f"batch grading of {3 * copies} submissions",
        "size": f"{copies} x (solution, stub, wrong) of ch01-lstm-cell, sandboxed",
        "ours": "course_grader grade_batch",
        "peer": "none (goal: under 2 minutes)",
        "metric": "time",
        "repeats": 1,
        "goal_value": GOAL_S,
        "peer_value": None,
        "unit": "s",
        "ratio": None,
        "ratio_min": None,
        "ratio_max": None,
    }
    try:
        rows, seconds = grade_submissions(copies)
    except Exception as err:  # noqa: BLE001 - a broken grader is reported, not fatal
        return [{**row, "skipped": f"{type(err).__name__}: {err}"}]
    statuses = sorted({r.status for r in rows})
    return [{**row, "ours_value": seconds, "note": f"statuses: {', '.join(statuses)}"}]
