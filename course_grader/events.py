"""What the batch grader and one judge process say to each other, one definition each.

The grader (:mod:`course_grader.grade`) writes a :class:`Job` on the judge's stdin; the
judge (:mod:`course_grader.judge`) answers with one JSON line per event on its stdout,
``{"event": TAG, **fields}``:

* :class:`~course_grader.sandboxed.messages.Started`, then a
  :class:`~course_grader.sandboxed.messages.CellFailed` for each code cell that did not
  run to its end, then :class:`~course_grader.sandboxed.messages.CellsDone`; or
  :class:`Stopped` when the cells never finished (timeout, crash);
* :class:`TestOutcome` per test;
* :class:`Restarted` when a fresh student process replaces one that stopped;
* :class:`UsageReport`, then :class:`Done`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from course_grader.sandboxed.messages import Cell, CellFailed, CellsDone, Limits, Started

__all__ = [
    "Job",
    "Stopped",
    "TestOutcome",
    "Restarted",
    "UsageReport",
    "Done",
    "Event",
    "to_line",
    "from_line",
]


@dataclass(frozen=True)
class Job:
    """What the batch grader asks one judge to do (JSON on the judge's stdin)."""

    assignment: str
    cells: list[Cell]
    timeout: float  # wall-clock seconds for the code cells
    call_timeout: float  # wall-clock seconds for each call of a student's function
    limits: Limits  # of each student process
    hidden_source: str | None = None
    sandboxed: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = json.loads(text)
        data["cells"] = [Cell(**c) for c in data["cells"]]
        data["limits"] = Limits(**data["limits"])
        return cls(**data)


@dataclass(frozen=True)
class Stopped:
    """The code cells never finished: ``kind`` is timeout, crashed, protocol or memory-limit."""

    TAG = "stopped"
    kind: str
    reason: str = ""


@dataclass(frozen=True)
class TestOutcome:
    """One test's result. ``call``: what the test last called (visible tests only);
    ``kind``: how the student's process stopped during this test (else empty)."""

    TAG = "test"
    __test__ = False  # not a pytest class
    id: str
    fraction: float
    message: str = ""
    call: str = ""
    kind: str = ""


@dataclass(frozen=True)
class Restarted:
    """A fresh student process replaced one that stopped; ``ok``: its cells ran."""

    TAG = "restart"
    ok: bool


@dataclass(frozen=True)
class UsageReport:
    """What the submission's processes used, summed over restarts, and what limited them."""

    TAG = "usage"
    cpu_seconds: float | None = None
    wall_seconds: float | None = None
    peak_mb: float | None = None
    limits: str = ""


@dataclass(frozen=True)
class Done:
    """The judge finished (every test reported)."""

    TAG = "done"


Event = Started | CellFailed | CellsDone | Stopped | TestOutcome | Restarted | UsageReport | Done
_BY_TAG = {
    cls.TAG: cls
    for cls in (Started, CellFailed, CellsDone, Stopped, TestOutcome, Restarted, UsageReport, Done)
}


def to_line(event: Event) -> str:
    """One line of the judge's report."""
    return json.dumps({"event": event.TAG, **asdict(event)}, sort_keys=True)


def from_line(line: str) -> Event | None:
    """The event on ``line``, or None for anything that is not one (a stray print, say)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    cls = _BY_TAG.get(data.get("event")) if isinstance(data, dict) else None
    if cls is None:
        return None
    known = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in data.items() if k in known})
    except TypeError:
        return None
