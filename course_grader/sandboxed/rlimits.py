"""The student process's own limits, set before any student code runs (inside the sandbox).

:func:`drop_privileges` leaves root for an unprivileged user of its own (so that the
process limit holds), and :func:`set_limits` sets the per-process resource limits of
:class:`~course_grader.sandboxed.messages.Limits`; the control group, where there is
one (:mod:`course_grader.cgroup`), limits the whole tree.
"""

from __future__ import annotations

import os

from course_grader.sandboxed.messages import Limits

__all__ = ["drop_privileges", "set_limits"]


def drop_privileges() -> None:
    uid = os.environ.pop("COURSE_SANDBOX_UID", None)
    if uid is None or os.geteuid() != 0:
        return
    uid_n = int(uid)
    os.setgroups([])
    os.setresgid(uid_n, uid_n, uid_n)
    os.setresuid(uid_n, uid_n, uid_n)


def _unused_writable() -> int:
    """Bytes of writable memory this process has mapped but not touched (``VmData - VmRSS``).

    Importing a CUDA build of torch maps about a GB of writable library data
    it never touches (torch 2.11 with CUDA 13: ``VmData`` 1.35 GB, ``VmRSS``
    0.5 GB); the CPU build almost none. It is added to the ``RLIMIT_DATA``
    budget, so that a submission may allocate about as much with either build.
    """
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        data, rss = (int(fields[k].split()[0]) << 10 for k in ("VmData", "VmRSS"))
    except (OSError, KeyError, ValueError):
        return 0
    return max(0, data - rss)


def set_limits(limits: Limits) -> None:
    """Per-process limits, set before any student code runs.

    Memory is limited as writable private memory (``RLIMIT_DATA``), which is
    what a submission's allocations take, and not as address space
    (``RLIMIT_AS``): a CUDA build of torch maps more than 2 GB of library code
    and reserved ranges when it is imported, which ``RLIMIT_DATA`` does not
    count. Its budget is ``memory_mb`` plus the writable memory the process
    has mapped but not touched when the limits are set (see
    :func:`_unused_writable`). The control group, where there is one, limits
    the resident memory of the whole process tree
    (:mod:`course_grader.cgroup`).
    """
    import resource

    def cap(which: int, value: int) -> None:
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    if limits.memory_mb:  # writable private memory: not the address space (issue 29)
        cap(resource.RLIMIT_DATA, (int(limits.memory_mb) << 20) + _unused_writable())
    if limits.nice:
        os.nice(int(limits.nice))
    if limits.cpu_seconds:
        cpu = int(limits.cpu_seconds)
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5 if hard == -1 else hard))
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_FSIZE, int(limits.file_mb) << 20)
    cap(resource.RLIMIT_NOFILE, int(limits.open_files))
    if limits.processes:
        cap(resource.RLIMIT_NPROC, int(limits.processes))
