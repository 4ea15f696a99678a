"""What ``grade`` writes after grading, and the ``gradebook`` command (the course's merge).

With none of ``--roster``, ``--due``, ``--overrides``, ``grade`` writes the
per-file gradebook of :func:`course_grader.grade.write_csv`. With any of
them it writes the class gradebook (:mod:`~course_grader.gradebook`): a
row per student, with raw score, adjustment, days late, penalty and final
score; the feedback files then also say what was adjusted and what being late
cost. ``--report`` writes the class report (:mod:`~course_grader.report`).
"""

from __future__ import annotations

import argparse
from collections import Counter
from datetime import timedelta
from pathlib import Path

from course_grader import gradebook, late, overrides, roster
from course_grader.report import write_report
from course_grader.results import _columns, read_notebook_quietly, write_csv, write_feedback

__all__ = ["class_options_given", "write_outputs", "run_gradebook_cli"]


def class_options_given(args: argparse.Namespace) -> bool:
    return bool(args.roster or args.due or args.overrides)


def _policy(args: argparse.Namespace) -> late.LatePolicy | None:
    if not args.due:
        if args.extensions:
            raise SystemExit("error: --extensions needs --due (the deadline they extend)")
        return None
    extensions = late.read_extensions(args.extensions) if args.extensions else {}
    return late.LatePolicy(
        due=late.parse_time(args.due, "--due"),
        grace=timedelta(minutes=args.grace_minutes),
        per_day=args.penalty_per_day,
        cap=args.penalty_cap,
        extensions=extensions,
    )


def build_class_rows(args: argparse.Namespace, rows: list) -> list[gradebook.ClassRow]:
    """The class rows of a batch, from the command line's roster, deadline and overrides."""
    files = [r.submission for r in rows]
    times = late.submission_times(files, args.times)
    adjustments = overrides.read_overrides(args.overrides) if args.overrides else []
    students = matching = None
    if args.roster:
        students = roster.read_roster(args.roster)
        ids = {f: roster.student_of_notebook(read_notebook_quietly(f)) for f in files}
        matching = roster.match_files(students, files, ids)
    graded = Counter(r.assignment for r in rows if r.spec is not None)
    aid = args.assignment or (graded.most_common(1)[0][0] if graded else "")
    specs = [r.spec for r in rows if r.spec is not None and r.assignment == aid]
    most = specs[0].max_score if specs else None
    return gradebook.class_rows(
        rows, students, matching, times, _policy(args), adjustments, aid, most
    )


def crows_overrides(args: argparse.Namespace) -> list[overrides.Override]:
    return overrides.read_overrides(args.overrides) if args.overrides else []


def _feedback_extra(crows: list[gradebook.ClassRow]) -> dict[str, list[str]]:
    extra = {}
    for c in crows:
        if c.row is None:
            continue
        lines = [f"Adjusted by your instructor: {o.describe()}" for o in c.applied]
        if c.late_days:
            lines.append(
                f"Late by {c.late_days} day{'s' * (c.late_days != 1)}: penalty "
                f"{gradebook._fmt(c.penalty)}; final score {gradebook._fmt(c.final)} / "
                f"{gradebook._fmt(c.max_score)}"
            )
        elif c.applied:
            lines.append(f"Final score {gradebook._fmt(c.final)} / {gradebook._fmt(c.max_score)}")
        extra[c.row.submission] = lines
    return extra


