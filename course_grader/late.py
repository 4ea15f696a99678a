"""Deadlines: when each file was submitted, and what being late costs.

**Submission time.** From a manifest when there is one (``--times
manifest.csv``: columns ``file`` and ``submitted``; ``file`` is the file's name
or its path as given to ``grade``), else from the file's modification time.
LMS downloads carry such a manifest (or a time per file that is easily turned
into one); a file's modification time is only as good as the copy that made
it.

**Policy** (:class:`LatePolicy`). A submission is on time up to ``due`` plus
``grace``. After that it is late by whole days, counted from ``due`` and
rounded up (one minute past the grace period is 1 day late; 24 h and one
minute past ``due`` is 2). Each day late costs ``per_day`` percent of the
score earned, up to ``cap`` percent in all. A student's extension
(``--extensions extensions.csv``: columns ``student`` and ``due``, a new due
time) replaces ``due`` for that student; the grace period still applies.

Times are ISO 8601 (``2026-03-01T23:59``, ``2026-03-01 23:59:00+01:00``);
one without a time zone is read in the grader's local time zone.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from course_grader.tables import read_table

__all__ = ["LatePolicy", "parse_time", "submission_times", "read_extensions"]

DAY = timedelta(days=1)


def parse_time(text: str, what: str) -> datetime:
    """An aware datetime from ISO 8601 text; SystemExit naming ``what`` and the format."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(
            f"error: {what}: {text!r} is not a date and time; write it as ISO 8601, "
            "for example 2026-03-01T23:59 or 2026-03-01T23:59+01:00"
        ) from None
    return value if value.tzinfo else value.astimezone()


@dataclass(frozen=True)
class LatePolicy:
    """When an assignment is due and what each day late costs (see the module docstring)."""

    due: datetime
    grace: timedelta = timedelta(0)
    per_day: float = 10.0  # percent of the earned score, per day late
    cap: float = 100.0  # percent, at most
    extensions: dict[str, datetime] = field(default_factory=dict)  # student id -> due

    def due_for(self, student: str | None) -> datetime:
        return self.extensions.get(student, self.due) if student else self.due

    def days_late(self, submitted: datetime | None, student: str | None = None) -> int:
        """Whole days late (0 when on time or when the time is unknown)."""
        if submitted is None:
            return 0
        due = self.due_for(student)
        if submitted <= due + self.grace:
            return 0
        return max(1, math.ceil((submitted - due) / DAY))

    def penalty_percent(self, days: int) -> float:
        return min(self.cap, self.per_day * days) if days > 0 else 0.0


def read_extensions(path: str | Path) -> dict[str, datetime]:
    """Per-student due times from a CSV with columns ``student`` and ``due``."""
    rows = read_table(path, "--extensions", ["student", "due"])
    return {
        r["student"].strip(): parse_time(r["due"], f"--extensions {path}, student {r['student']}")
        for r in rows
    }


def submission_times(files: list[str], manifest: str | Path | None) -> dict[str, datetime]:
    """When each file was submitted: the manifest's time, else the file's modification time."""
    listed: dict[str, datetime] = {}
    if manifest is not None:
        rows = read_table(manifest, "--times", ["file", "submitted"])
        for r in rows:
            listed[r["file"].strip()] = parse_time(r["submitted"], f"--times {manifest}")
    out = {}
    for path in files:
        when = listed.get(path) or listed.get(os.path.normpath(path)) or listed.get(Path(path).name)
        if when is None:
            try:
                when = datetime.fromtimestamp(os.stat(path).st_mtime).astimezone()
            except OSError:
                continue
        out[path] = when
    return out
