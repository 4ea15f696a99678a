"""The sandbox each graded submission runs in: Debian's ``bubblewrap`` (``bwrap``).

:func:`student_command` builds the command line of a student process
(:mod:`course_grader.sandboxed.student`) inside a fresh ``bwrap`` sandbox:

* **no network** (a new, empty network namespace) and no IPC or UTS sharing;
* **a read-only view of only what Python needs**: ``/usr`` (and the ``/bin``,
  ``/lib`` links), the Python installation and virtual environment, the
  ``course_lib`` package at ``/opt/course/course_lib`` and, of the grader, only
  ``course_grader/sandboxed`` (the student process and the wire format), the course data folder
  when ``COURSE_DATA_DIR`` is set; nothing else of the host: no home folder,
  no other submission, no hidden tests, no gradebook, no grader working folder;
* a private, size-limited ``/tmp`` (the working folder) that disappears with it;
* **its own PID namespace** with a fresh ``/proc``: the student sees its own
  processes only, and every process of the sandbox dies when it ends
  (``--die-with-parent``; a PID namespace dies with its first process), so a
  double-forked or ``setsid`` child cannot outlive the grading;
* ``--new-session`` (no terminal to inject into), an empty environment but for
  a few variables, and the bwrap arguments passed on a pipe (``--args``), so
  even the sandbox's ``/proc/1/cmdline`` names no host path;
* a control group of its own where the machine allows one
  (:mod:`course_grader.cgroup`: resident memory, CPU share, processes);
* resource limits set by the student process before any student code runs:
  writable memory, CPU time, file size, open files, processes, niceness (when grading as
  root, the student process also drops to an unprivileged user of its own,
  so that the process limit holds: root is exempt from it).

Where ``bwrap`` is missing, :func:`require_bwrap` stops with a message that
says how to install it; ``--no-sandbox`` (for a class you trust) runs the
student process without it and :data:`NO_SANDBOX_WARNING` says what that
gives up.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from course_grader.sandboxed.messages import Limits

__all__ = [
    "SandboxUnavailable",
    "Limits",
    "require_bwrap",
    "student_command",
    "NO_SANDBOX_WARNING",
    "INSTALL_HINT",
]

GRADER_DIR = Path(__file__).resolve().parent  # .../course_grader
#: course_lib's folder, found without importing it (its student side runs in the sandbox).
PACKAGE_DIR = Path(importlib.util.find_spec("course_lib").origin).resolve().parent
#: Where Python finds both packages outside the sandbox (one folder in a checkout or install).
PACKAGE_PARENTS = tuple(dict.fromkeys(str(d.parent) for d in (PACKAGE_DIR, GRADER_DIR)))
INNER_ROOT = "/opt/course"
INSTALL_HINT = (
    "grading runs each submission in a bubblewrap sandbox, and `bwrap` was not found. "
    "Install it with `sudo apt-get install bubblewrap` (Debian, Ubuntu), "
    "`sudo dnf install bubblewrap` (Fedora) or `sudo pacman -S bubblewrap` (Arch); "
    "or, for a class whose code you trust, grade with --no-sandbox."
)
NO_SANDBOX_WARNING = """\
WARNING: --no-sandbox: the submissions' code runs WITHOUT the bubblewrap sandbox.
It still runs in a process of its own, apart from the tests, with time and memory
limits, but it can now READ AND WRITE YOUR FILES (other submissions, the gradebook,
your home folder), USE THE NETWORK, see your environment variables and your other
processes, and leave processes running after grading. Use it only for code you trust."""


class SandboxUnavailable(RuntimeError):
    """``bwrap`` is missing or cannot create a sandbox on this machine (the message says why)."""


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


_checked: dict[str, str | None] = {}


def require_bwrap() -> str:
    """The path of a working ``bwrap``; ``SandboxUnavailable`` with an install hint otherwise."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable(INSTALL_HINT)
    if path not in _checked:
        argv = [path, *_binds(), *_namespaces(), "--", "/bin/true"]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=30)
            _checked[path] = None if proc.returncode == 0 else proc.stderr.decode(errors="replace")
        except (OSError, subprocess.TimeoutExpired) as err:
            _checked[path] = str(err)
    if _checked[path] is not None:
        raise SandboxUnavailable(
            f"`bwrap` is installed ({path}) but cannot create a sandbox here: "
            f"{_checked[path].strip()[:300]}. On some systems unprivileged user namespaces "
            "are disabled (sysctl kernel.unprivileged_userns_clone=1, or grade as root), or "
            "a container forbids namespaces; or grade with --no-sandbox for a class you trust."
        )
    return path


def _namespaces() -> list[str]:
    ns = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    ns += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        # Root: no user namespace, so that the student process can drop to a
        # real unprivileged uid (the process limit does not apply to root).
        ns += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        ns += ["--unshare-user", "--disable-userns"]
    return ns


