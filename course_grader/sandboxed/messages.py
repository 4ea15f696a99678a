"""The vocabulary both sides of the sandbox share, one definition of each message: the
student process's limits, its setup (cells and limits), what it reports while its cells
run, the judge's requests while the tests run, and the exception types the judge
re-creates. Imported by the student process (inside the
sandbox) and by the judge (:mod:`course_grader.remote`, :mod:`course_grader.sandbox`)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = [
    "Limits",
    "PORTABLE_ERRORS",
    "Cell",
    "Setup",
    "Started",
    "CellFailed",
    "CellsDone",
    "header",
    "cell_message",
    "short_text",
    "identifier",
    "ErrorReport",
    "Resolve",
    "Call",
    "GetAttr",
    "Backward",
    "Release",
    "Bye",
    "request_header",
    "read_request",
    "Reply",
    "Callback",
    "CallbackReply",
]

# Exceptions whose type the judge re-creates (so a test may catch ValueError, say).
PORTABLE_ERRORS = {
    "ValueError",
    "TypeError",
    "IndexError",
    "KeyError",
    "RuntimeError",
    "NotImplementedError",
    "ZeroDivisionError",
    "ArithmeticError",
    "AttributeError",
    "NameError",
    "LookupError",
    "OverflowError",
    "AssertionError",
    "MemoryError",
    "RecursionError",
    "UnboundLocalError",
    "FloatingPointError",
}


@dataclass(frozen=True)
class Limits:
    """Resource limits of one student process (and every process it starts).

    ``memory_mb``: resident memory of the whole tree where control groups are
    available, and everywhere writable private memory per process
    (``RLIMIT_DATA``, see :func:`course_grader.sandboxed.rlimits.set_limits`);
    ``cpus``: cores the tree may use at once (control groups only);
    ``nice``: added to the student process's niceness, everywhere.
    """

    memory_mb: int | None = 2048
    cpu_seconds: int | None = 120
    cpus: float | None = 1.0
    nice: int = 10
    processes: int = 64
    open_files: int = 256
    file_mb: int = 256
    tmp_mb: int = 256
    extra_env: dict = field(default_factory=dict)


# -- the student process's messages while its cells run ------------------------------------------
# Sent on the socket as wire headers ``{"ev": TAG, **fields}``; the judge reads them with
# :func:`cell_message`, which trusts nothing in them (the student's code may write anything).

#: How a code cell can fail.
CELL_KINDS = ("syntax-error", "cell-error", "exit", "memory-limit")


def short_text(value: object, limit: int) -> str:
    """``value`` if a string, on one line, at most ``limit`` characters; else ``""``."""
    text = " ".join(value.split()) if isinstance(value, str) else ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def identifier(value: object, default: str) -> str:
    """``value`` reduced to a Python identifier of at most 60 characters, else ``default``."""
    text = re.sub(r"\W", "", value)[:60] if isinstance(value, str) else ""
    return text if text and not text[0].isdigit() else default


@dataclass(frozen=True)
class Cell:
    """One code cell to run: its number in the notebook (1-based) and its source."""

    number: int
    source: str


@dataclass(frozen=True)
class Setup:
    """The judge's first message to the student process: the cells and the limits."""

    cells: list[Cell]
    limits: Limits
    sandboxed: bool = True

    def to_header(self) -> dict:
        return {
            "cells": [asdict(c) for c in self.cells],
            "sandboxed": self.sandboxed,
            "limits": asdict(self.limits),
        }

    @classmethod
    def from_header(cls, header: dict) -> Setup:
        return cls(
            cells=[Cell(**c) for c in header["cells"]],
            limits=Limits(**header.get("limits", {})),
            sandboxed=bool(header.get("sandboxed")),
        )


@dataclass(frozen=True)
class Started:
    """The student process is running and about to run the cells."""

    TAG = "started"


