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
import ast
import csv
import importlib
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from course_grader import cgroup
from course_grader.cgroup import check_memory_limit
from course_grader.flags import flag_cells
from course_grader.judge import MAX_RESTARTS, Job
from course_grader.notebook import NotebookError, assignment_of, code_cells, read_notebook
from course_grader.sandbox import (
    NO_SANDBOX_WARNING,
    PACKAGE_PARENTS,
    SandboxUnavailable,
    require_bwrap,
)
from course_lib.grading.registry import (
    Assignment,
    hidden_tests_file,
    known_assignments,
    load_assignment,
    load_hidden_tests,
    module_name,
)
from course_lib.grading.runner import HIDDEN_FAILED, HIDDEN_PASSED

__all__ = ["Row", "grade_batch", "write_csv", "write_feedback", "summary"]

MAX_RUNS = MAX_RESTARTS + 1
#: The checkout's published solutions (for the copies-solution flag); absent in an install.
SOLUTIONS_DIR = Path(__file__).resolve().parents[1] / "solutions"
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


class Redactor:
    """Blanks out any piece of a hidden test's source that would appear in grading output.

    The pieces are every line of the hidden tests' files and every string in
    them (at least 8 characters), except those the public tests module shows
    anyway. The grader never puts hidden text in a row; this is the second
    lock, for text a submission produced (an error message, a returned value).
    """

    MIN_LENGTH = 8

    def __init__(self, hidden_sources: list[str] = (), public_sources: list[str] = ()) -> None:
        public = "\n".join(public_sources)
        pieces: set[str] = set()
        for source in hidden_sources:
            pieces.update(line.strip() for line in source.splitlines())
            try:
                tree = ast.parse(source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    pieces.update(p.strip() for p in node.value.splitlines())
                    pieces.add(node.value)
        self.pieces = sorted(
            (p for p in pieces if len(p.strip()) >= self.MIN_LENGTH and p not in public),
            key=len,
            reverse=True,
        )

    def __call__(self, text: str) -> str:
        for piece in self.pieces:
            if piece in text:
                text = text.replace(piece, "[hidden]")
        return text


class _Assignments:
    """Assignments with their hidden tests, loaded once per batch."""

    def __init__(self, hidden_dir: str | Path | None) -> None:
        self.hidden_dir = hidden_dir
        self.known = known_assignments()
        self._cache: dict[str, tuple[Assignment, str | None]] = {}
        self._lock = threading.Lock()
        self.redactor = Redactor()

    def get(self, assignment_id: str) -> tuple[Assignment, str | None]:
        with self._lock:
            return self._get(assignment_id)

    def _get(self, assignment_id: str) -> tuple[Assignment, str | None]:
        if assignment_id not in self._cache:
            spec = load_assignment(assignment_id)
            source = None
            path = hidden_tests_file(self.hidden_dir, assignment_id)
            if path is not None:
                source = path.read_text(encoding="utf-8")
                try:
                    hidden = load_hidden_tests(source)
                except Exception as err:
                    raise SystemExit(
                        f"error: the hidden tests in {path} do not load "
                        f"({type(err).__name__}: {err}); fix that file and grade again"
                    ) from None
                spec = spec.with_hidden(hidden)
            self._cache[assignment_id] = (spec, source)
            self.redactor = Redactor(
                [src for _, src in self._cache.values() if src],
                [inspect.getsource(importlib.import_module(module_name(a))) for a in self._cache],
            )
        return self._cache[assignment_id]

    def solution(self, assignment_id: str) -> dict | None:
        """The published solution notebook of ``assignment_id`` (for the copies-solution flag)."""
        with self._lock:
            if not hasattr(self, "_solutions"):
                self._solutions: dict[str, dict] = {}
                for path in sorted(SOLUTIONS_DIR.glob("*.ipynb")):
                    try:
                        nb = read_notebook(path)
                    except NotebookError:
                        continue
                    aid = assignment_of(nb)
                    if aid:
                        self._solutions.setdefault(aid, nb)
            return self._solutions.get(assignment_id)

    def from_file_name(self, path: Path) -> str | None:
        name = path.name.lower().replace("_", "-")
        matches = [a for a in self.known if a in name]
        return max(matches, key=len) if matches else None


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


def _run_judge(job: Job, timeout: float) -> tuple[list[dict], int | None, bool, str]:
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
    events = []
    for line in out.decode(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    lines = err.decode(errors="replace").strip().splitlines()
    return events, proc.returncode, timed_out, lines[-1] if lines else ""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _score_tests(row: Row, events: list[dict]) -> list[tuple]:
    """Fill ``row.earned`` and ``row.messages`` from the test events; the tests the process
    stopped in, with how it stopped."""
    spec = row.spec
    assert spec is not None
    by_id = {t.id: t for t in spec.tests}
    stopped_tests = []
    for e in events:
        if e.get("event") == "test" and e.get("id") in by_id:
            t = by_id[e["id"]]
            try:
                fraction = min(max(float(e.get("fraction", 0.0)), 0.0), 1.0)
            except (TypeError, ValueError):
                fraction = 0.0
            row.earned[t.id] = round(t.points * fraction, 6)
            if t.hidden:
                row.messages[t.id] = HIDDEN_PASSED if fraction >= 1.0 else HIDDEN_FAILED
            else:
                row.messages[t.id] = _one_line(e.get("message", ""), 600)
                if e.get("call") and fraction < 1.0:
                    row.calls[t.id] = _one_line(e["call"], 200)
            if e.get("kind"):
                stopped_tests.append((t, str(e["kind"])))
    for t in spec.tests:
        if t.id not in row.earned:
            row.earned[t.id] = 0.0
            row.messages[t.id] = "not run"
    return stopped_tests


def _stopped(row: Row, event: dict, memory_mb: int | None) -> None:
    """Status and reason of a submission whose code cells never finished."""
    kind = event.get("kind")
    detail = str(event.get("reason") or "")
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
    events: list[dict],
    returncode: int | None,
    timed_out: bool,
    stderr: str,
    timeout: float,
    memory_mb: int | None,
) -> None:
    spec = row.spec
    assert spec is not None
    stopped_tests = _score_tests(row, events)
    kinds = {e.get("event") for e in events}
    cells = [e for e in events if e.get("event") == "cell"]
    stopped = [e for e in events if e.get("event") == "stopped"]
    for e in events:
        if e.get("event") == "usage":
            row.usage = {k: e.get(k) for k in ("cpu_seconds", "wall_seconds", "peak_mb", "limits")}
    stage = "the tests" if "cells-done" in kinds else "its code cells"
    if timed_out:
        row.status, row.stopped_by = "timeout", f"wall clock {timeout:g} s"
        row.reason = f"grading did not finish within {timeout:g} s"
    elif stopped:
        _stopped(row, stopped[0], memory_mb)
    elif "done" not in kinds:
        row.status = "crashed"
        if "started" not in kinds:
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
        row.status = str(first.get("kind", "cell-error"))
        if row.status == "memory-limit":
            row.stopped_by = f"memory {memory_mb} MB"
        more = f" (and {len(cells) - 1} more failing cells)" if len(cells) > 1 else ""
        row.reason = _one_line(first.get("reason", "")) + more
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
    options: dict,
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
    row = Row(shown, assignment_id, "ok", spec=spec, cells_timeout=options["timeout"])
    cells = code_cells(nb)
    solution = book.solution(assignment_id)
    given = [c.source for c in code_cells(solution)] if solution else []
    row.flags = flag_cells(cells, solution, given)
    job = Job(
        assignment=assignment_id,
        cells=[{"number": c.number, "source": c.source} for c in cells],
        hidden_source=hidden_source,
        memory_mb=options["memory_mb"],
        cpus=options["cpus"],
        cpu_seconds=int(options["timeout"] + len(spec.tests) * options["call_timeout"]) + 10,
        timeout=options["timeout"],
        call_timeout=options["call_timeout"],
        sandboxed=options["sandbox"],
    )
    backstop = (MAX_RUNS * options["timeout"]) + len(spec.tests) * options["call_timeout"] + 60
    events, returncode, timed_out, stderr = _run_judge(job, backstop)
    _finish(row, events, returncode, timed_out, stderr, backstop, options["memory_mb"])
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
    options = {
        "timeout": float(timeout),
        "call_timeout": float(call_timeout),
        "memory_mb": memory_mb,
        "sandbox": bool(sandbox),
        "cpus": cpus,
    }

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


def _grade_safely(name: str, assignment: str | None, book: _Assignments, options: dict) -> Row:
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
