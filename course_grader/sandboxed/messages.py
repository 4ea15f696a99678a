"""The vocabulary both sides of the sandbox share: the student process's limits, and the
exception types the judge re-creates. Imported by the student process (inside the
sandbox) and by the judge (:mod:`course_grader.remote`, :mod:`course_grader.sandbox`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Limits", "PORTABLE_ERRORS"]

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
    (``RLIMIT_DATA``, see :func:`course_grader.sandboxed.student._set_limits`);
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
