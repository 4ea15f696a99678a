"""The judge: grades ONE submission, holding the tests, outside the student's process.

Started by :mod:`course_grader.grade` as ``python -m course_grader.judge``
(a trusted process: no student code ever runs in it). It reads a job (JSON on
stdin: the code cells, the assignment id, the hidden tests' source, the
limits), starts the student's process in its sandbox
(:class:`~course_grader.remote.Session`), and runs every test here,
handing each one proxies of the student's functions. It writes one JSON line
per event on stdout (the messages of :mod:`course_grader.events`).

Visible tests run first, then hidden ones, so that nothing a hidden test
passes to the student's code can come back in a visible test's message.
"""

from __future__ import annotations

import os
import sys

from course_grader import cgroup
from course_grader.events import (
    Done,
    Event,
    Job,
    Restarted,
    Stopped,
    TestOutcome,
    UsageReport,
    to_line,
)
from course_grader.remote import Session, StudentGone
from course_lib.grading.registry import TestSpec, load_assignment, load_hidden_tests
from course_lib.grading.runner import run_test

__all__ = ["main", "Job"]

MAX_RESTARTS = 4


class _Judge:
    """One submission's grading: its sessions (restarted when they stop) and the report."""

    def __init__(self, job: Job, report) -> None:
        self.job, self.report = job, report
        self.limits = job.limits
        self.runs = 0
        self.usage = cgroup.Usage()
        self.hung: dict[str, str] = {}  # function -> why it is not called again
        self.current: Session | None = None

    def emit(self, event: Event) -> None:
        self.report.write(to_line(event) + "\n")
        self.report.flush()

    def not_run(self, spec: TestSpec, why: str) -> None:
        self.emit(TestOutcome(spec.id, 0.0, f"not run: {why}"))

    def session(self) -> Session:
        uid = 2_000_000 + (os.getpid() % 1_000_000) * 4 + self.runs % 4
        self.runs += 1
        made = Session(
            self.job.cells,
            self.limits,
            sandboxed=self.job.sandboxed,
            cells_timeout=float(self.job.timeout),
            call_timeout=float(self.job.call_timeout),
            uid=uid,
        )
        made.usage = self.usage  # one sum over the restarts
        return made

    def finish(self) -> None:
        self.emit(
            UsageReport(
                cpu_seconds=self.usage.cpu_seconds,
                wall_seconds=round(self.usage.wall_seconds, 3),
                peak_mb=self.usage.peak_mb,
                limits=cgroup.support().describe(),
            )
        )
        self.emit(Done())
        self.report.close()

    def ready(self, spec: TestSpec) -> bool:
        """A live session for ``spec`` (restarting one that stopped), or report why not."""
        skip = [n for n in spec.needs if n in self.hung]
        if skip:
            self.not_run(spec, self.hung[skip[0]])
            return False
        if self.current.dead is None:
            return True
        if self.runs > MAX_RESTARTS:
            self.not_run(spec, f"the notebook's process stopped {self.runs} times")
            return False
        self.current = self.session()
        _, kind, _ = self.current.start()
        self.emit(Restarted(ok=kind is None))
        if kind is not None:
            self.current.kill(kind, "")
            self.not_run(spec, "the notebook's process could not be restarted")
            return False
        return True

    def test(self, spec: TestSpec) -> None:
        current = self.current
        current.hidden = spec.hidden
        died_before = current.dead
        try:
            namespace = current.namespace(spec.needs)
        except StudentGone as err:
            namespace = None
            fraction, message = 0.0, str(err)
        if namespace is not None:
            result = run_test(spec, namespace)
            fraction, message = result.fraction, result.message
        stopped = current.dead is not None and died_before is None
        if stopped and current.dead_kind == "timeout" and current.fatal_call in spec.needs:
            self.hung[current.fatal_call] = (
                f"{current.fatal_call} did not return in an earlier test, so it is not called again"
            )
        self.emit(
            TestOutcome(
                id=spec.id,
                fraction=fraction,
                message=message,
                call="" if spec.hidden or not current.calls else current.calls[-1],
                kind=(current.dead_kind or "") if stopped else "",
            )
        )
        current.end_test()

    def run(self) -> None:
        tests = list(load_assignment(self.job.assignment).tests)
        if self.job.hidden_source:
            tests += load_hidden_tests(self.job.hidden_source)
        self.current = self.session()
        events, kind, reason = self.current.start()
        for event in events:
            self.emit(event)
        if kind is not None:
            self.emit(Stopped(kind=kind, reason=reason or ""))
            self.current.kill(kind, "")
            self.finish()
            return
        for spec in tests:  # visible first, then hidden
            if self.ready(spec):
                self.test(spec)
        self.current.close()
        self.finish()


def main() -> None:
    """Read a job on stdin, grade it, report on stdout (see the module docstring)."""
    job = Job.from_json(sys.stdin.read())
    report = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # a test that prints does not garble the report
    _Judge(job, report).run()


if __name__ == "__main__":
    main()