@dataclass(frozen=True)
class CellFailed:
    """A code cell that did not run to its end: ``kind`` is one of :data:`CELL_KINDS`."""

    TAG = "cell"
    number: int
    kind: str
    reason: str

    @classmethod
    def checked(cls, number: object, kind: object, reason: object) -> CellFailed:
        """From untrusted values: a number that is an int, a known kind, a short reason."""
        return cls(
            number=number if type(number) is int else 0,
            kind=kind if kind in CELL_KINDS else "cell-error",
            reason=short_text(reason, 300),
        )


@dataclass(frozen=True)
class CellsDone:
    """Every cell ran (failing or not); ``neutralised``: the shell lines not run."""

    TAG = "cells-done"
    neutralised: tuple[str, ...] = ()


CellMessage = Started | CellFailed | CellsDone


def header(message: CellMessage) -> dict:
    """The wire header of ``message``."""
    return {"ev": message.TAG, **asdict(message)}


def cell_message(head: dict) -> CellMessage:
    """The student process's message in ``head``, checked; ProtocolError-free: raises
    ValueError for anything else (the caller turns it into a protocol failure)."""
    ev = head.get("ev")
    if ev == CellFailed.TAG:
        return CellFailed.checked(head.get("number"), head.get("kind"), head.get("reason"))
    if ev == Started.TAG:
        return Started()
    if ev == CellsDone.TAG:
        shown = head.get("neutralised")
        lines = shown if isinstance(shown, list) else []
        return CellsDone(tuple(short_text(x, 200) for x in lines[:20]))
    raise ValueError("unexpected message while the cells ran")


# -- an exception of the student's code, as the judge learns of it --------------------------------


@dataclass(frozen=True)
class ErrorReport:
    """What the judge needs to re-create and explain an exception from the student's code.

    ``type``: the builtin type the judge re-creates (one of :data:`PORTABLE_ERRORS`, else
    empty); ``name``: the exception's class name; ``where``/``line``: the notebook cell
    and line it came from; ``exit``: a ``sys.exit()``; ``memory``: out of memory;
    ``unsendable``: the result could not be sent back. Sent in replies as
    ``{"err": {...}}``; :class:`~course_lib.grading.runner.RemoteError` holds it as a dict.
    """

    name: str = "Exception"
    summary: str = ""
    type: str = ""
    where: str = ""
    line: str = ""
    exit: bool = False
    memory: bool = False
    unsendable: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def checked(cls, report: object) -> ErrorReport:
        """From an untrusted reply: known types only, short one-line texts, booleans."""
        r = report if isinstance(report, dict) else {}
        return cls(
            type=r.get("type") if r.get("type") in PORTABLE_ERRORS else "",
            name=identifier(r.get("name"), "Exception"),
            summary=short_text(r.get("summary"), 300),
            where=short_text(r.get("where"), 80),
            line=short_text(r.get("line"), 120),
            exit=r.get("exit") is True,
            memory=r.get("memory") is True,
            unsendable=r.get("unsendable") is True,
        )


# -- the judge's requests while the tests run ----------------------------------------------------
# Sent as wire headers ``{"op": OP, "id": n, **fields}``; ``data`` fields hold wire-encoded
# values (:func:`course_grader.sandboxed.wire.encode`) whose bytes travel as blobs. The
# student process answers each with ``{"id": n, "ok": ...}`` or ``{"id": n, "err": ...}``
# (a :class:`Reply`), which the judge checks field by field; while a call runs, the student's
# code may call the judge's functions back (:class:`Callback`, :class:`CallbackReply`).


@dataclass(frozen=True)
class Resolve:
    """Which of ``names`` the notebook defines: plain values, or handles of callables."""

    OP = "resolve"
    names: list[str]


@dataclass(frozen=True)
class Call:
    """Call the object ``target`` with the encoded ``{"args", "kwargs"}``; ``grad``: track
    gradients of the inputs that require them."""

    OP = "call"
    target: int | None = None
    data: Any = None
    grad: bool = False


