"""Benchmark (not a test): grade 30 submissions of one assignment and print the wall time.

Run from the repository root::

    python tests/bench_grading.py [--jobs N] [--hidden]

The 30 submissions are 10 copies each of the solution, the untouched stub and
a wrong solution (every output of the wrong shape), all of ``ch01-lstm-cell``,
graded exactly as ``python -m course_lib.grading grade`` does: each in its own
bwrap sandbox, with its tests in a judge process (pass ``--no-sandbox`` to
compare). The target (issues 3 and 13) is under 2 minutes on the course's
2-core machine, sandbox included.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

from course_lib.grading.grade import grade_batch, summary, write_csv
from course_lib.grading.notebook import read_notebook

ROOT = Path(__file__).resolve().parents[1]
WRONG = (
    "def lstm_step(x, h, c, *weights):\n    return x, x\n\n\n"
    "def lstm_forward(xs, h0, c0, *weights):\n    return xs, (xs[-1], xs[-1])\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="default: the number of cores")
    parser.add_argument("--hidden", action="store_true", help="also run the example hidden tests")
    parser.add_argument("--no-sandbox", action="store_true", help="grade without bubblewrap")
    args = parser.parse_args()
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
        for i in range(10):
            for kind, nb in (("solution", solution), ("stub", stub), ("wrong", wrong)):
                path = Path(tmp) / f"student{i:02d}_{kind}.ipynb"
                path.write_text(json.dumps(nb))
                paths.append(path)
        start = time.perf_counter()
        rows = grade_batch(
            paths,
            assignment="ch01-lstm-cell",
            hidden_dir=ROOT / "tests" / "fixtures" / "hidden_examples" if args.hidden else None,
            jobs=args.jobs,
            sandbox=not args.no_sandbox,
        )
        write_csv(rows, Path(tmp) / "gradebook.csv")
        seconds = time.perf_counter() - start
    print(summary(rows, seconds))
    print(f"\n{len(rows)} submissions graded in {seconds:.1f} s ({seconds / len(rows):.2f} s each)")


if __name__ == "__main__":
    main()