def _python_roots() -> list[str]:
    """Folders the interpreter and its packages live in (read-only in the sandbox)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.add(str(Path(os.path.realpath(sys.executable)).parents[1]))
    for p in [*site.getsitepackages(), *sys.path]:
        if p and ("site-packages" in p or "dist-packages" in p) and os.path.isdir(p):
            roots.add(p)
    roots = {os.path.realpath(r) for r in roots if r and os.path.isdir(r)}
    out = []
    for r in sorted(roots, key=len):
        if r.startswith("/usr/") or r == "/usr":
            continue
        if any(r == o or r.startswith(o + "/") for o in out):
            continue
        out.append(r)
    return out


def _dirs_for(dest: str, made: set[str]) -> list[str]:
    """``--perms 0755 --dir`` for each missing parent of ``dest`` (bwrap makes them 0700)."""
    args = []
    parts = Path(dest).parts[1:-1]
    for i in range(len(parts)):
        d = "/" + "/".join(parts[: i + 1])
        if d in ("/usr", "/tmp") or d in made:
            continue
        made.add(d)
        args += ["--perms", "0755", "--dir", d]
    return args


def _binds(data_dir: str | None = None, tmp_mb: int = 256) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime"):
        path = Path("/etc") / name
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # The private /tmp first: a Python installed under /tmp (a checkout or virtual
    # environment there) is then bound on top of it, not hidden by it.
    args += ["--perms", "1777", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp"]
    args += ["--perms", "1777", "--size", str(64 << 20), "--tmpfs", "/dev/shm"]
    made: set[str] = set()
    for root in _python_roots():
        args += [*_dirs_for(root, made), "--ro-bind", root, root]
    dest = f"{INNER_ROOT}/course_lib"
    args += [*_dirs_for(dest, made), "--ro-bind", str(PACKAGE_DIR), dest]
    # Of the grader, only what runs in the sandbox: the package's (empty) __init__.py
    # and sandboxed/. The judge's side (tests, flags, gradebooks) is not visible there.
    dest = f"{INNER_ROOT}/course_grader/sandboxed"
    args += [*_dirs_for(dest, made), "--ro-bind", str(GRADER_DIR / "sandboxed"), dest]
    init = f"{INNER_ROOT}/course_grader/__init__.py"
    args += ["--ro-bind", str(GRADER_DIR / "__init__.py"), init]
    if data_dir and os.path.isdir(data_dir):
        args += [*_dirs_for("/opt/course-data/x", made), "--ro-bind", data_dir, "/opt/course-data"]
    args += ["--remount-ro", "/"]
    return args


def _environment(limits: Limits, data_dir: str | None) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "USER": "student",
        "LANG": "C.UTF-8",
        "PYTHONPATH": INNER_ROOT,
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "COURSE_GRADING": "1",
        "COURSE_DEVICE": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/.matplotlib",
    }
    if data_dir and os.path.isdir(data_dir):
        env["COURSE_DATA_DIR"] = "/opt/course-data"
    env.update(limits.extra_env)
    return env


def student_command(
    sandboxed: bool, limits: Limits, channel_fd: int, args_fd: int, uid: int | None = None
) -> tuple[list[str], bytes | None, dict[str, str] | None, str | None]:
    """(argv, bwrap's options or None, environment or None, working folder or None).

    The student process talks on the socket ``channel_fd``. Sandboxed, the
    bwrap options travel on the pipe ``args_fd`` (the caller writes the
    returned bytes to it), so that no host path shows in the sandbox's
    ``/proc``. Without the sandbox, the caller runs ``argv`` in a fresh
    temporary folder with the returned environment.
    """
    data_dir = os.environ.get("COURSE_DATA_DIR") or None
    python = [sys.executable, "-s", "-m", "course_grader.sandboxed.student", str(channel_fd)]
    env = _environment(limits, data_dir)
    if uid is not None and os.geteuid() == 0 and sandboxed:
        env["COURSE_SANDBOX_UID"] = str(uid)
    if not sandboxed:
        host_env = dict(env)
        host_env["PYTHONPATH"] = os.pathsep.join(PACKAGE_PARENTS)
        host_env.pop("HOME")
        host_env.pop("TMPDIR")
        if data_dir:
            host_env["COURSE_DATA_DIR"] = data_dir
        return python, None, host_env, None
    options = [*_binds(data_dir, limits.tmp_mb), *_namespaces(), "--clearenv"]
    for key, value in env.items():
        options += ["--setenv", key, value]
    options += ["--chdir", "/tmp"]
    data = b"".join(a.encode() + b"\0" for a in options)
    argv = [require_bwrap(), "--args", str(args_fd), "--", *python]
    return argv, data, None, None
