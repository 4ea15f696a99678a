"""What grading produces for each submission: its :class:`Row`, and the files and summary
written from the rows (the per-file CSV gradebook, one feedback file per submission, the
summary printed at the end). :mod:`course_grader.grade` fills the rows;
:mod:`course_grader.outputs` adds the class-wide files.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from course_grader.notebook import NotebookError, read_notebook
from course_lib.grading.registry import Assignment

__all__ = ["Row", "write_csv", "write_feedback", "summary", "read_notebook_quietly"]

#: Statuses of a submission whose tests never ran.
NOT_RUN = ("invalid-notebook", "unknown-assignment", "wrong-assignment", "grader-error")


@dataclass
class Row:
    """One submission's line in the gradebook."""

    submission: str
    assignment: str
    status: str
    reason: str = ""
    spec: Assignment | None = None
    earned: dict[str, float] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)  # failed visible test -> what it called
    flags: list[str] = field(default_factory=list)
    cells_timeout: float = 60.0
    stopped_by: str = ""  # the grader's limit that stopped it ("memory 2048 MB", ...), if one did
    usage: dict = field(default_factory=dict)  # CPU and wall seconds, peak MB (not in the CSV)
    bonus: float = 0.0  # the instructor's adjustment of the total (course_grader.overrides)

    @property
    def score(self) -> float:
        return round(sum(self.earned.values()), 6)

    @property
    def max_score(self) -> float | None:
        return self.spec.max_score if self.spec else None


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{round(x, 4):g}"


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cell_text(text: str) -> str:
    """Text for a CSV cell that a spreadsheet will not run as a formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _columns(rows: list[Row]) -> list[tuple[str, str, str]]:
    """(column name, assignment id, test id) for every test of every assignment in the batch."""
    specs = {r.spec.id: r.spec for r in rows if r.spec is not None}
    prefix = len(specs) > 1
    return [
        ((f"{aid}/" if prefix else "") + t.id, aid, t.id)
        for aid in sorted(specs)
        for t in specs[aid].tests
    ]


def write_csv(rows: list[Row], path: str | Path) -> None:
    """The gradebook: submission, assignment, score, max_score, status, a column per test,
    stopped_by, reason, flags.

    ``stopped_by`` names the grader's limit that stopped the submission
    (``memory 2048 MB``, ``wall clock 60 s``, ``CPU time``), empty when none
    did: a row whose code the limit, not a bug, stopped can be graded again
    with a larger limit.

    ``flags`` is for the instructor (see :mod:`~course_grader.flags`): what
    in the submission is worth a look, separated by ``; ``.
    """
    columns = _columns(rows)
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(
            [
                "submission",
                "assignment",
                "score",
                "max_score",
                "status",
                *(c[0] for c in columns),
                "stopped_by",
                "reason",
                "flags",
            ]
        )
        for r in rows:
            cells = [
                _fmt(r.earned.get(tid, 0.0)) if r.assignment == aid and r.spec else ""
                for _, aid, tid in columns
            ]
            out.writerow(
                [
                    _cell_text(r.submission),
                    r.assignment,
                    _fmt(r.score),
                    _fmt(r.max_score),
                    r.status,
                    *cells,
                    r.stopped_by,
                    _cell_text(r.reason),
                    "; ".join(r.flags),
                ]
            )


def read_notebook_quietly(path: str | Path) -> dict | None:
    """The notebook at ``path``, or None when it is not one (for its metadata only)."""
    try:
        return read_notebook(path)
    except (NotebookError, OSError):
        return None


def write_feedback(
    rows: list[Row], folder: str | Path, extra: dict[str, list[str]] | None = None
) -> list[Path]:
    """One text file per submission, for the student: score, status and a line per test.

    ``extra[submission]``: more lines after the score (the instructor's
    adjustments, a late penalty).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for r in rows:
        name = re.sub(r"[^\w.-]+", "_", r.submission.removesuffix(".ipynb")).strip("_") + ".txt"
        lines = [
            f"Submission: {r.submission}",
            f"Assignment: {r.assignment or '?'}",
            f"Score: {_fmt(r.score)} / {_fmt(r.max_score) or '?'}",
            f"Status: {r.status}" + (f" ({r.reason})" if r.reason else ""),
            *(extra or {}).get(r.submission, []),
            "",
        ]
        if r.spec is not None:
            for t in r.spec.tests:
                earned = r.earned.get(t.id, 0)
                mark = "PASS" if earned >= t.points else ("PART" if earned > 0 else "FAIL")
                title = "" if t.hidden else f"  {t.title}"  # a hidden test's doc stays hidden
                lines.append(f"{mark}  {t.id}  {_fmt(earned)}/{_fmt(t.points)}{title}")
                message = r.messages.get(t.id, "")
                if mark != "PASS" and t.id in r.calls:
                    lines.append(f"      called: {r.calls[t.id]}")
                if mark != "PASS" and message:
                    lines.append(f"      {message}")
            lines += ["", CELL_NUMBERS_NOTE]
        path = folder / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(path)
    return written


