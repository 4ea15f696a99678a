"""Batch grading: every submission in its own process, one gradebook row each, always.

:func:`grade_batch` reads each notebook, works out its assignment (the id in
its metadata; else ``--assignment``; else a known id in the file name), and
has a judge process (:mod:`~course_grader.judge`) run its code cells in a
sandboxed student process (:mod:`~course_grader.sandboxed.student`) and then the
assignment's tests (visible and hidden), with a wall-clock timeout, memory and
CPU limits (:mod:`~course_grader.cgroup`) and a fresh temporary working
folder. Whatever a submission does, it
gets a :class:`Row` with a status and a short reason; nothing stops the batch.

Statuses, from "could not run at all" to "ran":

``invalid-notebook``, ``unknown-assignment``, ``wrong-assignment``
    nothing ran, score 0;
``timeout``, ``crashed``
    the process was killed or died: tests not reached score 0;
``syntax-error``, ``cell-error``, ``exit``, ``memory-limit``
    a code cell failed (the first one is the reason); tests still ran on what
    was defined, so what works earns its points;
``tests-failed``, ``ok``
    every cell ran; some tests failed (the first failure is the reason) / all passed.

Rows are sorted by submission path, test columns by assignment and question,
so the same files give the same CSV.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from course_grader import cgroup
from course_grader.catalog import _Assignments
from course_grader.cgroup import check_memory_limit
from course_grader.events import Done, Event, Job, Stopped, TestOutcome, UsageReport, from_line
from course_grader.flags import flag_cells
from course_grader.judge import MAX_RESTARTS
from course_grader.notebook import NotebookError, assignment_of, code_cells, read_notebook
from course_grader.results import (
    Row,
    _fmt,
    _one_line,
    summary,
    write_csv,
    write_feedback,
)
from course_grader.sandbox import (
    NO_SANDBOX_WARNING,
    PACKAGE_PARENTS,
    SandboxUnavailable,
    require_bwrap,
)
from course_grader.sandboxed.messages import Cell, CellFailed, CellsDone, Limits, Started
from course_lib.grading.registry import (
    Assignment,
    hidden_tests_file,
)
from course_lib.grading.runner import HIDDEN_FAILED, HIDDEN_PASSED

__all__ = ["Row", "grade_batch", "write_csv", "write_feedback", "summary"]

MAX_RUNS = MAX_RESTARTS + 1


@dataclass(frozen=True)
class _Options:
    """How every submission of a batch is graded (the arguments of :func:`grade_batch`)."""

    timeout: float  # wall-clock seconds for a submission's code cells
    call_timeout: float  # wall-clock seconds for each call of a student's function
    memory_mb: int | None
    cpus: float | None
    sandbox: bool


def _judge_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("COURSE_REQUIRE_GPU", None)
    env.update(
        COURSE_GRADING="1",
        COURSE_DEVICE="cpu",
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MPLBACKEND="Agg",
        PYTHONHASHSEED="0",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join(p for p in (*PACKAGE_PARENTS, env.get("PYTHONPATH")) if p),
    )
    return env


def _run_judge(job: Job, timeout: float) -> tuple[list[Event], int | None, bool, str]:
    """Run one job in a judge process; return (events, return code, timed out?, last stderr line).

    The judge is trusted (the student's code runs in the sandbox it starts), so
    its stdout is read to the end; ``timeout`` is only a backstop.
    """
    with tempfile.TemporaryDirectory(prefix="course-judge-") as workdir:
        proc = subprocess.Popen(
            [sys.executable, "-s", "-P", "-m", "course_grader.judge"],
            cwd=workdir,
            env=_judge_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        timed_out = False
        try:
            out, err = proc.communicate(job.to_json().encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            out, err = proc.communicate()
        _kill_group(proc.pid)
    events = [e for line in out.decode(errors="replace").splitlines() if (e := from_line(line))]
    lines = err.decode(errors="replace").strip().splitlines()
    return events, proc.returncode, timed_out, lines[-1] if lines else ""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _score_tests(row: Row, events: list[Event]) -> list[tuple]:
    """Fill ``row.earned`` and ``row.messages`` from the test events; the tests the process
    stopped in, with how it stopped."""
    spec = row.spec
    assert spec is not None
    by_id = {t.id: t for t in spec.tests}
    stopped_tests = []
    for e in events:
        if isinstance(e, TestOutcome) and e.id in by_id:
            t = by_id[e.id]
            try:
                fraction = min(max(float(e.fraction), 0.0), 1.0)
            except (TypeError, ValueError):
                fraction = 0.0
            row.earned[t.id] = round(t.points * fraction, 6)
            if t.hidden:
                row.messages[t.id] = HIDDEN_PASSED if fraction >= 1.0 else HIDDEN_FAILED
            else:
                row.messages[t.id] = _one_line(str(e.message), 600)
                if e.call and fraction < 1.0:
                    row.calls[t.id] = _one_line(str(e.call), 200)
            if e.kind:
                stopped_tests.append((t, str(e.kind)))
    for t in spec.tests:
        if t.id not in row.earned:
            row.earned[t.id] = 0.0
            row.messages[t.id] = "not run"
    return stopped_tests


def _stopped(row: Row, event: Stopped, memory_mb: int | None) -> None:
    """Status and reason of a submission whose code cells never finished."""
    kind = event.kind
    detail = str(event.reason or "")
    if kind == "timeout":
        row.status, row.stopped_by = "timeout", f"wall clock {row.cells_timeout:g} s"
        row.reason = (
            f"its code cells did not finish within {row.cells_timeout:g} s (an endless loop?)"
        )
    elif kind == "protocol":
        row.status = "crashed"
        row.reason = detail or "broke the grading protocol"
    elif kind == "memory-limit" or "MemoryError" in detail or "bad_alloc" in detail:
        row.status, row.stopped_by = "memory-limit", f"memory {memory_mb} MB"
        row.reason = f"the grader's memory limit ({memory_mb} MB) stopped its code cells"
    elif "SIGXCPU" in detail:
        row.status, row.stopped_by = "timeout", "CPU time"
        row.reason = "used up its CPU time while running its code cells"
    else:
        row.status = "crashed"
        row.reason = (
            f"the process died while running its code cells ({detail}); "
            "os._exit() or a crash in native code?"
        )


def _finish(
    row: Row,
    events: list[Event],
    returncode: int | None,
    timed_out: bool,
    stderr: str,
    timeout: float,
    memory_mb: int | None,
) -> None:
    spec = row.spec
    assert spec is not None
    stopped_tests = _score_tests(row, events)
    kinds = {type(e) for e in events}
    cells = [e for e in events if isinstance(e, CellFailed)]
    stopped = [e for e in events if isinstance(e, Stopped)]
    for e in events:
        if isinstance(e, UsageReport):
            row.usage = asdict(e)
    stage = "the tests" if CellsDone in kinds else "its code cells"
    if timed_out:
        row.status, row.stopped_by = "timeout", f"wall clock {timeout:g} s"
        row.reason = f"grading did not finish within {timeout:g} s"
    elif stopped:
        _stopped(row, stopped[0], memory_mb)
    elif Done not in kinds:
        row.status = "crashed"
        if Started not in kinds:
            row.reason = (
                f"the grading process failed to start: {stderr or f'exit code {returncode}'}"
            )
        else:
            row.reason = f"the grader stopped while running {stage} ({stderr or returncode}); please report it"
    elif stopped_tests:
        test, kind = stopped_tests[0]
        row.status = {"timeout": "timeout", "memory-limit": "memory-limit"}.get(kind, "crashed")
        if kind == "memory-limit":
            row.stopped_by = f"memory {memory_mb} MB"
        row.reason = f"{test.id}: {row.messages[test.id]}"
    elif cells:
        first = cells[0]
        row.status = str(first.kind)
        if row.status == "memory-limit":
            row.stopped_by = f"memory {memory_mb} MB"
        more = f" (and {len(cells) - 1} more failing cells)" if len(cells) > 1 else ""
        row.reason = _one_line(first.reason) + more
    else:
        failed = [t for t in spec.tests if row.earned[t.id] < t.points]
        if not failed:
            row.status = "ok"
        else:
            row.status = "tests-failed"
            row.reason = f"{failed[0].id}: {row.messages[failed[0].id]}"
    row.reason = _one_line(row.reason)


def _not_run(
    shown: str, assignment_id: str, status: str, reason: str, spec: Assignment | None
) -> Row:
    """A row for a submission that could not run: every test of ``spec`` (if known) scores 0."""
    row = Row(shown, assignment_id, status, reason, spec=spec)
    for t in spec.tests if spec else []:
        row.earned[t.id] = 0.0
        row.messages[t.id] = "not run"
    return row


def _grade_one(
    path: Path,
    shown: str,
    expected: str | None,
    book: _Assignments,
    options: _Options,
) -> Row:
    spec = book.get(expected)[0] if expected else None
    try:
        nb = read_notebook(path)
    except NotebookError as err:
        return _not_run(shown, expected or "", "invalid-notebook", str(err), spec)
    except OSError as err:
        reason = f"cannot read the file: {err.strerror}"
        return _not_run(shown, expected or "", "invalid-notebook", reason, spec)
    declared = assignment_of(nb)
    if expected is not None and declared not in (None, expected):
        reason = f"the notebook is for assignment {declared}, not {expected}"
        return _not_run(shown, expected, "wrong-assignment", reason, spec)
    assignment_id = expected or declared or book.from_file_name(path)
    if assignment_id is None:
        reason = (
            "no assignment id in the notebook metadata, and none in the file name: "
            "grade it with --assignment ID"
        )
        return _not_run(shown, "", "unknown-assignment", reason, None)
    if assignment_id not in book.known:
        reason = f"no tests for assignment {assignment_id}; known: {', '.join(book.known)}"
        return _not_run(shown, assignment_id, "unknown-assignment", reason, None)
    spec, hidden_source = book.get(assignment_id)
    row = Row(shown, assignment_id, "ok", spec=spec, cells_timeout=options.timeout)
    cells = code_cells(nb)
    solution = book.solution(assignment_id)
    given = [c.source for c in code_cells(solution)] if solution else []
    row.flags = flag_cells(cells, solution, given)
    job = Job(
        assignment=assignment_id,
        cells=[Cell(c.number, c.source) for c in cells],
        hidden_source=hidden_source,
        limits=Limits(
            memory_mb=options.memory_mb,
            cpus=options.cpus,
            cpu_seconds=int(options.timeout + len(spec.tests) * options.call_timeout) + 10,
        ),
        timeout=options.timeout,
        call_timeout=options.call_timeout,
        sandboxed=options.sandbox,
    )
    backstop = (MAX_RUNS * options.timeout) + len(spec.tests) * options.call_timeout + 60
    events, returncode, timed_out, stderr = _run_judge(job, backstop)
    _finish(row, events, returncode, timed_out, stderr, backstop, options.memory_mb)
    return row


def grade_batch(
    submissions: list[str | Path],
    assignment: str | None = None,
    hidden_dir: str | Path | None = None,
    timeout: float = 60.0,
    memory_mb: int | None = 2048,
    jobs: int | None = None,
    progress: bool = False,
    call_timeout: float = 10.0,
    sandbox: bool = True,
    cpus: float | None = 1.0,
) -> list[Row]:
    """Grade every submission; one :class:`Row` each, sorted by path.

        ``assignment`` makes every submission count as that assignment (one whose
        metadata names another gets ``wrong-assignment``). ``hidden_dir`` holds
        ``<assignment>.py`` files of hidden tests. ``timeout`` (seconds, wall
        clock) limits a submission's code cells, ``call_timeout`` each call of one
        of its functions by a test, ``memory_mb`` its memory (resident memory of its
    process tree where the machine has control groups, else writable memory per
    process: see :mod:`~course_grader.cgroup`), ``cpus`` the cores it may
    use at once (control groups only; its processes are also niced);
        ``jobs`` submissions are graded at once (default: the number of CPU cores).

        Each submission runs in a ``bwrap`` sandbox (see
        :mod:`~course_grader.sandbox`); where there is none this raises
        :class:`~course_grader.sandbox.SandboxUnavailable`, unless
        ``sandbox=False`` (a class you trust: see ``NO_SANDBOX_WARNING``).
    """
    if sandbox:
        require_bwrap()
    if memory_mb:
        check_memory_limit(memory_mb, _judge_env())
    cgroup.support()  # before the judges start: they share what it prepares (cgroup v2)
    book = _load_assignments(assignment, hidden_dir)
    shown = sorted({os.path.normpath(str(p)) for p in submissions})
    jobs = max(1, jobs or os.cpu_count() or 1)
    done = 0
    options = _Options(float(timeout), float(call_timeout), memory_mb, cpus, bool(sandbox))

    def work(name: str) -> Row:
        nonlocal done
        row = _grade_safely(name, assignment, book, options)
        done += 1
        if progress:
            print(
                f"[{done}/{len(shown)}] {name}: {row.status} {_fmt(row.score)}/"
                f"{_fmt(row.max_score) or '?'}",
                file=sys.stderr,
                flush=True,
            )
        return row

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(work, shown))
    return rows


def _load_assignments(assignment: str | None, hidden_dir: str | Path | None) -> _Assignments:
    """The batch's assignments, every hidden-tests file loaded now (a broken one stops here)."""
    if hidden_dir is not None and not Path(hidden_dir).is_dir():
        raise SystemExit(f"error: --hidden {hidden_dir}: no such folder")
    book = _Assignments(hidden_dir)
    if assignment is not None and assignment not in book.known:
        raise SystemExit(
            f"error: no tests for assignment {assignment!r}; known: {', '.join(book.known)}"
        )
    for aid in book.known:
        if aid == assignment or hidden_tests_file(hidden_dir, aid) is not None:
            book.get(aid)
    return book


def _grade_safely(name: str, assignment: str | None, book: _Assignments, options: _Options) -> Row:
    """One file's row, whatever happens (a grader error is a row too), hidden text redacted."""
    try:
        row = _grade_one(Path(name), name, assignment, book, options)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: B036 - one submission never stops the batch
        row = _not_run(
            name,
            assignment or "",
            "grader-error",
            f"the grader could not grade this file ({type(err).__name__}: {err}); please report it",
            book.get(assignment)[0] if assignment else None,
        )
    redact = book.redactor
    row.reason = _one_line(redact(row.reason))
    row.messages = {k: redact(v) for k, v in row.messages.items()}
    row.calls = {k: redact(v) for k, v in row.calls.items()}
    return row


def run_cli(args: argparse.Namespace) -> int:
    """``python -m course_lib.grading grade``: grade, write the CSV (and feedback), summarise."""
    start = time.perf_counter()
    if args.no_sandbox:
        print(NO_SANDBOX_WARNING, file=sys.stderr, flush=True)
    try:
        rows = grade_batch(
            args.submissions,
            assignment=args.assignment,
            hidden_dir=args.hidden,
            timeout=args.timeout,
            memory_mb=args.memory_mb or None,
            jobs=args.jobs,
            progress=not args.quiet,
            call_timeout=args.call_timeout,
            sandbox=not args.no_sandbox,
            cpus=args.cpus or None,
        )
    except SandboxUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from course_grader.outputs import write_outputs

    notes = write_outputs(args, rows)
    print(summary(rows, time.perf_counter() - start))
    for line in notes:
        print(line)
    how = next((r.usage["limits"] for r in rows if r.usage.get("limits")), None)
    if how:
        cpus = f", {args.cpus:g} core{'s' * (args.cpus != 1)}" if args.cpus else ""
        memory = f"{args.memory_mb} MB" if args.memory_mb else "no memory limit"
        print(f"Limits per submission: {memory}{cpus}; enforced by {how}.")
    print(f"Gradebook: {args.csv}" + (f"; feedback in {args.feedback}/" if args.feedback else ""))
    if args.no_sandbox:
        print(NO_SANDBOX_WARNING, file=sys.stderr, flush=True)
    return 0
