"""The life of one student process, as the judge sees it: started in its sandbox and
control group, sent its cells and limits, its cells' outcomes collected, killed once, with
what ended it. :class:`~course_grader.remote.Session` adds the tests' requests.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

from course_grader import cgroup, sandbox
from course_grader.sandboxed import wire
from course_grader.sandboxed.messages import (
    Bye,
    Cell,
    CellMessage,
    CellsDone,
    Limits,
    Setup,
    cell_message,
    request_header,
)
from course_lib.grading.expect import TestFailed

__all__ = ["StudentProcess", "StudentGone", "Event"]


class StudentGone(TestFailed):
    """The student's process stopped answering: a timeout, a crash or a broken protocol."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind  # "timeout", "crashed", "protocol", "gone"


#: What the cells' run reports to the judge (typed messages of the student process).
Event = CellMessage


class StudentProcess:
    """The life of one student process: started in its sandbox and control group, its cells
    run, then killed once, with what ended it (:class:`Session` adds the requests)."""

    def __init__(
        self,
        cells: list[Cell],
        limits: Limits,
        sandboxed: bool = True,
        cells_timeout: float = 60.0,
        call_timeout: float = 10.0,
        uid: int | None = None,
        max_bytes: int = 256 << 20,
    ) -> None:
        self.cells = cells
        self.limits = limits
        self.sandboxed = sandboxed
        self.cells_timeout = cells_timeout
        self.call_timeout = call_timeout
        self.uid = uid
        self.max_bytes = max_bytes
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.dead: str | None = None  # why the session ended, when it did
        self.dead_kind: str | None = None
        self.hidden = False  # the current test is hidden: say nothing of it to the student
        self.calls: list[str] = []  # what the current test called
        self.fatal_call: str | None = None  # the function whose call ended the session
        self._next_id = 0
        self._names: dict[str, Any] = {}
        self._stderr = None
        self._workdir: tempfile.TemporaryDirectory | None = None
        self.group: cgroup.Group | None = None  # its control group, where the machine allows
        self.usage = cgroup.Usage()  # CPU time, wall time and memory of the process tree
        self._started = 0.0

    def start(self) -> tuple[list[Event], str | None, str | None]:
        """Start the process and run the cells: (events, failure kind, failure reason).

        ``failure kind`` is None when every cell ran (failing cells are events,
        not failures), else ``"timeout"``, ``"crashed"`` or ``"protocol"``.
        """
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        read_args, write_args = os.pipe()
        argv, options, env, _ = sandbox.student_command(
            self.sandboxed, self.limits, child.fileno(), read_args, self.uid
        )
        if options is not None:
            os.write(write_args, options)  # a few kB: fits in the pipe
        os.close(write_args)
        self._stderr = tempfile.TemporaryFile()
        cwd = None
        if not self.sandboxed:
            self._workdir = tempfile.TemporaryDirectory(prefix="course-grade-")
            cwd = self._workdir.name
            env = {**env, "HOME": cwd, "TMPDIR": cwd}
        limits = self.limits
        processes = limits.processes if self.sandboxed else None
        self.group = cgroup.create(limits.memory_mb, limits.cpus, processes)
        self._started = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                argv,
                preexec_fn=self.group.enter if self.group else None,
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,
                stderr=self._stderr,
                pass_fds=(child.fileno(), read_args),
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        finally:
            child.close()
            os.close(read_args)
        self.sock = parent
        events: list[Event] = []
        deadline = time.monotonic() + self.cells_timeout
        try:
            wire.send(parent, self._setup().to_header())
            while True:
                header, _ = wire.recv(parent, deadline, limit=1 << 20)
                try:
                    event = cell_message(header)
                except ValueError as err:
                    raise wire.ProtocolError(str(err)) from None
                events.append(event)
                if isinstance(event, CellsDone):
                    return events, None, None
        except wire.Timeout:
            self.kill("timeout", "")
            return events, "timeout", None
        except (wire.Closed, OSError):
            code = self.kill("crashed", "")
            return events, self.dead_kind, self._death(code)
        except wire.ProtocolError as err:
            self.kill("protocol", "")
            return events, "protocol", f"the notebook's process broke the grading protocol ({err})"

    def _setup(self) -> Setup:
        """The first message to the student process: the cells and its limits."""
        processes = self.limits.processes if self.sandboxed else 0
        limits = dataclasses.replace(self.limits, processes=processes, extra_env={})
        return Setup(self.cells, limits, self.sandboxed)

    def _death(self, code: int | None) -> str:
        if self.dead_kind == "memory-limit":
            return f"stopped by the grader's memory limit ({self.limits.memory_mb} MB resident)"
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return f"killed by {name}"
        tail = b""
        if self._stderr is not None:
            try:
                self._stderr.seek(0, os.SEEK_END)
                size = self._stderr.tell()
                self._stderr.seek(max(0, size - 2000))
                tail = self._stderr.read()
            except (OSError, ValueError):
                pass
        lines = tail.decode(errors="replace").strip().splitlines()
        return f"exit code {code}" + (f"; {lines[-1][:200]}" if lines else "")

    def kill(self, kind: str, message: str) -> int | None:
        """End the process tree (the whole sandbox), once; return its exit code."""
        if self.dead is None:
            self.dead, self.dead_kind = message or kind, kind
            self.fatal_call = getattr(self, "_calling", None)
        code = None
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        if self.proc is not None:
            if kind == "crashed":  # it is ending by itself: let it, to learn its exit code
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, 9)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    self.proc.kill()
                except OSError:
                    pass
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
            try:  # an unsandboxed child that ran setsid: its group, if it kept one
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        self._end_group()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        return code

    def _end_group(self) -> None:
        """Record the tree's usage, learn whether the memory limit killed it, delete its group."""
        if self._started:
            self.usage.wall_seconds += time.monotonic() - self._started
            self._started = 0.0
        if self.group is None:
            return
        self.usage.add(self.group)
        if self.group.oom_killed() and self.dead_kind == "crashed":
            self.dead_kind = "memory-limit"
            self.dead = (
                f"stopped by the grader's memory limit ({self.limits.memory_mb} MB resident)"
            )
        self.group.remove()
        self.group = None

    def close(self) -> None:
        if self.dead is None and self.sock is not None:
            try:
                wire.send(self.sock, request_header(Bye()))
            except OSError:
                pass
        self.kill("gone", "the session was closed")
