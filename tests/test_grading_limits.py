"""Memory and CPU limits of a graded submission (issue 29, part 1).

What must hold:

* **memory is limited as resident (or writable) memory, not address space**:
  a CUDA build of torch maps more than 2 GB of libraries when imported, and
  with the old ``RLIMIT_AS`` every submission failed. Simulated here by a
  process that maps 6 GB it never touches (reserved, read-only and writable
  ranges, as such an import does) before the limits are set, and by a submission whose cell
  reserves 6 GB the same way: both go on working under a 768 MB limit, while
  a submission that really fills 2 GB is still stopped, and the gradebook says
  the limit stopped it (``stopped_by``);
* where the machine has control groups, memory the per-process limit cannot
  see (a shared mapping) is stopped too, and each submission's CPU share is
  bounded: a submission that forks spinning processes uses no more than its
  quota while an honest classmate is graded beside it;
* an ``--memory-mb`` too small for Python and torch on this machine stops the
  batch before grading, naming the size to use.

Needs ``bwrap``; the control-group tests need root or a delegated cgroup
(they are skipped, saying so, where :func:`cgroup.support` finds none).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_grader import cgroup
from course_grader.grade import grade_batch
from course_grader.notebook import read_notebook
from tests.test_grading import _code_cell

ROOT = Path(__file__).resolve().parents[1]
LSTM = "ch01-lstm-cell"
MB = 1 << 20

RESERVE = """
import mmap

# What importing a CUDA build of torch does to the address space: GBs mapped, never touched.
code_like = mmap.mmap(-1, 3 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ)
reserved = mmap.mmap(-1, 3 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000, prot=0)
"""
TORCH_HOG = "import torch\n\nbig = torch.ones(2**31, dtype=torch.uint8)"
SHARED_HOG = """
import mmap

shared = mmap.mmap(-1, 1 << 30)  # shared memory: RLIMIT_DATA does not count it, the cgroup does
for i in range(0, 1 << 30, 1 << 20):
    shared[i : i + (1 << 20)] = b"x" * (1 << 20)
"""
SPINNERS = """
import os
import time

for _ in range(6):
    if os.fork() == 0:
        while True:
            pass
time.sleep(4)
"""


def _with_cell(source: str) -> dict:
    nb = copy.deepcopy(read_notebook(ROOT / "solutions" / "ch01_lstm_cell.ipynb"))
    first_code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    nb["cells"].insert(first_code[2], _code_cell(source))
    return nb


def _write(folder: Path, cells: dict[str, str | None]) -> list[Path]:
    paths = []
    for name, source in cells.items():
        nb = (
            _with_cell(source) if source else read_notebook(ROOT / "solutions/ch01_lstm_cell.ipynb")
        )
        (folder / name).write_text(json.dumps(nb))
        paths.append(folder / name)
    return paths


def _by_name(rows) -> dict:
    return {Path(r.submission).name: r for r in rows}


# The student process's own limits, in a process that first maps what a CUDA torch maps:
# measured with torch 2.11.0+cu130 (on a GPU machine, no GPU used), `import torch` leaves
# VmSize 3.8 GB, VmData 1.35 GB and VmRSS 0.5 GB; `ulimit -v 2097152` makes it fail.
# Here: 4 GB reserved (PROT_NONE), 1 GB of read-only "library", 1 GB writable, untouched.
LIMITS_PROBE = """
import mmap, os, sys
from course_grader.sandbox import Limits
from course_grader.sandboxed.rlimits import set_limits

private = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000  # MAP_NORESERVE
reserve = mmap.mmap(-1, 4 << 30, flags=private, prot=0)
library = mmap.mmap(-1, 1 << 30, flags=private, prot=mmap.PROT_READ)
library_data = mmap.mmap(-1, 1 << 30, flags=private, prot=mmap.PROT_READ | mmap.PROT_WRITE)
set_limits(Limits(memory_mb=512, nice=7, cpu_seconds=None))
print("nice", os.nice(0))
small = bytearray(100 << 20)  # fits in 512 MB
print("small ok")
try:
    big = bytearray(600 << 20)
    print("big ok")
except MemoryError:
    print("big refused")
