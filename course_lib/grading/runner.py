"""Run one test against a student's namespace and turn any outcome into a short verdict.

Whatever happens -- a wrong result, an exception raised inside the student's
code, a missing definition, ``sys.exit()`` -- the runner returns a
:class:`TestResult` and never lets a traceback through. When the student's
code raised, the message names the exception and the student's own line
(the innermost frame that is not in a library), never a line of the
library or of the test.
"""

from __future__ import annotations

import linecache
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import torch

from course_lib.grading.expect import Partial, TestFailed
from course_lib.grading.registry import TestSpec

__all__ = ["TestResult", "RemoteError", "run_test", "student_error", "exception_summary"]

HIDDEN_PASSED = "passed"
HIDDEN_FAILED = "hidden test failed (its details stay with the instructor)"

_LIBRARY_DIRS = tuple(
    str(Path(p).resolve())
    for p in {
        str(Path(__file__).resolve().parents[1]),  # course_lib
        *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
        str(Path(torch.__file__).resolve().parent),
    }
)


@dataclass(frozen=True)
class TestResult:
    """The verdict on one test: the fraction of its points earned and a one-line message."""

    __test__ = False  # not a pytest test class

    spec: TestSpec
    fraction: float
    message: str

    @property
    def passed(self) -> bool:
        return self.fraction >= 1.0

    @property
    def earned(self) -> float:
        return round(self.spec.points * self.fraction, 6)


def _is_library(filename: str) -> bool:
    if filename.startswith("<frozen") or filename.startswith("<hidden"):
        return True
    if filename.startswith("<"):
        return False  # a notebook cell ("<ipython-input-...>", "<cell 3>") or exec'd code
    try:
        resolved = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return resolved.startswith(_LIBRARY_DIRS)


def _student_frame(tb: TracebackType | None) -> traceback.FrameSummary | None:
    """The innermost frame of the traceback that belongs to the student's code."""
    frames = [f for f in traceback.extract_tb(tb) if not _is_library(f.filename)]
    return frames[-1] if frames else None


def _where(frame: traceback.FrameSummary, with_line: bool = True) -> str:
    name = frame.filename
    if name.startswith("<cell "):
        place = f"code cell {name[6:-1]}, line {frame.lineno}"
    else:
        place = f"line {frame.lineno} of your cell"
    line = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    return f"{place}: {line}" if line and with_line else place


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def exception_summary(exc: BaseException, cell: str | None = None) -> str:
    """``"ValueError: ... (code cell 3, line 4: x = ...)"``: the exception and the student's line.

    With ``cell`` (a cell's file name, e.g. ``"<cell 3>"``), an error raised in that
    very cell reads ``"line 4: ValueError: ..."`` instead.
    """
    frame = _student_frame(exc.__traceback__)
    if frame is not None and cell is not None and frame.filename == cell:
        return f"line {frame.lineno}: {_short(exc)}"
    where = f" ({_where(frame)})" if frame else ""
    return f"{_short(exc)}{where}"


class RemoteError(Exception):
    """An exception raised by the student's code in the student's process (batch grading).

    ``report`` says what the student's side saw: the exception's type name, a
    one-line summary, where in the notebook (``code cell 3, line 4``) and that
    line. :mod:`course_grader.remote` raises it, as an instance of the
    builtin type too when that is a common one (``ValueError``...).
    """

    report: dict = {}

    def __str__(self) -> str:
        return str(self.report.get("summary", ""))


def _remote_report(exc: BaseException) -> dict | None:
    return exc.report if isinstance(exc, RemoteError) and "summary" in exc.report else None


def student_error(exc: BaseException, who: str = "your code") -> str:
    """``"<who> raised ValueError: ... (code cell 3, line 4: x = ...)"``, without a traceback."""
    report = _remote_report(exc)
    if report is not None:
        where = f" ({report['where']}: {report['line']})" if report["where"] else ""
        if report["exit"]:
            return f"{who} called sys.exit() (or exit()); a function should return its result"
        if report["name"] == "NotImplementedError":
            where = f" ({report['where']})" if report["where"] else ""
            return (
                f"not written yet: replace the `raise NotImplementedError` line{where} "
                "with your code"
            )
        if report["unsendable"]:
            return f"the result cannot be checked: {report['summary']}"
        if report["name"] == "CallbackError":
            return f"{who} called a function of the test wrongly: {report['summary']}"
        return f"{who} raised {report['summary']}{where}"
    if isinstance(exc, SystemExit):
        return f"{who} called sys.exit() (or exit()); a function should return its result"
    if type(exc) is NotImplementedError:
        frame = _student_frame(exc.__traceback__)
        where = f" ({_where(frame, with_line=False)})" if frame else ""
        return (
            f"not written yet: replace the `raise NotImplementedError` line{where} with your code"
        )
    return f"{who} raised {exception_summary(exc)}"


def _call(spec: TestSpec, namespace: dict) -> object:
    missing = [n for n in spec.needs if n not in namespace]
    if missing:
        names = ", ".join(f"`{n}`" for n in missing)
        raise TestFailed(
            f"{names} is not defined: run the cell that defines it (and keep the name as given)"
        )
    with torch.random.fork_rng(devices=[]):
        return spec.func(**{n: namespace[n] for n in spec.needs})


def run_test(spec: TestSpec, namespace: dict) -> TestResult:
    """Run ``spec`` on the student's ``namespace``; never raises (except KeyboardInterrupt)."""
    try:
        outcome = _call(spec, namespace)
    except TestFailed as exc:
        fraction, message = 0.0, str(exc)
    except AssertionError as exc:
        frame = _student_frame(exc.__traceback__)
        if frame is not None or _remote_report(exc) is not None:  # the student's own assert
            fraction, message = 0.0, student_error(exc)
        else:
            fraction, message = 0.0, str(exc) or "assertion failed"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: B036 - the student's code may raise anything
        report = _remote_report(exc)
        if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc):
            fraction, message = 0.0, f"out of memory: {student_error(exc)}"
        elif report is not None:
            fraction, message = 0.0, student_error(exc)
        elif _student_frame(exc.__traceback__) is not None or isinstance(exc, SystemExit):
            fraction, message = 0.0, student_error(exc)
        else:
            fraction, message = 0.0, f"the result could not be checked: {_short(exc)}"
    else:
        if isinstance(outcome, Partial):
            fraction, message = min(max(float(outcome.fraction), 0.0), 1.0), outcome.message
        else:
            fraction, message = 1.0, ""
    if spec.hidden:
        message = HIDDEN_PASSED if fraction >= 1.0 else HIDDEN_FAILED
    return TestResult(spec, fraction, message)
