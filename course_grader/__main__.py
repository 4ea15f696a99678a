"""Command line: ``python -m course_grader sync [--check]``, ``... grade SUB.ipynb ...``,
``... gradebook CLASS.csv ... --out course.csv`` and ``... gradescope --assignment ID``."""

from __future__ import annotations

import argparse
import sys

from course_grader import grade, outputs, sync


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course_grader",
        description="Generate exercises from solutions, and grade submitted notebooks.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("sync", help="regenerate exercises/ from solutions/")
    p.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 naming the exercises that differ",
    )
    p.add_argument("--solutions", default="solutions", help="folder of solution notebooks")
    p.add_argument("--exercises", default="exercises", help="folder of generated exercises")
    p.set_defaults(run=sync.run_cli)

    p = sub.add_parser("grade", help="grade submitted notebooks into a CSV gradebook")
    p.add_argument("submissions", nargs="+", metavar="SUBMISSION.ipynb")
    p.add_argument("--csv", required=True, help="the gradebook to write")
    p.add_argument("--assignment", help="grade every notebook as this assignment id")
    p.add_argument("--hidden", metavar="DIR", help="folder of hidden tests, DIR/<assignment>.py")
    p.add_argument("--feedback", metavar="DIR", help="write one feedback .txt per submission")
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="wall-clock seconds for a submission's code cells to run (default 60)",
    )
    p.add_argument(
        "--call-timeout",
        type=float,
        default=10.0,
        help="wall-clock seconds for each call of a student's function by a test (default 10)",
    )
    p.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run submissions without the bubblewrap sandbox: only for a class you trust "
        "(their code could then read and write your files and use the network)",
    )
    p.add_argument(
        "--memory-mb",
        type=int,
        default=2048,
        help="memory per submission in MB, 0 for none (default 2048): resident memory of its "
        "processes where the machine has control groups (root, or a delegated cgroup), and "
        "writable memory per process everywhere; never address space (a CUDA torch maps GBs)",
    )
    p.add_argument(
        "--cpus",
        type=float,
        default=1.0,
        help="cores one submission may use at once, 0 for no quota (default 1; needs control "
        "groups; its processes are niced everywhere)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="submissions graded at once (default: the number of CPU cores)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress line per submission")
    outputs.add_class_options(p)
    p.set_defaults(run=grade.run_cli)
    outputs.add_gradebook_command(sub)
    outputs.add_gradescope_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