@dataclass(frozen=True)
class GetAttr:
    """Read an attribute of ``target``, named by the encoded ``{"name"}``."""

    OP = "getattr"
    target: int | None = None
    data: Any = None


@dataclass(frozen=True)
class Backward:
    """The gradients of a call's inputs (graph ``graph``), given the encoded output grads."""

    OP = "backward"
    graph: int
    data: Any = None


@dataclass(frozen=True)
class Release:
    """The test ended: forget its objects and graphs (its callbacks stop working)."""

    OP = "release"


@dataclass(frozen=True)
class Bye:
    """The judge is done with this process."""

    OP = "bye"


Request = Resolve | Call | GetAttr | Backward | Release | Bye
_REQUESTS = {cls.OP: cls for cls in (Resolve, Call, GetAttr, Backward, Release, Bye)}


def request_header(request: Request, rid: int | None = None) -> dict:
    """The wire header of ``request`` (numbered ``rid`` when an answer is awaited)."""
    head = {"op": request.OP, **{f.name: getattr(request, f.name) for f in fields(request)}}
    if rid is not None:
        head["id"] = rid
    return head


def read_request(head: dict) -> tuple[Request, Any]:
    """``(request, its id)`` from the judge's header; ValueError for an unknown request."""
    cls = _REQUESTS.get(head.get("op"))
    if cls is None:
        raise ValueError(f"unknown request {head.get('op')!r}")
    given = {f.name: head[f.name] for f in fields(cls) if f.name in head}
    return cls(**given), head.get("id")


# -- answers and callbacks ----------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """The student process's answer to request ``id``: ``ok`` (wire-encoded) or ``err``; to a
    :class:`Call`, also ``gens`` (its generators' new states) and ``graph`` (the handle a
    :class:`Backward` names)."""

    id: Any
    ok: Any = None
    err: ErrorReport | None = None
    gens: Any = None
    graph: Any = None

    def to_header(self) -> dict:
        head: dict = {"id": self.id}
        if self.err is not None:
            head["err"] = self.err.to_dict()
        else:
            head["ok"] = self.ok
        head |= {k: v for k, v in (("gens", self.gens), ("graph", self.graph)) if v is not None}
        return head

    @classmethod
    def read(cls, head: dict) -> Reply:
        """From the student process's header, which the judge trusts in nothing: ``err``
        checked here; ``ok``, ``gens`` and ``graph`` as sent, for the caller to check."""
        err = ErrorReport.checked(head["err"]) if "err" in head else None
        return cls(head.get("id"), head.get("ok"), err, head.get("gens"), head.get("graph"))


@dataclass(frozen=True)
class Callback:
    """The student's code calls the judge's function ``cb`` (handed to it by a test), with
    the encoded ``{"args", "kwargs"}``; ``seq`` numbers the call."""

    cb: Any
    seq: Any
    data: Any = None

    def to_header(self) -> dict:
        return {"cb": self.cb, "seq": self.seq, "data": self.data}

    @classmethod
    def read(cls, head: dict) -> Callback | None:
        """The callback in ``head``, or None when ``head`` is not one (a reply)."""
        if "cb" not in head:
            return None
        return cls(head.get("cb"), head.get("seq"), head.get("data"))


@dataclass(frozen=True)
class CallbackReply:
    """The judge's answer to callback ``seq``: ``ok`` (wire-encoded) or ``err`` (a text)."""

    seq: Any
    ok: Any = None
    err: str | None = None

    def to_header(self) -> dict:
        if self.err is not None:
            return {"cbreply": self.seq, "err": self.err}
        return {"cbreply": self.seq, "ok": self.ok}

    @classmethod
    def read(cls, head: dict) -> CallbackReply:
        err = str(head["err"]) if "err" in head else None
        return cls(head.get("cbreply"), head.get("ok"), err)
