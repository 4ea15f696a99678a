"""course_lib.long_runs: recorded runs beyond a chapter's budget cannot drift from the chapter."""

import importlib.util
import json

import pytest

from course_lib import long_runs
from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("long_run", ROOT / "tools/long_run.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


@pytest.mark.parametrize("name", sorted(long_runs.LONG_RUNS))
def test_recorded_run_is_of_the_experiment_the_chapter_runs(name):
    """The record's hash is the hash of the notebook's cells now: else the page shows stale numbers."""
    spec = long_runs.LONG_RUNS[name]
    record = long_runs.load(name)
    assert record["cells"] == spec["cells"]
    assert record["cells_sha256"] == long_runs.cells_hash(spec["notebook"], spec["cells"]), (
        f"the cells {spec['cells']} of {spec['notebook']} changed after the long run {name!r} "
        f"was recorded: rerun `python tools/long_run.py {name}` ({spec['minutes']})"
    )


@pytest.mark.parametrize("name", sorted(long_runs.LONG_RUNS))
def test_recorded_run_has_every_seed_and_its_provenance(name):
    spec = long_runs.LONG_RUNS[name]
    record = long_runs.load(name)
    assert [run["seed"] for run in record["runs"]] == sorted(spec["seeds"])
    assert record["command"] == f"python tools/long_run.py {name}"
    assert record["started"] and "CPU cores" in record["hardware"]
    for run in record["runs"]:
        assert run["results"], f"seed {run['seed']} recorded no numbers"
        assert all(k.startswith(tuple(spec["keep"])) for k in run["results"])


@pytest.mark.parametrize("name", ["ch10_exo_150", "ch10_exo_1000"])
def test_ch10_record_is_of_its_budget(name):
    """Each record ran the number of updates its name and environment give."""
    steps = int(long_runs.LONG_RUNS[name]["env"]["COURSE_CH10_EXO_STEPS"])
    assert name.endswith(f"_{steps}")
    for run in long_runs.load(name)["runs"]:
        assert run["results"]["exo_steps"] == steps


def test_cells_hash_sees_an_edit(tmp_path, monkeypatch):
    nb = {"cells": [{"id": "a", "source": ["x = 1\n"]}, {"id": "b", "source": ["y = 2"]}]}
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    monkeypatch.setattr(long_runs, "ROOT", tmp_path)
    before = long_runs.cells_hash("n.ipynb", ["a", "b"])
    assert before != long_runs.cells_hash("n.ipynb", ["b", "a"])
    nb["cells"][1]["source"] = ["y = 3"]
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    assert before != long_runs.cells_hash("n.ipynb", ["a", "b"])
    with pytest.raises(KeyError, match="no cells with ids"):
        long_runs.cells_hash("n.ipynb", ["c"])


def test_write_refuses_a_failed_or_incomplete_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(tool, "RECORDED", tmp_path)
    row = dict(ok=True, seconds=1.0, error=None, results={"exo_x": 1.0})
    seeds = long_runs.LONG_RUNS["ch10_exo_150"]["seeds"]
    meta = dict(start="s", hardware="h", cells_sha256="x")
    with pytest.raises(SystemExit, match="failed"):
        tool._write("ch10_exo_150", [dict(row, seed=0, ok=False, error="boom")], **meta)
    with pytest.raises(SystemExit, match="seeds"):
        tool._write("ch10_exo_150", [dict(row, seed=0)], **meta)
    rows = [dict(row, seed=s, results={"exo_x": 1.0, "other": 2.0}) for s in seeds]
    out = tool._write("ch10_exo_150", rows, **meta)
    written = json.loads(out.read_text())
    assert [r["results"] for r in written["runs"]] == [{"exo_x": 1.0}] * len(seeds)


def test_load_names_the_fix():
    with pytest.raises(KeyError, match="no long run named"):
        long_runs.load("ch99")


def test_the_run_stops_at_the_experiments_last_cell(tmp_path, monkeypatch):
    """The recorded run executes the notebook up to its last experiment cell, not the cell
    that reads the record (which does not exist yet while it is being made)."""
    cells = [{"id": i, "cell_type": "code", "source": [f"x = '{i}'"]} for i in "abcd"]
    (tmp_path / "n.ipynb").write_text(json.dumps({"cells": cells}))
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    (tmp_path / "copy").mkdir()
    out = tool._experiment({"notebook": "n.ipynb", "cells": ["b", "a"]}, tmp_path / "copy")
    assert [c["id"] for c in json.loads(out.read_text())["cells"]] == ["a", "b"]


def test_the_run_leaves_out_the_cells_that_read_the_record(tmp_path, monkeypatch):
    """A reader cell between the experiment's cells ("skip") is not run; a skip list naming
    an experiment cell or a cell past the run is refused, naming the notebook."""
    cells = [{"id": i, "cell_type": "code", "source": [f"x = '{i}'"]} for i in "abcd"]
    (tmp_path / "n.ipynb").write_text(json.dumps({"cells": cells}))
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    (tmp_path / "copy").mkdir()
    spec = {"notebook": "n.ipynb", "cells": ["a", "c"], "skip": ["b"]}
    out = tool._experiment(spec, tmp_path / "copy")
    assert [c["id"] for c in json.loads(out.read_text())["cells"]] == ["a", "c"]
    for skip in (["a"], ["d"], ["zz"]):
        with pytest.raises(ValueError, match="n.ipynb"):
            tool._experiment(dict(spec, skip=skip), tmp_path / "copy")


@pytest.mark.parametrize("name", sorted(long_runs.LONG_RUNS))
def test_skipped_cells_are_in_the_notebook_and_read_the_record(name):
    spec = long_runs.LONG_RUNS[name]
    cells = {c.get("id"): c for c in json.loads((ROOT / spec["notebook"]).read_text())["cells"]}
    for i in spec.get("skip", []):
        assert f'long_runs.load("{name}")' in "".join(cells[i]["source"]), (name, i)


def test_code_digest_follows_the_code_cells_only(tmp_path):
    """A notebook's code digest changes with any code cell and with no Markdown cell."""
    from course_lib.long_runs import code_digest

    def digest(code: str, text: str) -> str:
        nb = {"cells": [
            {"cell_type": "markdown", "id": "m", "source": [text]},
            {"cell_type": "code", "id": "c", "source": [code]},
        ]}  # fmt: skip
        path = tmp_path / "nb.ipynb"
        path.write_text(json.dumps(nb))
        return code_digest(path)

    base = digest("x = 1", "prose")
    assert len(base) == 12
    assert digest("x = 1", "other prose") == base
    assert digest("x = 2", "prose") != base


def test_ch13_record_has_every_size_arm_and_seed():
    """The chapter reads three networks per (arm, training-set size) from each chapter seed
    (it trains one live)."""
    spec = long_runs.LONG_RUNS["ch13_sweep"]
    fractions = [float(f) for f in spec["env"]["COURSE_CH13_FRACTIONS"].split(",")]
    assert fractions == [0.05, 0.2, 1.0] and spec["env"]["COURSE_CH13_SEEDS"] == "3"
    for run in long_runs.load("ch13_sweep")["runs"]:
        results = run["results"]
        assert results["sweep_images_100"] == 1437 and results["sweep_images_5"] < 100
        for arm in ("svm", "cnn", "cnn_scrambled", "vit"):
            for pct in (5, 20, 100):
                accs = [results[f"sweep_{arm}_{pct}_{i}"] for i in range(3)]
                assert all(0.5 < a <= 1 for a in accs), (arm, pct, accs)


@pytest.mark.parametrize(
    "name, arms, numbers",
    [
        ("ch07_positions", ("unit", "sqrt_d", "small", "paper", "none"),
         ("base", "worst", "seen", "beyond")),
        ("ch08_positions", ("none", "sinusoidal", "paper", "shaw", "t5", "alibi", "rope"),
         ("1x", "2x", "4x", "8x")),
    ],
)  # fmt: skip
def test_ch07_ch08_records_have_every_arm_and_seed(name, arms, numbers):
    """The chapters read three models per arm from each chapter seed (Chapter 8's learned
    table has a loss at 1x only, and its RoPE models four losses at 8x)."""
    runs = long_runs.load(name)["runs"]
    env = long_runs.LONG_RUNS[name]["env"]
    assert env[f"COURSE_{name[:4].upper()}_RUNS"] == "3"
    if name == "ch08_positions":  # every method (the chapter trains three of them live)
        assert env == {"COURSE_CH08_RUNS": "3", "COURSE_CH08_ALL_ARMS": "1"}
    else:
        assert env == {f"COURSE_{name[:4].upper()}_RUNS": "3"}
    for run in runs:
        results = run["results"]
        prefix = name[2:4]
        for arm in arms:
            for i in range(3):
                for n in numbers:
                    assert 0.5 < results[f"x{int(prefix)}_{arm}_{i}_{n}"] < 10, (arm, i, n)
        assert f"x{int(prefix)}_{arms[0]}_3_{numbers[0]}" not in results  # three, not four
    if name == "ch08_positions":
        for run in runs:
            assert all(f"x8_learned_{i}_1x" in run["results"] for i in range(3))
            assert not any(
                k.startswith("x8_learned_") and not k.endswith("_1x") for k in run["results"]
            )
            assert all(f"x8_pi_{i}_{k}" in run["results"] for i in range(3)
                       for k in ("plain", "interp", "plain_ft", "interp_ft"))  # fmt: skip


def test_ch14_record_has_every_model_and_seed():
    """Chapter 14 reads each model's test accuracy (%) and epochs from 10 runs (the paper's
    seed count) under chapter seed 0; GAT and GATv2 runs stopped by themselves."""
    spec = long_runs.LONG_RUNS["ch14_cora"]
    assert spec["env"] == {"COURSE_CH14_SEEDS": "10"} and spec["seeds"] == [0]
    (run,) = long_runs.load("ch14_cora")["runs"]
    results = run["results"]
    for model in ("gatv2", "gat", "gcn", "mlp"):
        for i in range(10):
            assert 40 < results[f"cora_run_{model}_{i}_acc"] < 90, (model, i)
            assert 1 <= results[f"cora_run_{model}_{i}_epochs"] < 100_000, (model, i)
        assert f"cora_run_{model}_10_acc" not in results  # ten, not eleven
    assert all(results[f"cora_run_gcn_{i}_epochs"] <= 200 for i in range(10))  # Kipf's cap


def test_ch12_record_has_every_arm_run_and_seed():
    """Chapter 12 reads three runs per arm, the rate each arm's search chose and the two
    probes from each of four chapter seeds."""
    spec = long_runs.LONG_RUNS["ch12_finetune"]
    assert spec["env"] == {"COURSE_CH12_FULL": "1"} and spec["seeds"] == [0, 1, 2, 3]
    for run in long_runs.load("ch12_finetune")["runs"]:
        results = run["results"]
        for arm in ("pretrained", "scratch"):
            assert all(0.2 < results[f"ft_{arm}_run{i}"] <= 1 for i in range(3)), arm
            assert f"ft_{arm}_run3" not in results  # three, not four
            assert results[f"ft_{arm}_lr_index"] in (0, 1, 2, 3)
        assert 0.2 < results["ft_probe_pretrained"] <= 1 and 0.2 < results["ft_probe_random"] <= 1
