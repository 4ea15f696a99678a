"""tools/mutation_report.py turns mutmut's results into the status page's table."""

from __future__ import annotations

import importlib.util
import json

import tomllib

from tests.conftest import ROOT


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _load("mutation_report", "tools/mutation_report.py")

MUTATED_MASKS = """\
def x_causal__mutmut_orig(n):
    return torch.ones(n, n).tril() > 0

def x_causal__mutmut_1(n):
    return torch.ones(n, n).tril() >= 0

def x_causal__mutmut_2(n):
    return torch.ones(n, n).tril() > 1

class Mask:
    def xǁMaskǁapply__mutmut_1(self, scores):
        return scores.masked_fill(
            ~self.mask, float("-inf")
        )
"""


def _fake_run(tmp_path):
    """A mutants/ folder as mutmut 3 leaves it: a mutated copy and a .meta per file."""
    lib = tmp_path / "mutants" / "course_lib"
    lib.mkdir(parents=True)
    (lib / "masks.py").write_text(MUTATED_MASKS)
    codes = {
        "course_lib.masks.x_causal__mutmut_1": 0,  # survived
        "course_lib.masks.x_causal__mutmut_2": 1,  # killed
        "course_lib.masks.x_causal__mutmut_3": 1,
        "course_lib.masks.x_causal__mutmut_4": 36,  # timeout
        "course_lib.masks.xǁMaskǁapply__mutmut_1": 0,  # survived: marked equivalent below
        "course_lib.masks.xǁMaskǁapply__mutmut_2": 33,  # no test reaches it
        "course_lib.masks.xǁMaskǁapply__mutmut_3": -11,  # segfault: suspicious
    }
    (lib / "masks.py.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    (lib / "gat.py").write_text("")
    (lib / "gat.py.meta").write_text(
        json.dumps({"exit_code_by_key": {"course_lib.gat.x_f__mutmut_1": None}})
    )
    return tmp_path / "mutants"


def test_report_counts_each_module_and_scores_without_equivalents(tmp_path):
    mutants = _fake_run(tmp_path)
    equivalent = {
        "course_lib.masks.xǁMaskǁapply__mutmut_1": {
            "reason": "same fill",
            "line": "~self.mask",
        },
        "course_lib.masks.x_causal__mutmut_2": {"reason": "killed, so a stale entry"},
        "course_lib.masks.x_causal__mutmut_9": {"reason": "renumbered away"},
    }
    out = report.summarise(mutants, equivalent)
    masks = out["modules"]["masks"]
    assert masks == {
        "killed": 2,
        "survived": 1,
        "equivalent": 1,
        "timeout": 1,
        "suspicious": 1,
        "no_tests": 1,
        "not_run": 0,
        "total": 7,
        "score": round(100 * 3 / 6, 1),  # (killed + timeout) / (run - equivalent)
    }
    assert out["survivors"]["masks"] == [
        "course_lib.masks.x_causal__mutmut_1",
        "course_lib.masks.xǁMaskǁapply__mutmut_2",
        "course_lib.masks.xǁMaskǁapply__mutmut_3",
    ]
    assert out["equivalent"] == [
        {"mutant": "course_lib.masks.xǁMaskǁapply__mutmut_1", "reason": "same fill"}
    ]
    stale = {e["mutant"]: e["why"] for e in out["stale_equivalent"]}
    assert stale == {
        "course_lib.masks.x_causal__mutmut_2": "it was killed",
        "course_lib.masks.x_causal__mutmut_9": "no such mutant in this run",
    }
    assert out["modules"]["gat"]["score"] is None and out["not_run"] == ["gat"]


def test_an_equivalence_entry_whose_line_is_gone_is_stale(tmp_path):
    """mutmut numbers a function's mutants in order: after an edit the same name can
    be another mutation, which the entry's line fragment catches."""
    mutants = _fake_run(tmp_path)
    entry = {"reason": "r", "line": "scores.masked_fill(self.mask"}
    out = report.summarise(mutants, {"course_lib.masks.xǁMaskǁapply__mutmut_1": entry})
    assert out["modules"]["masks"]["equivalent"] == 0
    assert out["modules"]["masks"]["survived"] == 2
    assert [e["mutant"] for e in out["stale_equivalent"]] == [
        "course_lib.masks.xǁMaskǁapply__mutmut_1"
    ]


def test_report_writes_the_json_and_refuses_an_empty_run(tmp_path, capsys):
    mutants = _fake_run(tmp_path)
    equivalent = tmp_path / "eq.toml"
    equivalent.write_text('["course_lib.masks.xǁMaskǁapply__mutmut_1"]\nreason = "same fill"\n')
    out = tmp_path / "mutation.json"
    assert (
        report.main(["--mutants", str(mutants), "--equivalent", str(equivalent), "--out", str(out)])
        == 0
    )
    data = json.loads(out.read_text())
    assert {"date", "mutmut", "commit", "modules", "equivalent"} <= set(data)
    assert data["modules"]["masks"]["equivalent"] == 1
    assert report.main(["--mutants", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "run `mutmut run` first" in capsys.readouterr().err


def test_equivalence_file_gives_a_reason_for_every_entry():
    path = ROOT / "tests" / "mutation_equivalent.toml"
    entries = tomllib.loads(path.read_text())
    assert report.load_equivalent(path) == entries
    for name, entry in entries.items():
        assert name.startswith("course_lib."), name
        assert len(entry["reason"]) > 20, f"{name}: say why the mutant computes the same thing"


def test_status_page_renders_the_mutation_run(tmp_path):
    book = _load("course_book", "book/_ext/course_book.py")
    data = {
        "date": "2026-11-27",
        "mutmut": "3.8.1",
        "commit": "abc1234",
        **report.summarise(
            _fake_run(tmp_path),
            {"course_lib.masks.xǁMaskǁapply__mutmut_1": {"reason": "same <fill>"}},
        ),
    }
    page = book._mutation_table(data)
    assert "mutmut 3.8.1" in page and "abc1234" in page
    assert "<td>masks</td><td>2</td><td>1</td><td>1</td>" in page and "50.0%" in page
    assert "Not run yet: gat" in page and "<td>gat</td>" in page and "not run</td>" in page
    assert "course_lib.masks.x_causal__mutmut_1" in page
    assert "same &lt;fill&gt;" in page  # reasons are escaped
    assert "No mutation run recorded" in book._mutation_table({})
    data["carried"] = {"gat": "0ld0ne"}
    assert "gat: from the run at commit 0ld0ne (its code unchanged since)" in (
        book._mutation_table(data)
    )


def test_status_page_and_readme_show_the_mutation_run():
    assert "```{course-mutation}" in (ROOT / "book" / "status.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert 'mutmut run "course_lib.masks*"' in readme and "tools/mutation_report.py" in readme
    assert not (ROOT / "tests" / "mutation_check.py").exists()


def test_previous_results_stand_for_unrun_unchanged_modules_only(tmp_path):
    """--previous: a module this run left unrun keeps the earlier report's numbers when its
    code is unchanged since that report's commit, and says so; a changed one stays unrun."""
    now = report.summarise(_fake_run(tmp_path), {})  # masks run, gat not run
    assert now["not_run"] == ["gat"]
    gat_before = {"killed": 9, "survived": 1, "equivalent": 1, "not_run": 0, "score": 90.0}
    previous = {
        "commit": "abc1234",
        "modules": {"gat": gat_before, "masks": {"score": 10.0}},
        "survivors": {"gat": ["course_lib.gat.x_f__mutmut_2"]},
        "equivalent": [{"mutant": "course_lib.gat.x_f__mutmut_3", "reason": "same"}],
    }
    changed = report.carry_over(json.loads(json.dumps(now)), previous, lambda c, m: False)
    assert changed["not_run"] == ["gat"] and changed["carried"] == {}
    kept = report.carry_over(now, previous, lambda commit, m: commit == "abc1234")
    assert kept["modules"]["gat"] == gat_before and kept["not_run"] == []
    assert kept["carried"] == {"gat": "abc1234"}
    assert kept["survivors"]["gat"] == ["course_lib.gat.x_f__mutmut_2"]
    assert {"mutant": "course_lib.gat.x_f__mutmut_3", "reason": "same"} in kept["equivalent"]
    assert kept["modules"]["masks"]["score"] != 10.0  # a module run now keeps this run's numbers
