"""The class gradebook: one row per student, late penalties, adjustments, and the course total.

:func:`class_rows` turns the graded rows of one assignment into one
:class:`ClassRow` per roster student (``missing``, 0, when no file is theirs),
plus one per unmatched file; each shows the autograded score, the
instructor's adjustment, the raw score, the days late, the penalty and the
final score. :func:`write_class_csv` writes it.

:func:`merge` reads several assignments' class gradebooks into a course
gradebook (student x assignment, in percent, with a weighted total);
:func:`write_canvas` and :func:`write_moodle` write the files Canvas's and
Moodle's gradebook imports read.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from course_grader.late import LatePolicy
from course_grader.overrides import Override, apply_overrides
from course_grader.roster import Matching, Student

__all__ = ["ClassRow", "class_rows", "write_class_csv", "merge", "write_canvas", "write_moodle"]


@dataclass
class ClassRow:
    """One student's line for one assignment (or an unmatched file's)."""

    student: Student | None
    row: object | None  # the graded grade.Row; None when nothing was submitted
    assignment: str
    max_score: float | None
    submitted: datetime | None = None
    autograded: float = 0.0
    raw: float = 0.0
    late_days: int = 0
    penalty: float = 0.0
    applied: list[Override] = field(default_factory=list)
    note: str = ""  # unmatched or superseded files

    @property
    def status(self) -> str:
        return self.row.status if self.row is not None else "missing"

    @property
    def final(self) -> float:
        return round(self.raw - self.penalty, 6)


def _latest(paths: list[str], times: dict[str, datetime]) -> tuple[str, list[str]]:
    never = datetime.min.replace(tzinfo=timezone.utc)
    ordered = sorted(paths, key=lambda p: (times.get(p) or never, p))
    return ordered[-1], ordered[:-1]


def _score(
    row, student_id: str, times, policy: LatePolicy | None, overrides: list[Override]
) -> ClassRow:
    autograded = row.score
    applied = apply_overrides(row, student_id, overrides)
    raw = min(max(row.score + row.bonus, 0.0), row.max_score or 0.0)
    out = ClassRow(None, row, row.assignment, row.max_score, times.get(row.submission))
    out.autograded, out.raw, out.applied = autograded, round(raw, 6), applied
    if policy is not None:
        out.late_days = policy.days_late(out.submitted, student_id)
        out.penalty = round(raw * policy.penalty_percent(out.late_days) / 100, 6)
    return out


def class_rows(
    rows: list,
    students: list[Student] | None,
    matching: Matching | None,
    times: dict[str, datetime],
    policy: LatePolicy | None = None,
    overrides: list[Override] = (),
    assignment: str = "",
    max_score: float | None = None,
) -> list[ClassRow]:
    """A row per roster student (roster order), then one per unmatched file (see module doc).

    Without a roster, a row per graded file, the file's name standing for the
    student in ``overrides``.
    """
    by_file = {r.submission: r for r in rows}
    out: list[ClassRow] = []
    if students is None:
        for r in rows:
            c = _score(r, Path(r.submission).name, times, policy, overrides)
            out.append(c)
        return out
    assert matching is not None
    for s in students:
        paths = [p for p in matching.files.get(s.id, []) if p in by_file]
        if not paths:
            out.append(ClassRow(s, None, assignment, max_score))
            continue
        chosen, older = _latest(paths, times)
        c = _score(by_file[chosen], s.id, times, policy, overrides)
        c.student = s
        if older:
            c.note = "superseded: " + ", ".join(older)
        out.append(c)
    for path, why in sorted(matching.unmatched.items()):
        if path in by_file:
            c = _score(by_file[path], Path(path).name, times, policy, overrides)
            c.note = f"unmatched: {why}"
            out.append(c)
    return out


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{round(x, 4):g}"


def _safe(text: str) -> str:
    """Text for a CSV cell that a spreadsheet will not run as a formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


HEAD = ["student", "name", "email", "submission", "submitted", "assignment", "status"]
SCORES = ["autograded", "adjustment", "raw", "late_days", "penalty", "final", "max_score"]


