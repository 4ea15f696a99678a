"""Fixtures shared by the book and browser tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class BookBuild:
    returncode: int
    log: str
    seconds: float
    html: Path


@pytest.fixture(scope="session")
def book_build() -> BookBuild:
    """Build the website once per test session, as the README says.

    Notebooks that nbval already ran in this session are taken from the
    execution cache; any other notebook is executed by the build itself.
    """
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb), "build", str(ROOT), "-W", "-n", "--keep-going"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    (ROOT / "_build").mkdir(exist_ok=True)
    (ROOT / "_build" / "build.log").write_text(log)
    return BookBuild(proc.returncode, log, seconds, ROOT / "_build" / "html")


@pytest.fixture
def seed_and_one_thread():
    """Seed 0 and one intra-op thread for the duration of a test: the library's
    tests use tiny tensors, and on a shared 2-core machine thread synchronisation
    makes small ops many times slower (the same choice as ``setup_notebook``)."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load_tool(name: str):
    """A maintainer tool of ``tools/`` (not part of the installed package), as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def default_device(device: str):
    """torch's default device set to ``device`` inside the block: tensors a function makes
    must follow its inputs' device, not this default (``"meta"`` makes a slip visible)."""
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


@contextmanager
def deadline(seconds: float):
    """Fail, instead of hanging, if the block runs longer than ``seconds`` (wall clock):
    for loops that must end on tiny inputs in microseconds (a mutant that loops forever
    fails here at once, rather than at mutmut's CPU limit)."""

    def fail(*_):
        raise TimeoutError(f"over {seconds} s on a tiny input: a loop that does not end")

    old = signal.signal(signal.SIGALRM, fail)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def chrome(width: int, height: int, logs: tuple[str, ...] = ("browser",)):
    """Debian's headless Chromium through selenium (tools/handouts.py's ``chrome``, the one
    place its flags are set), the window ``width`` x ``height``, keeping the named logs;
    skips the test (fails it on CI) when chromium is missing."""
    handouts = load_tool("handouts")
    if not (handouts.CHROMIUM and handouts.CHROMEDRIVER):
        if os.environ.get("CI"):
            pytest.fail(handouts.MISSING_BROWSER)
        pytest.skip(handouts.MISSING_BROWSER)
    return handouts.chrome(width, height, {log: "ALL" for log in logs})
