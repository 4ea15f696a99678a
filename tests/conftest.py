"""Fixtures shared by the book and browser tests."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

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