"""


def test_the_memory_limit_ignores_address_space_a_cuda_torch_maps():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", LIMITS_PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert "small ok" in lines, out.stdout  # RLIMIT_AS at 512 MB refused this (issue 29)
    assert "big refused" in lines, out.stdout  # a real allocation over the limit is still refused
    assert int(lines[0].split()[1]) >= 7, lines[0]  # its processes are niced


def test_a_memory_limit_too_small_for_torch_stops_the_batch_naming_the_fix(tmp_path):
    (tmp_path / "a.ipynb").write_text(json.dumps(_with_cell("x = 1")))
    with pytest.raises(SystemExit, match=r"--memory-mb 64 is too small .* Use at least \d+"):
        grade_batch([tmp_path / "a.ipynb"], assignment=LSTM, memory_mb=64)


@pytest.fixture(scope="module")
def memory_batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("memory")
    cells = {"honest.ipynb": None, "reserve.ipynb": RESERVE, "torch_hog.ipynb": TORCH_HOG}
    if cgroup.support().version:
        cells["shared_hog.ipynb"] = SHARED_HOG
    paths = _write(folder, cells)
    return _by_name(grade_batch(paths, assignment=LSTM, memory_mb=768, timeout=30, jobs=2))


def test_reserved_address_space_is_not_counted_against_the_memory_limit(memory_batch):
    for name in ("honest.ipynb", "reserve.ipynb"):
        row = memory_batch[name]
        assert (row.status, row.score, row.stopped_by) == ("ok", row.max_score, ""), row.reason


def test_memory_really_used_is_stopped_and_the_gradebook_says_the_limit_did_it(memory_batch):
    hog = memory_batch["torch_hog.ipynb"]
    assert hog.status == "memory-limit" and hog.stopped_by == "memory 768 MB", hog.reason
    assert hog.score == hog.max_score  # a MemoryError in one cell: the other cells still ran


def test_with_control_groups_shared_memory_is_stopped_too(memory_batch):
    if not cgroup.support().version:
        pytest.skip(f"no control groups here: {cgroup.support().why_not}")
    row = memory_batch["shared_hog.ipynb"]
    assert row.status == "memory-limit" and row.stopped_by == "memory 768 MB", row.reason
    assert "memory limit" in row.reason
    assert row.usage["peak_mb"] is not None and row.usage["peak_mb"] <= 768 + 1


def test_without_control_groups_grading_still_works_with_reserved_address_space(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("COURSE_GRADING_CGROUPS", "0")  # read by the judge processes
    paths = _write(tmp_path, {"reserve.ipynb": RESERVE, "torch_hog.ipynb": TORCH_HOG})
    rows = _by_name(grade_batch(paths, assignment=LSTM, memory_mb=768, timeout=30, jobs=2))
    assert rows["reserve.ipynb"].status == "ok", rows["reserve.ipynb"].reason
    assert rows["torch_hog.ipynb"].stopped_by == "memory 768 MB"
    assert rows["reserve.ipynb"].usage["limits"].startswith("no control groups")


def test_a_submission_forking_spinners_gets_no_more_than_its_cpu_share(tmp_path):
    if not cgroup.support().version:
        pytest.skip(f"no control groups here: {cgroup.support().why_not}")
    share = 0.25
    paths = _write(tmp_path, {"spinners.ipynb": SPINNERS, "honest.ipynb": None})
    rows = _by_name(grade_batch(paths, assignment=LSTM, cpus=share, timeout=30, jobs=2))
    honest, hostile = rows["honest.ipynb"], rows["spinners.ipynb"]
    assert honest.status == "ok" and honest.score == honest.max_score, honest.reason
    used, wall = hostile.usage["cpu_seconds"], hostile.usage["wall_seconds"]
    print(f"spinners: {used} CPU s in {wall} s at a {share} core share")  # the report's numbers
    # The kernel's quota: at most `share` of a core over the group's life, plus one period.
    # Unbounded, six spinners take both cores of an idle 2-core machine: 8 CPU seconds in 4 s.
    assert used is not None and wall >= 4, hostile.usage
    assert used <= share * wall + 0.2, hostile.usage
