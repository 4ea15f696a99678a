"""The instructor's manual adjustments: per student and test, each with a comment.

``--overrides overrides.csv`` holds one adjustment a line, in columns
``student``, ``assignment``, ``test``, ``points``, ``comment``:

* ``student``: the roster id (without a roster: the submission's file name);
* ``assignment``: its id (empty: any);
* ``test``: a test's column name in the gradebook (``q2:matches_torch``), or
  empty for the assignment as a whole;
* ``points``: ``+1`` or ``-0.5`` (added), or ``=2`` (set); a test's points stay
  between 0 and what it is worth, the assignment's between 0 and its maximum;
* ``comment``: why, shown to the student in their feedback.

The file is read at every grading and applied after the tests run, so an
adjustment survives re-grading; the gradebook shows each one (``adjustments``
column) and the score it gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from course_grader.tables import read_table

__all__ = ["Override", "read_overrides", "apply_overrides"]


@dataclass(frozen=True)
class Override:
    """One line of the overrides file."""

    student: str
    assignment: str
    test: str
    points: str  # "+1", "-0.5" or "=2"
    comment: str

    def new_value(self, old: float, most: float) -> float:
        text = self.points.strip()
        value = float(text[1:]) if text.startswith("=") else old + float(text)
        return min(max(value, 0.0), most)

    def describe(self) -> str:
        what = self.test or "total"
        return f"{what} {self.points.strip()}" + (f" ({self.comment})" if self.comment else "")


def read_overrides(path: str | Path) -> list[Override]:
    """The adjustments in ``path`` (see the module docstring); SystemExit naming a bad line."""
    need = {"student", "assignment", "test", "points", "comment"}
    rows = read_table(path, "--overrides", sorted(need, key=_order))
    out = []
    for number, r in enumerate(rows, start=2):
        o = Override(*((r.get(k) or "").strip() for k in sorted(need, key=_order)))
        text = o.points.removeprefix("=")
        try:
            float(text)
        except ValueError:
            raise SystemExit(
                f"error: --overrides {path}, line {number}: points {o.points!r} is not a "
                "number; write +1, -0.5 (added) or =2 (set)"
            ) from None
        out.append(o)
    return out


def _order(name: str) -> int:
    return ["student", "assignment", "test", "points", "comment"].index(name)


def apply_overrides(row, student: str, overrides: list[Override]) -> list[Override]:
    """Apply the overrides of ``student`` to ``row`` (a graded row); return those applied.

    Test adjustments change ``row.earned``; whole-assignment ones are kept in
    ``row.bonus``. A test id the assignment does not have stops with an error.
    """
    applied = []
    spec = row.spec
    for o in overrides:
        if o.student != student or (o.assignment and o.assignment != row.assignment):
            continue
        if spec is None:
            continue
        if o.test:
            tests = {t.id: t for t in spec.tests}
            if o.test not in tests:
                raise SystemExit(
                    f"error: --overrides: {row.assignment} has no test {o.test!r}; its tests: "
                    + ", ".join(tests)
                )
            t = tests[o.test]
            row.earned[t.id] = round(o.new_value(row.earned.get(t.id, 0.0), t.points), 6)
        else:
            score = row.score  # the tests' points, adjusted
            row.bonus = round(o.new_value(score + row.bonus, spec.max_score) - score, 6)
        applied.append(o)
    return applied
