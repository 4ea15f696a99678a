"""Execute each notebook once, with nbval, and hand the result to the book build.

nbval runs every code cell of a notebook as a pytest item (lax mode: a cell
fails when it raises; outputs are not compared). This plugin records what
nbval saw -- each cell's outputs, the execution counts and the state of any
ipywidgets -- and, when every code cell of a notebook passed, stores the
executed notebook in the book's jupyter-cache (``_build/.jupyter_cache``).
``jupyter-book build`` then finds each notebook in the cache and does not
execute it again, so a CI run executes every notebook exactly once, and the
status page shows the times measured here.

With ``COURSE_REQUIRE_GPU=1`` (the GPU workflow), the plugin also asks each
notebook's kernel, after its last cell, how much CUDA memory it allocated,
and fails the notebook when the answer is zero: it silently ran on the CPU.
A notebook with no tensor work opts out with the notebook metadata
``{"course": {"cpu_only": true}}``. ``COURSE_NO_EXEC_CACHE=1`` skips the cache
(``tools/gpu_check.sh`` runs notebooks in parallel workers, which would share
one sqlite file).

The widget state is rebuilt from the kernel's comm messages the same way
nbclient does (``comm_open`` gives a model's state, ``comm_msg`` updates it),
so widgets render on the website from the cached notebooks.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = ROOT / "_build" / ".jupyter_cache"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"


class _NotebookRecord:
    """What nbval saw while running one notebook."""

    def __init__(self, nbfile) -> None:
        self.nbfile = nbfile
        self.code_cells = sum(1 for c in nbfile.nb.cells if c.cell_type == "code")
        self.outputs: dict[int, list] = {}
        self.counts: dict[int, int] = {}
        self.failed = False
        self.widgets: dict[str, dict] = {}
        self.started = time.perf_counter()
        self.current_cell: int | None = None
        self.current_item = None

    def observe(self, msg: dict) -> None:
        """See every iopub message before nbval does."""
        msg_type = msg.get("msg_type", "")
        content = msg.get("content", {})
        if msg_type == "execute_input" and self.current_cell is not None:
            self.counts[self.current_cell] = content.get("execution_count")
        elif msg_type == "clear_output" and self.current_item is not None:
            outs = self.current_item.test_outputs
            if outs is not None:
                outs.clear()
        elif msg_type == "comm_open" and content.get("target_name") == "jupyter.widget":
            state = content.get("data", {}).get("state", {})
            self.widgets[content["comm_id"]] = {
                "model_name": state.get("_model_name"),
                "model_module": state.get("_model_module"),
                "model_module_version": state.get("_model_module_version"),
                "state": dict(state),
            }
        elif msg_type == "comm_msg":
            data = content.get("data", {})
            model = self.widgets.get(content.get("comm_id"))
            if model is not None and data.get("method") == "update":
                model["state"].update(data.get("state", {}))
        elif msg_type == "comm_close":
            self.widgets.pop(content.get("comm_id"), None)

    def executed_notebook(self) -> nbformat.NotebookNode:
        nb = copy.deepcopy(self.nbfile.nb)
        index = 0
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            cell.outputs = [nbformat.from_dict(o) for o in self.outputs.get(index, [])]
            cell.execution_count = self.counts.get(index)
            for out in cell.outputs:
                if out.get("output_type") == "execute_result":
                    out["execution_count"] = cell.execution_count
            index += 1
        if self.widgets:
            nb.metadata["widgets"] = {
                WIDGET_STATE_MIME: {
                    "state": {k: v for k, v in self.widgets.items() if v["model_name"]},
                    "version_major": 2,
                    "version_minor": 0,
                }
            }
        return nb


_records: dict[str, _NotebookRecord] = {}


def _record_for(item) -> _NotebookRecord:
    nbfile = item.parent
    key = str(nbfile.path)
    record = _records.get(key)
    if record is None:
        record = _records[key] = _NotebookRecord(nbfile)
        original = nbfile.get_kernel_message

        def get_kernel_message(*args, **kwargs):
            msg = original(*args, **kwargs)
            record.observe(msg)
            return msg

        nbfile.get_kernel_message = get_kernel_message
    return record


def _is_nbval_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not _is_nbval_cell(item):
        yield
        return
    record = _record_for(item)
    record.current_cell, record.current_item = item.cell_num, item
    outcome = yield
    record.outputs[item.cell_num] = list(item.test_outputs or [])
    if outcome.excinfo is not None:
        record.failed = True
        return
    if item.cell_num == record.code_cells - 1 and not record.failed:
        if os.environ.get("COURSE_REQUIRE_GPU") == "1":
            _check_gpu_was_used(item)
        if len(record.outputs) == record.code_cells and not os.environ.get("COURSE_NO_EXEC_CACHE"):
            _store(record)


def _check_gpu_was_used(item) -> None:
    """Fail the notebook if its kernel never allocated CUDA memory."""
    if item.parent.nb.metadata.get("course", {}).get("cpu_only"):
        return
    nbfile = item.parent
    probe = "import torch; print('CUDA_BYTES', torch.cuda.max_memory_allocated())"
    msg_id = nbfile.kernel.execute_cell_input(probe, allow_stdin=False)
    text = ""
    while True:
        msg = nbfile.get_kernel_message(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            text += msg["content"]["text"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    used = int(text.split("CUDA_BYTES")[-1].split()[0]) if "CUDA_BYTES" in text else 0
    if used == 0:
        pytest.fail(
            f"{nbfile.path.name} allocated no CUDA memory: it ran on the CPU although a GPU "
            "was required. Move models and tensors to `device` (from setup_notebook), or mark "
            'a notebook without tensor work with metadata {"course": {"cpu_only": true}}.'
        )


def _store(record: _NotebookRecord) -> None:
    """Put the executed notebook into the book's execution cache."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    seconds = time.perf_counter() - record.started
    path = Path(record.nbfile.path)
    cache = get_cache(str(CACHE_DIR))
    cache.cache_notebook_bundle(
        CacheBundleIn(record.executed_notebook(), str(path), data={"execution_seconds": seconds}),
        check_validity=False,
        overwrite=True,
    )
    NOTEBOOK_TIMES[str(path.relative_to(ROOT))] = seconds


# Filled as notebooks finish; printed in the terminal summary.
NOTEBOOK_TIMES: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter):
    if not NOTEBOOK_TIMES:
        return
    terminalreporter.section("notebook execution times (cached for the book build)")
    for name, seconds in sorted(NOTEBOOK_TIMES.items()):
        terminalreporter.write_line(f"{seconds:7.1f} s  {name}")
