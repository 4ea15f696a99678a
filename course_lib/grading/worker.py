"""The grading worker: runs ONE submission in its own process and reports on a private pipe.

Started by :mod:`course_lib.grading.grade` as ``python -m course_lib.grading.worker``
in a fresh temporary folder. It reads a job (JSON on stdin: the code cells,
the assignment id, the hidden tests' source, the limits), sets its resource
limits, sends the student's output (fd 1 and 2) to a log file, and writes one
JSON line per event to a duplicate of the original stdout:

* ``{"event": "started"}`` once the limits are set;
* ``{"event": "cell", "number": n, "kind": ..., "reason": ...}`` for a code
  cell that did not run to the end (``syntax-error``, ``cell-error``, ``exit``,
  ``memory-limit``);
* ``{"event": "cells-done"}``, then ``{"event": "test", "id": ..., "fraction": ...,
  "message": ...}`` per test, then ``{"event": "done"}``.

Cells run top to bottom in one namespace, like "Run all" in Jupyter, except
that a failing cell does not stop the next ones (as in nbgrader), so each
test scores what could run. ``sys.exit()`` in a cell stops the notebook.
IPython-only lines arrive as ``get_ipython()`` calls and are answered by a
stand-in shell that runs nothing (``%time`` and ``%%time`` still run their
code). The hidden tests are compiled only after the student's cells ran.

These limits keep a runaway submission from stalling a batch; they are not a
sandbox against a hostile one (see the instructor guide).
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import resource
import sys
import types

from course_lib.grading.registry import TestSpec, load_assignment, load_hidden_tests
from course_lib.grading.runner import exception_summary, run_test

__all__ = ["main"]

_TIMED_MAGICS = {"time", "timeit", "capture", "prun"}


class _NeutralShell:
    """Answers the ``get_ipython()`` calls of a submission without running anything."""

    def __init__(self, namespace: dict) -> None:
        self._ns = namespace
        self.neutralised: list[str] = []

    def _run(self, code: str) -> None:
        exec(compile(code, "<magic>", "exec"), self._ns)

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> None:
        if name.lstrip("%") in _TIMED_MAGICS and line.strip():
            self._run(line)
        else:
            self.neutralised.append(f"%{name} {line}".strip())

    def run_cell_magic(self, name: str, line: str, cell: str) -> None:
        if name.lstrip("%") in _TIMED_MAGICS:
            self._run(cell)
        else:
            self.neutralised.append(f"%%{name} {line}".strip())

    def system(self, cmd: str) -> None:
        self.neutralised.append(f"!{cmd}")

    def getoutput(self, cmd: str, split: bool = True) -> list:
        self.neutralised.append(f"!{cmd}")
        return []

    def __getattr__(self, name: str):  # any other shell API: a no-op
        return lambda *args, **kwargs: None


def _set_limits(memory_mb: int | None, cpu_seconds: int | None) -> None:
    if memory_mb:
        limit = int(memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_seconds), int(cpu_seconds) + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    big = 512 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (big, big))


def _out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or "can't allocate memory" in str(exc)


def _run_cells(cells: list[dict], namespace: dict, emit) -> None:
    for cell in cells:
        number, source = cell["number"], cell["source"]
        filename = f"<cell {number}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            code = compile(source, filename, "exec")
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            where = f", line {line}" if line else ""
            msg = getattr(exc, "msg", str(exc))
            emit(
                event="cell",
                number=number,
                kind="syntax-error",
                reason=f"code cell {number}{where}: {type(exc).__name__}: {msg}",
            )
            continue
        try:
            exec(code, namespace)
        except SystemExit:
            emit(
                event="cell",
                number=number,
                kind="exit",
                reason=f"code cell {number} called sys.exit(); later cells were not run",
            )
            return
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: B036 - the student's code may raise anything
            kind = "memory-limit" if _out_of_memory(exc) else "cell-error"
            summary = exception_summary(exc, cell=filename)
            sep = ", " if summary.startswith("line ") else ": "
            emit(
                event="cell",
                number=number,
                kind=kind,
                reason=f"code cell {number}{sep}{summary}",
            )


def main() -> None:
    """Read a job on stdin, run it, report on the original stdout (see the module docstring)."""
    job = json.load(sys.stdin)
    report = os.fdopen(os.dup(1), "w", buffering=1)

    def emit(**event) -> None:
        report.write(json.dumps(event, sort_keys=True) + "\n")
        report.flush()

    log = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    _set_limits(job.get("memory_mb"), job.get("cpu_seconds"))

    cells = job["cells"]
    visible = load_assignment(job["assignment"]).tests
    hidden_source = job.get("hidden_source")
    job.clear()  # the hidden tests' source stays in a local variable only

    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    shell = _NeutralShell(namespace)
    namespace["get_ipython"] = lambda: shell
    namespace["display"] = lambda *objs, **kwargs: print(*objs)
    sys.modules["__main__"] = module
    sys.argv = ["notebook"]

    emit(event="started")
    _run_cells(cells, namespace, emit)
    emit(event="cells-done")

    tests: list[TestSpec] = list(visible)
    if hidden_source:
        tests += load_hidden_tests(hidden_source)
        del hidden_source
    for spec in tests:
        result = run_test(spec, namespace)
        emit(event="test", id=spec.id, fraction=result.fraction, message=result.message)
    emit(event="done")
    report.close()
    os._exit(0)  # skip interpreter teardown: a submission's atexit hooks or threads do not matter


if __name__ == "__main__":
    main()