def write_class_csv(crows: list[ClassRow], path: str | Path, tests: list[str]) -> None:
    """The class gradebook of one assignment: a row per student, then unmatched files."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow([*HEAD, *SCORES, *tests, "stopped_by", "reason", "adjustments", "note"])
        for c in crows:
            s, r = c.student, c.row
            when = c.submitted.isoformat(timespec="minutes") if c.submitted else ""
            head = [s.id if s else "", s.name if s else "", s.email if s else ""]
            head += [_safe(r.submission) if r else "", when, c.assignment, c.status]
            adjustment = c.raw - c.autograded
            scores = [c.autograded, adjustment, c.raw, c.late_days, c.penalty, c.final]
            cells = [_fmt(r.earned.get(t)) if r else "0" for t in tests]
            tail = [r.stopped_by if r else "", _safe(r.reason) if r else "no file submitted"]
            tail += ["; ".join(o.describe() for o in c.applied), c.note]
            out.writerow(
                [*head, *(_fmt(x) for x in scores), _fmt(c.max_score), *cells, *map(_safe, tail)]
            )


# -- the course gradebook ------------------------------------------------------------------------


def merge(paths: list[str | Path], weights: dict[str, float]) -> tuple[list[dict], list[str]]:
    """Class gradebooks of several assignments -> (a row per student, assignment ids).

    Each row: ``student``, ``name``, ``email``, then per assignment its final
    score and max (``<id>``, ``<id>:max``) and percent (``<id> %``), and
    ``total %``: the weighted mean of the percents (weight 1 unless
    ``weights`` says otherwise; a missing assignment counts 0).
    """
    students: dict[str, dict] = {}
    assignments: list[str] = []
    for path in paths:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if rows and "final" not in rows[0]:
            raise SystemExit(
                f"error: {path} is not a class gradebook (no 'final' column): grade with "
                "--roster to write one"
            )
        for r in rows:
            if not r["student"]:
                continue  # an unmatched file: listed in its own gradebook
            aid = r["assignment"]
            if aid and aid not in assignments:
                assignments.append(aid)
            entry = students.setdefault(
                r["student"], {"student": r["student"], "name": r["name"], "email": r["email"]}
            )
            entry[aid] = float(r["final"] or 0)
            entry[f"{aid}:max"] = float(r["max_score"] or 0)
    unknown = sorted(set(weights) - set(assignments))
    if unknown:
        raise SystemExit(f"error: --weight names {', '.join(unknown)}, not in these gradebooks")
    for entry in students.values():
        total = weight_sum = 0.0
        for aid in assignments:
            most = entry.get(f"{aid}:max") or 0.0
            pct = 100 * entry.get(aid, 0.0) / most if most else 0.0
            entry[f"{aid} %"] = round(pct, 2)
            w = weights.get(aid, 1.0)
            total, weight_sum = total + w * pct, weight_sum + w
        entry["total %"] = round(total / weight_sum, 2) if weight_sum else 0.0
    return list(students.values()), assignments


def write_course_csv(rows: list[dict], assignments: list[str], path: str | Path) -> None:
    columns = ["student", "name", "email"]
    for aid in assignments:
        columns += [aid, f"{aid}:max", f"{aid} %"]
    columns.append("total %")
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, columns, lineterminator="\n", restval="0")
        out.writeheader()
        for r in rows:
            out.writerow({k: _safe(v) if isinstance(v, str) else _fmt(v) for k, v in r.items()})


def write_canvas(rows: list[dict], assignments: list[str], path, roster: list[Student]) -> None:
    """Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, a column per
    assignment (points), a 'Points Possible' row first. The roster's optional ``canvas_id``
    fills ID; its ``id`` is the SIS User ID and its ``email`` the SIS Login ID."""
    extra = {s.id: s.extra for s in roster}
    most = {a: max((r.get(f"{a}:max") or 0.0 for r in rows), default=0.0) for a in assignments}
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *assignments])
        out.writerow(["Points Possible", "", "", "", "", *(_fmt(most[a]) for a in assignments)])
        for r in rows:
            info = extra.get(r["student"], {})
            head = [r["name"], info.get("canvas_id", ""), r["student"], r["email"]]
            head.append(info.get("section", ""))
            out.writerow([*map(_safe, head), *(_fmt(r.get(a, 0.0)) for a in assignments)])


def write_moodle(rows: list[dict], assignments: list[str], path) -> None:
    """Moodle's grade import (map 'Email address' to the user's email): points per assignment."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(["Email address", *assignments])
        for r in rows:
            out.writerow([_safe(r["email"]), *(_fmt(r.get(a, 0.0)) for a in assignments)])
