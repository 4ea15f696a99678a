"""Every chapter notebook passes under another seed and another thread count.

nbval runs each notebook once with the default seed and one thread (the
book's build). This module runs each again in a fresh kernel with
``COURSE_SEED`` and ``COURSE_NUM_THREADS=2``, as ``python tools/sweep.py``
does: a notebook whose asserts only hold on one seed's training trajectory
fails here. ``COURSE_CHECK_SEED`` picks the seed (default 5, outside the
sweep's usual 0-3, so CI tries one more).
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import ROOT, load_tool

sweep = load_tool("sweep")

CHECK_SEED = int(os.environ.get("COURSE_CHECK_SEED", "5"))
CHECK_THREADS = 2
CELL_LIMIT = 600  # seconds per cell
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.name)
def test_chapter_passes_under_another_seed_and_two_threads(notebook):
    # a longer cell limit than the build's 300 s: this checks what holds under another seed and
    # thread count, not speed, and two threads on a shared 2-core machine can be slower than one
    row = sweep.run_notebook(notebook, seed=CHECK_SEED, threads=CHECK_THREADS, timeout=CELL_LIMIT)
    print(f"{notebook.name}: seed {CHECK_SEED}, {CHECK_THREADS} threads, {row['seconds']} s")
    assert row["ok"], (
        f"{notebook.name} fails with COURSE_SEED={CHECK_SEED} COURSE_NUM_THREADS={CHECK_THREADS}: "
        f"{row['error']}\nA claim asserted there holds only for some seeds or machines: rewrite it "
        "so it holds for any (margins from `python tools/sweep.py`), don't re-threshold it."
    )