CELL_NUMBERS_NOTE = (
    "Code cells are counted from the top of the notebook, markdown cells left out: "
    "code cell 3 is the one numbered [3] after Restart & Run all (Jupyter: Kernel menu; "
    "Colab: Runtime > Restart session and run all)."
)


def summary(rows: list[Row], seconds: float | None = None) -> str:
    """Counts, mean score and failures by reason, as printed at the end of a batch."""
    n = len(rows)
    assignments = sorted({r.assignment for r in rows if r.assignment})
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    lines = [
        f"Graded {n} submission{'s' * (n != 1)} ({', '.join(assignments) or 'no known assignment'}){took}."
    ]
    scored = [r for r in rows if r.max_score]
    if scored:
        mean = sum(r.score for r in scored) / len(scored)
        pct = 100 * sum(r.score / r.max_score for r in scored) / len(scored)
        maxes = {_fmt(r.max_score) for r in scored}
        out_of = f" / {maxes.pop()}" if len(maxes) == 1 else ""
        lines.append(
            f"Mean score: {mean:.2f}{out_of} ({pct:.1f}%); full marks: "
            f"{sum(r.score >= r.max_score for r in scored)} of {n}."
        )
    statuses = Counter(r.status for r in rows)
    lines.append("By status: " + ", ".join(f"{s} {k}" for s, k in sorted(statuses.items())))
    failures = [r for r in rows if r.status != "ok"]
    if failures:
        lines.append("Failures by reason:")
        for status in sorted({r.status for r in failures}):
            these = [r for r in failures if r.status == status]
            lines.append(f"  {status} ({len(these)}):")
            for reason, count in sorted(
                Counter(r.reason for r in these).items(), key=lambda x: (-x[1], x[0])
            ):
                names = [r.submission for r in these if r.reason == reason]
                shown = ", ".join(names[:3]) + (
                    f" and {len(names) - 3} more" if len(names) > 3 else ""
                )
                lines.append(f"    {count} x {reason}")
                lines.append(f"        {shown}")
    prefix = len(assignments) > 1
    failed_tests = Counter(
        (f"{r.assignment}/" if prefix else "") + t.id
        for r in rows
        if r.spec is not None and r.status not in NOT_RUN
        for t in r.spec.tests
        if r.earned.get(t.id, 0) < t.points
    )
    if failed_tests:
        top = ", ".join(
            f"{t} ({k})" for t, k in sorted(failed_tests.items(), key=lambda x: (-x[1], x[0]))[:5]
        )
        lines.append(f"Tests failed most often: {top}")
    flagged = [r for r in rows if r.flags]
    if flagged:
        names = ", ".join(r.submission for r in flagged[:5])
        more = f" and {len(flagged) - 5} more" if len(flagged) > 5 else ""
        lines.append(f"Flagged for a look ({len(flagged)}; see the flags column): {names}{more}")
    return "\n".join(lines)
