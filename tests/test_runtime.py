"""One seed per notebook (COURSE_SEED), derived streams and record(); the sweep is tested
in test_sweep.py."""

from __future__ import annotations

import importlib.util
import json
import re

import nbformat
import pytest
import torch

import course_lib
from course_lib import runtime
from tests.conftest import ROOT


@pytest.fixture
def restore_seed(monkeypatch):
    # The GPU workflow sets COURSE_REQUIRE_GPU=1; these tests pick the CPU on purpose.
    monkeypatch.delenv("COURSE_REQUIRE_GPU", raising=False)
    yield
    runtime._notebook_seed = 0


def test_course_seed_overrides_the_notebook_seed(monkeypatch, restore_seed):
    monkeypatch.setenv("COURSE_SEED", "3")
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    course_lib.setup_notebook(seed=0, quiet=True)
    assert course_lib.derived_seed(7) == 3 * runtime.SEED_STRIDE + 7
    a = torch.randn(3)
    course_lib.seed_everything(3)
    assert torch.equal(a, torch.randn(3)), "setup_notebook did not seed torch with COURSE_SEED"
    g1, g2 = course_lib.generator(1), course_lib.generator(1)
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))


def test_without_course_seed_streams_are_the_offsets(monkeypatch, restore_seed):
    monkeypatch.delenv("COURSE_SEED", raising=False)
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    course_lib.setup_notebook(seed=0, quiet=True)
    assert [course_lib.derived_seed(k) for k in (0, 1, 12345)] == [0, 1, 12345]
    assert not torch.equal(
        torch.rand(4, generator=course_lib.generator(0)),
        torch.rand(4, generator=course_lib.generator(1)),
    )


def test_bad_seeds_are_explained(monkeypatch):
    monkeypatch.setenv("COURSE_SEED", "seven")
    with pytest.raises(ValueError, match="COURSE_SEED must be a non-negative integer"):
        runtime.notebook_seed()
    with pytest.raises(ValueError, match="stream must be an int"):
        course_lib.derived_seed(runtime.SEED_STRIDE)


def test_record_writes_only_inside_a_sweep(tmp_path, monkeypatch):
    monkeypatch.delenv(runtime.RESULTS_ENV, raising=False)
    course_lib.record(acc=0.5)  # no file, no error
    out = tmp_path / "results.jsonl"
    monkeypatch.setenv(runtime.RESULTS_ENV, str(out))
    course_lib.record(acc=torch.tensor(0.25), n=3)
    assert json.loads(out.read_text()) == {"acc": 0.25, "n": 3.0}
    with pytest.raises(TypeError, match=r"record\(acc=\.\.\.\) takes a number"):
        course_lib.record(acc="high")


def test_record_glues_each_value_for_the_book_in_a_kernel():
    """In a notebook, record() leaves myst-nb glue that {glue:text} reads, hidden from
    Jupyter and Colab (no plain text/plain output), and exactly one entry per value."""
    from myst_nb.ext.glue import extract_glue_data_cell
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import course_lib\ncourse_lib.record(acc=0.75, n=3)")]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert all("text/plain" not in o.get("data", {}) for o in outputs), outputs
    glued = dict(extract_glue_data_cell(nb.cells[0]))
    assert set(glued) == {"acc", "n"}
    assert float(glued["acc"]["data"]["text/plain"]) == 0.75
    assert float(glued["n"]["data"]["text/plain"]) == 3.0
    course_lib.record(acc=0.5)  # outside a kernel: nothing displayed, no error


def test_gpu_summary_reads_a_pass_and_the_status_page_renders_it(tmp_path):
    """tools/gpu_summary.py turns gpu_check.sh's logs into the status page's table."""
    spec = importlib.util.spec_from_file_location("gpu_summary", ROOT / "tools/gpu_summary.py")
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    (tmp_path / "gpu.txt").write_text("NVIDIA H200, 580.1, 143771 MiB\n")
    (tmp_path / "notebooks.log").write_text(
        "___ notebooks/a.ipynb::Cell 3 ___\n"
        "---> 20 assert 1.6 < time_exp < 3.0\n"
        "AssertionError: \n"
        "___ solutions/b.ipynb::Cell 7 ___\n"
        "pytest plugin exception: b.ipynb allocated no CUDA memory: it ran on the CPU\n"
        "===== slowest durations =====\n"
        "2.50s call     notebooks/a.ipynb::Cell 0\n"
        "1.00s call     notebooks/a.ipynb::Cell 3\n"
        "4.00s call     solutions/b.ipynb::Cell 0\n"
        "3.00s call     notebooks/c.ipynb::Cell 0\n"
        "2 failed, 5 passed in 9.1s\n"
    )
    (tmp_path / "unit.log").write_text(
        "FAILED tests/t.py::test_x[1] - ImportError: no\nFAILED tests/t.py::test_x[2]\n"
        "2 failed, 9 passed in 1.0s\n"
    )
    data = summary.summarize(tmp_path, workers=4)
    rows = {r["notebook"]: r for r in data["notebooks"]}
    assert rows["notebooks/a.ipynb"]["seconds"] == 3.5
    assert rows["notebooks/a.ipynb"]["failures"] == [
        "Cell 3: AssertionError: assert 1.6 < time_exp < 3.0"
    ]
    assert rows["solutions/b.ipynb"]["failures"] == [
        "Cell 7: allocated no CUDA memory (ran on the CPU)"
    ]
    assert rows["notebooks/c.ipynb"]["ok"] and not rows["notebooks/a.ipynb"]["ok"]
    assert data["notebook_counts"] == {"passed": 5, "failed": 2, "skipped": 0}
    assert data["unit_failures"] == ["tests/t.py::test_x (2 cases)"]

    spec = importlib.util.spec_from_file_location("course_book", ROOT / "book/_ext/course_book.py")
    book = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(book)
    page = book._gpu_run_table(data)
    assert "NVIDIA H200" in page and "allocated no CUDA memory" in page
    assert page.count("<tr>") == 1 + 3  # header and one row per notebook
    assert "test_x (2 cases)" in page
    assert "No GPU pass" in book._gpu_run_table({})