def write_outputs(args: argparse.Namespace, rows: list) -> list[str]:
    """Write the gradebook, feedback and report ``args`` asks for; lines for the summary."""
    notes = []
    crows = None
    if class_options_given(args):
        crows = build_class_rows(args, rows)
        tests = [c[0] for c in _columns(rows)]
        gradebook.write_class_csv(crows, args.csv, tests)
        missing = [c.student.id for c in crows if c.student and c.row is None]
        unmatched = [c.row.submission for c in crows if c.note.startswith("unmatched")]
        if missing:
            notes.append(f"Missing ({len(missing)}): {', '.join(missing)}")
        for c in crows:
            if c.note:
                notes.append(f"{c.row.submission}: {c.note}")
        if unmatched:
            notes.append(f"Unmatched files ({len(unmatched)}) have rows of their own.")
        known = {c.student.id for c in crows if c.student} | {
            Path(c.row.submission).name for c in crows if c.row is not None
        }
        unused = sorted({o.student for o in crows_overrides(args) if o.student not in known})
        if unused:
            notes.append(
                f"Overrides for no student of this batch (check the ids): {', '.join(unused)}"
            )
    else:
        write_csv(rows, args.csv)
    if args.feedback:
        write_feedback(rows, args.feedback, _feedback_extra(crows) if crows else {})
    if args.report:
        crows = crows or gradebook.class_rows(rows, None, None, {})
        write_report(crows, args.report, f"Class report: {args.assignment or 'assignments'}")
    return notes


def _weights(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        aid, _, w = item.partition("=")
        try:
            out[aid] = float(w)
        except ValueError:
            raise SystemExit(f"error: --weight {item}: write ASSIGNMENT=NUMBER") from None
    return out


def run_gradebook_cli(args: argparse.Namespace) -> int:
    """``python -m course_lib.grading gradebook``: merge class gradebooks, export."""
    rows, assignments = gradebook.merge(args.gradebooks, _weights(args.weight))
    gradebook.write_course_csv(rows, assignments, args.out)
    print(f"Course gradebook: {args.out} ({len(rows)} students x {len(assignments)} assignments)")
    if args.canvas:
        students = roster.read_roster(args.roster) if args.roster else []
        gradebook.write_canvas(rows, assignments, args.canvas, students)
        print(f"Canvas import: {args.canvas}")
    if args.moodle:
        gradebook.write_moodle(rows, assignments, args.moodle)
        print(f"Moodle import: {args.moodle}")
    return 0


def add_class_options(p: argparse.ArgumentParser) -> None:
    """The ``grade`` options of a whole class (roster, deadline, overrides, report)."""
    p.add_argument("--roster", help="CSV of the class (id,name,email): a row per student")
    p.add_argument("--due", help="deadline, ISO 8601 (2026-03-01T23:59+01:00)")
    p.add_argument("--grace-minutes", type=float, default=0, help="minutes late for free")
    p.add_argument(
        "--penalty-per-day", type=float, default=10, help="%% of the score per day late (10)"
    )
    p.add_argument("--penalty-cap", type=float, default=100, help="at most this %% (100)")
    p.add_argument("--extensions", help="CSV student,due: a student's own deadline")
    p.add_argument("--times", help="CSV file,submitted: when each file was submitted (else mtime)")
    p.add_argument("--overrides", help="CSV student,assignment,test,points,comment")
    p.add_argument("--report", metavar="HTML", help="write the class report (one HTML page)")


def add_gradebook_command(sub) -> None:
    p = sub.add_parser("gradebook", help="merge class gradebooks into the course's; export")
    p.add_argument("gradebooks", nargs="+", metavar="CLASS.csv")
    p.add_argument("--out", required=True, help="the course gradebook to write")
    p.add_argument("--weight", action="append", default=[], metavar="ASSIGNMENT=W")
    p.add_argument("--canvas", help="write Canvas's gradebook import CSV here")
    p.add_argument("--roster", help="the roster (for Canvas's ID and Section columns)")
    p.add_argument("--moodle", help="write Moodle's grade import CSV here")
    p.set_defaults(run=run_gradebook_cli)


def add_gradescope_command(sub) -> None:
    from course_grader import gradescope

    p = sub.add_parser("gradescope", help="grade one submission as Gradescope's autograder")
    p.add_argument("--assignment", required=True)
    p.add_argument("--submission-dir", default="/autograder/submission")
    p.add_argument("--results", default="/autograder/results/results.json")
    p.add_argument("--hidden", metavar="DIR")
    p.add_argument("--setup", metavar="DIR", help="write setup.sh and run_autograder here")
    p.set_defaults(run=gradescope.run_cli)


__all__ += ["build_class_rows", "add_class_options", "add_gradebook_command"]
__all__ += ["add_gradescope_command"]
