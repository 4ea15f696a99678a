"""The judge: grades ONE submission, holding the tests, outside the student's process.

Started by :mod:`course_lib.grading.grade` as ``python -m course_lib.grading.judge``
(a trusted process: no student code ever runs in it). It reads a job (JSON on
stdin: the code cells, the assignment id, the hidden tests' source, the
limits), starts the student's process in its sandbox
(:class:`~course_lib.grading.remote.Session`), and runs every test here,
handing each one proxies of the student's functions. It writes one JSON line
per event on stdout:

* ``{"event": "started"}``, then ``{"event": "cell", "number": n, "kind": ...,
  "reason": ...}`` for each code cell that did not run to the end, then
  ``{"event": "cells-done"}``, or ``{"event": "stopped", "kind": ..., "reason":
  ...}`` when the cells never finished (timeout, crash);
* ``{"event": "test", "id": ..., "fraction": ..., "message": ..., "call": ...,
  "kind": ...}`` per test (``call``: what the test last called, visible tests
  only; ``kind``: ``timeout``/``crashed``/``protocol`` when the student's
  process stopped during this test);
* ``{"event": "restart", ...}`` when a fresh process replaces one that stopped;
* ``{"event": "done"}``.

Visible tests run first, then hidden ones, so that nothing a hidden test
passes to the student's code can come back in a visible test's message.
"""

from __future__ import annotations

import json
import os
import sys

from course_lib.grading.registry import TestSpec, load_assignment, load_hidden_tests
from course_lib.grading.remote import Session, StudentGone
from course_lib.grading.runner import run_test
from course_lib.grading.sandbox import Limits

__all__ = ["main"]

MAX_RESTARTS = 4


def main() -> None:
    """Read a job on stdin, grade it, report on stdout (see the module docstring)."""
    job = json.load(sys.stdin)
    report = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # a test that prints does not garble the report

    def emit(**event) -> None:
        report.write(json.dumps(event, sort_keys=True) + "\n")
        report.flush()

    visible = load_assignment(job["assignment"]).tests
    hidden: list[TestSpec] = []
    if job.get("hidden_source"):
        hidden = load_hidden_tests(job["hidden_source"])
    limits = Limits(
        memory_mb=job.get("memory_mb"),
        cpu_seconds=job.get("cpu_seconds"),
        processes=int(job.get("processes", 64)),
    )
    runs = 0

    def session() -> Session:
        nonlocal runs
        uid = 2_000_000 + (os.getpid() % 1_000_000) * 4 + runs % 4
        runs += 1
        return Session(
            job["cells"],
            limits,
            sandboxed=bool(job.get("sandboxed", True)),
            cells_timeout=float(job["timeout"]),
            call_timeout=float(job["call_timeout"]),
            uid=uid,
        )

    current = session()
    events, kind, reason = current.start()
    for event in events:
        emit(**event)
    if kind is not None:
        emit(event="stopped", kind=kind, reason=reason or "")
        current.kill(kind, "")
        emit(event="done")
        report.close()
        return

    hung: dict[str, str] = {}  # function -> why it is not called again (it did not return)
    for spec in [*visible, *hidden]:
        skip = [n for n in spec.needs if n in hung]
        if skip:
            emit(
                event="test",
                id=spec.id,
                fraction=0.0,
                message=f"not run: {hung[skip[0]]}",
                call="",
                kind="",
            )
            continue
        if current.dead is not None:
            if runs > MAX_RESTARTS:
                emit(
                    event="test",
                    id=spec.id,
                    fraction=0.0,
                    message=f"not run: the notebook's process stopped {runs} times",
                    call="",
                    kind="",
                )
                continue
            current = session()
            _, kind, _ = current.start()
            emit(event="restart", ok=kind is None)
            if kind is not None:
                current.kill(kind, "")
                emit(
                    event="test",
                    id=spec.id,
                    fraction=0.0,
                    message="not run: the notebook's process could not be restarted",
                    call="",
                    kind="",
                )
                continue
        current.hidden = spec.hidden
        died_before = current.dead
        try:
            namespace = current.namespace(spec.needs)
        except StudentGone as err:
            namespace = None
            result_fraction, result_message = 0.0, str(err)
        if namespace is not None:
            result = run_test(spec, namespace)
            result_fraction, result_message = result.fraction, result.message
        stopped = current.dead is not None and died_before is None
        if stopped and current.dead_kind == "timeout" and current.fatal_call in spec.needs:
            hung[current.fatal_call] = (
                f"{current.fatal_call} did not return in an earlier test, so it is not called again"
            )
        emit(
            event="test",
            id=spec.id,
            fraction=result_fraction,
            message=result_message,
            call="" if spec.hidden or not current.calls else current.calls[-1],
            kind=(current.dead_kind or "") if stopped else "",
        )
        current.end_test()
    current.close()
    emit(event="done")
    report.close()


if __name__ == "__main__":
    main()