def test_status_page_renders_the_colab_run():
    spec = importlib.util.spec_from_file_location("course_book", ROOT / "book/_ext/course_book.py")
    book = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(book)
    data = {
        "date": "2026-11-26 20:00 UTC",
        "environment": "Python 3.13, torch 2.11.0",
        "hardware": "x86_64, 2 CPU cores",
        "notebooks": {
            "notebooks/a.ipynb": 10.0,
            "notebooks/b.ipynb": 70.0,
            "notebooks/c.ipynb": 20.0,
        },
    }
    page = book._colab_run_table(data)
    assert "Median 20 s over 3 notebooks" in page
    assert "over the 60 s budget: notebooks/b.ipynb" in page
    assert page.count("over budget</td>") == 1
    data["notebooks"]["notebooks/b.ipynb"] = 50.0
    assert "every one within the 60 s budget" in book._colab_run_table(data)
    assert "No run" in book._colab_run_table({})
    # a time measured on code that has changed since is marked, the others not
    data["code"] = {"notebooks/a.ipynb": "old", "notebooks/b.ipynb": "same"}
    page = book._colab_run_table(data, digest=lambda path: "same")
    assert "The code of 1 of them has changed since" in page
    assert page.count("code changed since</td>") == 1
    assert "<td>notebooks/a.ipynb</td><td>10.0</td><td>ok; code changed since</td>" in page


def test_status_page_shows_every_chapter_in_colabs_runtime():
    """The status page has the Colab table, and the recorded run covers all 14 chapters."""
    assert "```{course-colab-run}" in (ROOT / "book/status.md").read_text()
    data = json.loads((ROOT / "book/colab_run.json").read_text())
    chapters = {p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("ch*.ipynb")}
    missing = chapters - set(data["notebooks"])
    assert not missing, (
        f"book/colab_run.json has no time for {sorted(missing)}: run "
        "`COLAB_ALL_CHAPTERS=1 COLAB_TIMES=book/colab_run.json pytest tests/test_colab.py`"
    )
    assert "Python 3.13" in data["hardware"] and "CPU cores" in data["hardware"]


GUIDE_RANGE = {  # the instructor guide's sentence on chapter times, in each edition
    "book/instructor_guide.md": (
        r"from about (\d+) seconds \(chapters? ([\d, and]+)\) to about (\d+) seconds "
        r"\(chapters? ([\d, and]+)\)"
    ),
    "i18n/pt/book/instructor_guide.md": (
        r"de cerca de (\d+) segundos \(capítulos? ([\d, e]+)\) a cerca de (\d+) segundos "
        r"\(capítulos? ([\d, e]+)\)"
    ),
}


@pytest.mark.parametrize("page", sorted(GUIDE_RANGE))
def test_instructor_guide_quotes_the_recorded_colab_times(page):
    """The guide's fastest and slowest chapters, and their times to the second, are those
    of book/colab_run.json (chapters within a second of the extreme are named with it)."""
    data = json.loads((ROOT / "book/colab_run.json").read_text())
    times = {
        int(path.split("/ch")[1][:2]): seconds
        for path, seconds in data["notebooks"].items()
        if path.startswith("notebooks/ch")
    }
    text = " ".join((ROOT / page).read_text().split())
    found = re.search(GUIDE_RANGE[page], text)
    assert found, f"{page}: the sentence giving the range of chapter times is missing"
    lo, lo_chapters, hi, hi_chapters = found.groups()
    fastest, slowest = min(times.values()), max(times.values())

    def named(chapters: str) -> set[int]:
        return {int(n) for n in re.findall(r"\d+", chapters)}

    assert abs(int(lo) - fastest) <= 1 and abs(int(hi) - slowest) <= 1, (page, lo, hi)
    assert named(lo_chapters) == {c for c, t in times.items() if t < fastest + 1}, page
    assert named(hi_chapters) == {c for c, t in times.items() if t > slowest - 1}, page
