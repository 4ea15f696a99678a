"""A control group per submission: its resident memory and its CPU share, bounded by the kernel.

The judge (:mod:`course_grader.judge`) puts each student process, and so
every process it forks, into a control group of its own before any student
code runs, with

* ``memory``: at most ``--memory-mb`` of *resident* memory for the whole
  process tree (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``), and
  no swap; the kernel kills the tree when it goes over, and the gradebook says
  the memory limit stopped it (``memory.events``/``memory.oom_control``
  count the kill);
* ``cpu``: at most ``--cpus`` cores, however many processes it forks (v2
  ``cpu.max``, v1 ``cpu.cfs_quota_us``);
* ``pids``: at most ``processes`` tasks (v2 and v1 ``pids.max``).

Address space is not limited: a CUDA build of torch maps more than 2 GB of
libraries when it is imported, most of it never resident.

Control groups need write access to the hierarchy: root, or a delegated
subtree (``systemd-run --user --scope -p Delegate=yes python -m
course_lib.grading grade ...``). Where neither is there, :func:`support`
says so and the student process falls back on its own limits (see
:func:`course_grader.sandboxed.rlimits.set_limits`): ``RLIMIT_DATA`` (writable
private memory, which reserved or read-only mappings such as a library's code
do not count), ``RLIMIT_CPU`` per process, ``RLIMIT_NPROC`` and ``nice``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Support",
    "Group",
    "Usage",
    "support",
    "create",
    "footprint_mb",
    "check_memory_limit",
]

CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")
PERIOD_US = 100_000


@dataclass(frozen=True)
class Support:
    """Where this process may create control groups: a parent folder per controller."""

    version: int  # 2, 1, or 0 for none
    parents: dict[str, str] = field(default_factory=dict)  # controller -> parent folder
    why_not: str = ""  # when version is 0

    def describe(self) -> str:
        if not self.version:
            return f"no control groups ({self.why_not}); per-process limits and nice"
        return f"cgroup v{self.version} ({', '.join(sorted(self.parents))})"


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file-system type, options) of every cgroup mount."""
    out = []
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append((parts[1], parts[2], set(parts[3].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under ``""`` its v2 path."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            paths[name] = path
    return paths


def _writable_parent(folder: Path) -> bool:
    probe = folder / f"course-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


ENV_PARENT = "COURSE_GRADING_CGROUP_V2"  # the v2 parent the batch prepared, for its judges


def _v2_parent(mount: str, path: str) -> str | None:
    """A folder under which children get the memory and cpu controllers, or None.

    In cgroup v2 a group that holds processes cannot hand controllers to its
    children. Where this process's group holds only this process (a
    delegated scope: ``systemd-run --user --scope -p Delegate=yes``), it moves
    into a leaf of its own, ``course-grading-<pid>/grader``, enables the
    controllers above it, and the submissions' groups become its siblings.
    The judges, started later, find the parent in ``COURSE_GRADING_CGROUP_V2``.
    """
    inherited = os.environ.get(ENV_PARENT)
    if inherited and os.path.isdir(inherited):
        return inherited
    base = Path(mount + path)
    parent = base / f"course-grading-{os.getpid()}"
    try:
        have = set((base / "cgroup.controllers").read_text().split())
        if not {"memory", "cpu"} <= have:
            return None
        wanted = " ".join("+" + c for c in ("memory", "cpu", "pids") if c in have)
        parent.mkdir(exist_ok=True)
        if (base / "cgroup.procs").read_text().split() == [str(os.getpid())]:
            (parent / "grader").mkdir(exist_ok=True)
            (parent / "grader" / "cgroup.procs").write_text("0")
            atexit.register(_leave, base, parent)
        (base / "cgroup.subtree_control").write_text(wanted)  # refused where base holds others
        (parent / "cgroup.subtree_control").write_text(wanted)
    except OSError:
        _leave(base, parent)
        return None
    atexit.register(_rmdir, parent)
    os.environ[ENV_PARENT] = str(parent)
    return str(parent)


def _leave(base: Path, parent: Path) -> None:
    """Move back to ``base`` (if this process moved) and delete the folders made here."""
    with contextlib.suppress(OSError):
        if str(os.getpid()) in (parent / "grader" / "cgroup.procs").read_text().split():
            (base / "cgroup.procs").write_text("0")
    for folder in (parent / "grader", parent):
        _rmdir(folder)


def _rmdir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


_support: Support | None = None


def support() -> Support:
    """What this machine allows this process (computed once)."""
    global _support
    if _support is not None:
        return _support
    if os.environ.get("COURSE_GRADING_CGROUPS", "1") == "0":
        _support = Support(0, why_not="COURSE_GRADING_CGROUPS=0")
        return _support
    mounts, own = _mounts(), _own_paths()
    for mount, kind, _ in mounts:
        if kind == "cgroup2" and "" in own:
            parent = _v2_parent(mount, own[""])
            if parent:
                _support = Support(2, dict.fromkeys(("memory", "cpu", "pids"), parent))
                return _support
    parents = {}
    for mount, kind, options in mounts:
        if kind != "cgroup":
            continue
        for name in CONTROLLERS:
            if name in options and name in own and name not in parents:
                folder = Path(mount + own[name])
                if _writable_parent(folder):
                    parents[name] = str(folder)
    if {"memory", "cpu"} <= set(parents):
        _support = Support(1, parents)
    else:
        why = "no writable memory and cpu controllers: grade as root or in a delegated cgroup"
        _support = Support(0, why_not=why)
    return _support


@dataclass
class Group:
    """One submission's control group (one folder per v1 controller, one in v2)."""

    version: int
    folders: dict[str, Path]
    memory_mb: int | None
    cpus: float | None

    def _write(self, controller: str, name: str, value: str) -> None:
        if controller in self.folders:
            (self.folders[controller] / name).write_text(value)

    def _read(self, controller: str, name: str) -> str:
        try:
            return (self.folders[controller] / name).read_text()
        except (KeyError, OSError):
            return ""

    def enter(self) -> None:
        """Move the calling process in (``preexec_fn`` of the student's ``Popen``)."""
        for folder in dict.fromkeys(self.folders.values()):
            (folder / "cgroup.procs").write_text("0")

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the group for going over its memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in self._read("memory", name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                return True
        return False

    def cpu_seconds(self) -> float | None:
        """CPU time the whole group has used so far."""
        if self.version == 2:
            for line in self._read("cpu", "cpu.stat").splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
            return None
        text = self._read("cpuacct", "cpuacct.usage").strip()
        return int(text) / 1e9 if text.isdigit() else None

    def peak_mb(self) -> float | None:
        """The most resident memory the group has held (None where the kernel does not say)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        text = self._read("memory", name).strip()
        return int(text) / (1 << 20) if text.isdigit() else None

    def pids(self) -> list[int]:
        seen: set[int] = set()
        for folder in self.folders.values():
            with contextlib.suppress(OSError):
                seen.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
        return sorted(seen)

    def remove(self) -> None:
        """Kill whatever is left in the group, then delete it."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                self._write("memory", "cgroup.kill", "1")
        for _ in range(50):
            left = self.pids()
            if not left:
                break
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for folder in dict.fromkeys(self.folders.values()):
            with contextlib.suppress(OSError):
                folder.rmdir()


@dataclass
class Usage:
    """What one submission's process trees used, summed over its restarts."""

    cpu_seconds: float | None = None
    wall_seconds: float = 0.0
    peak_mb: float | None = None

    def add(self, group: Group) -> None:
        cpu, peak = group.cpu_seconds(), group.peak_mb()
        if cpu is not None:
            self.cpu_seconds = (self.cpu_seconds or 0.0) + cpu
        if peak is not None:
            self.peak_mb = max(self.peak_mb or 0.0, peak)


_counter = 0


def create(memory_mb: int | None, cpus: float | None, processes: int | None) -> Group | None:
    """A fresh control group with these limits, or None where :func:`support` finds none."""
    global _counter
    sup = support()
    if not sup.version:
        return None
    _counter += 1
    name = f"course-grading-{os.getpid()}-{_counter}"
    folders = {c: Path(p) / name for c, p in sup.parents.items()}
    group = Group(sup.version, folders, memory_mb, cpus)
    try:
        for folder in dict.fromkeys(folders.values()):
            folder.mkdir()
        _limit(group, sup.version, memory_mb, cpus, processes)
    except OSError:
        group.remove()
        return None
    return group


def _limit(group: Group, version: int, memory_mb, cpus, processes) -> None:
    if version == 2:
        if memory_mb:
            group._write("memory", "memory.max", str(memory_mb << 20))
            with contextlib.suppress(OSError):
                group._write("memory", "memory.swap.max", "0")
        if cpus:
            group._write("cpu", "cpu.max", f"{max(1000, int(cpus * PERIOD_US))} {PERIOD_US}")
        if processes:
            with contextlib.suppress(OSError):
                group._write("pids", "pids.max", str(processes))
        return
    if memory_mb:
        group._write("memory", "memory.limit_in_bytes", str(memory_mb << 20))
        with contextlib.suppress(OSError):  # no swap accounting on many kernels
            group._write("memory", "memory.memsw.limit_in_bytes", str(memory_mb << 20))
        with contextlib.suppress(OSError):
            group._write("memory", "memory.swappiness", "0")
    if cpus:
        group._write("cpu", "cpu.cfs_period_us", str(PERIOD_US))
        group._write("cpu", "cpu.cfs_quota_us", str(max(1000, int(cpus * PERIOD_US))))
    if processes:
        with contextlib.suppress(OSError):
            group._write("pids", "pids.max", str(processes))


HEADROOM_MB = 128
_footprint: dict[str, float] = {}


def footprint_mb(env: dict[str, str] | None = None) -> float:
    """Memory a student process takes on this machine before any student code runs, in MB.

    Measured once, in a process that imports what the student process imports
    (Python, numpy, torch, the grader's channel): its resident memory
    (``VmRSS``). A CUDA build of torch maps far more address space than that
    (torch 2.11 with CUDA 13: ``VmSize`` 3.8 GB, ``VmRSS`` 0.5 GB), which is
    why no limit is on address space.
    """
    if "mb" not in _footprint:
        code = (
            "import re, course_grader.sandboxed.student as _\n"
            "s = open('/proc/self/status').read()\n"
            "print(int(re.search(r'VmRSS:\\s+(\\d+)', s).group(1)))"
        )
        out = subprocess.run(
            [sys.executable, "-s", "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        if out.returncode != 0:
            raise RuntimeError(f"could not measure a student process's memory: {out.stderr[-300:]}")
        _footprint["mb"] = int(out.stdout.split()[-1]) / 1024
    return _footprint["mb"]


def check_memory_limit(memory_mb: int, env: dict[str, str] | None = None) -> None:
    """Stop, naming the fix, when ``memory_mb`` leaves a submission no room on this machine."""
    base = footprint_mb(env)
    if memory_mb < base + HEADROOM_MB:
        raise SystemExit(
            f"error: --memory-mb {memory_mb} is too small on this machine: a submission's "
            f"process takes {base:.0f} MB (Python and torch) before any of its code runs. "
            f"Use at least {int(base + HEADROOM_MB)}; the default, 2048, suits most exercises."
        )
