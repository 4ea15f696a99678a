"""The seed sweep: one notebook run with a given seed and thread count, its records
summarised, and the status page that shows them.

Covers tools/sweep.py; the seeds and record() themselves are tested in test_runtime.py.
"""

from __future__ import annotations

import importlib.util

import nbformat

from course_lib import runtime
from tests.conftest import ROOT, load_tool

sweep = load_tool("sweep")


def test_summarize_results_gives_mean_std_and_range():
    rows = [{"notebook": "a", "results": {"x": v}} for v in (1.0, 2.0, 3.0)]
    rows.append({"notebook": "b", "results": {}})
    stats = sweep.summarize_results(rows)
    assert stats == {"a": {"x": {"n": 3, "mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}}}


def _notebook(tmp_path, name, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_run_notebook_sets_seed_and_threads_and_collects_records(tmp_path):
    path = _notebook(
        tmp_path,
        "ok.ipynb",
        "import course_lib, torch\ndevice = course_lib.setup_notebook(seed=0)",
        "course_lib.record(seed=course_lib.derived_seed(0), threads=torch.get_num_threads())",
    )
    row = sweep.run_notebook(path, seed=2, threads=2)
    assert row["ok"], row["error"]
    assert row["results"] == {"seed": 2.0 * runtime.SEED_STRIDE, "threads": 2.0}


def test_run_notebook_reports_the_failing_assert(tmp_path):
    path = _notebook(tmp_path, "bad.ipynb", "x = 1", "assert x == 2, 'x is not 2'")
    row = sweep.run_notebook(path, seed=0, threads=1)
    assert not row["ok"]
    assert "AssertionError" in row["error"] and "x is not 2" in row["error"]


def test_status_page_renders_the_sweep():
    spec = importlib.util.spec_from_file_location("course_book", ROOT / "book/_ext/course_book.py")
    book = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(book)
    runs = [
        {"notebook": "n.ipynb", "seed": 0, "threads": 1, "ok": True, "seconds": 3.0},
        {
            "notebook": "n.ipynb",
            "seed": 1,
            "threads": 1,
            "ok": False,
            "seconds": 2.0,
            "error": "AssertionError: <too close>",
        },
    ]
    html = book._sweep_tables({"runs": runs, "results": sweep.summarize_results(runs)})
    assert "1 of 2 runs passed" in html and "pass 3 s" in html and "FAIL" in html
    assert "&lt;too close&gt;" in html  # errors are escaped
    assert "No sweep has been recorded yet" in book._sweep_tables({})


def test_run_notebook_names_a_cell_past_its_time_limit(tmp_path):
    path = _notebook(tmp_path, "slow.ipynb", "x = 1", "import time\ntime.sleep(30)")
    row = sweep.run_notebook(path, seed=0, threads=1, timeout=2)
    assert not row["ok"]
    assert "code cell 1 ran past the per-cell time limit" in row["error"], row["error"]
