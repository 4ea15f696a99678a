"""Fixtures shared by the book and browser tests."""

from __future__ import annotations

import os
import shutil
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


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def chrome(width: int, height: int, logs: tuple[str, ...] = ("browser",)):
    """Debian's headless Chromium through selenium, the window ``width`` x ``height``,
    keeping the named logs; skips the test (fails it on CI) when chromium is missing."""
    if not (CHROMIUM and CHROMEDRIVER):
        message = (
            "Debian's chromium and chromium-driver are needed: "
            "apt-get update && apt-get install -y chromium chromium-driver"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {log: "ALL" for log in logs})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver
