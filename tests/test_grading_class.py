"""A whole class, end to end (issue 29, part 3): roster, deadline, overrides, exports, report.

A made-up class of 30 on ``ch01-lstm-cell`` (16 points with its hidden tests), graded in ONE
``grade`` call: honest students (on time, late by 1 and 3 days, late beyond
the cap, late but with an extension), partial answers (question 3 left as the
stub), missing students, hostile submissions (a fork of spinning processes,
a shared-memory hog, ``os._exit``), a file that matches no one, a student who
submitted twice, and a file matched by its notebook metadata instead of its
name. Then the instructor's overrides, the course gradebook over two
assignments with weights, Canvas's and Moodle's import files, Gradescope's
``results.json`` and the HTML class report are checked.

Fast unit tests of the pieces (matching, late days, overrides, the merge)
come first. Needs ``bwrap``.
"""

from __future__ import annotations

import copy
import csv
import json
import re
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from course_grader import cgroup, gradebook, gradescope, late, overrides, roster
from course_grader.notebook import read_notebook
from tests.test_grading import _cli, _code_cell

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ROOT / "tests" / "fixtures" / "hidden_examples"
LSTM = "ch01-lstm-cell"
DUE = datetime(2026, 3, 1, 23, 59, tzinfo=timezone.utc)
Q3_TEST = "q3:counts_the_parameters_of_one_layer"

# -- the pieces ------------------------------------------------------------------------------------


def test_files_match_students_by_metadata_then_by_a_whole_word_of_the_name():
    students = [roster.Student(i, i.upper(), f"{i}@x.edu") for i in ("s1", "s10", "ana-b")]
    files = ["s1.ipynb", "hw_S10_final.ipynb", "x_ana-b.ipynb", "s100.ipynb", "notes.ipynb"]
    files += ["s1_s10.ipynb", "renamed.ipynb"]
    ids = dict.fromkeys(files)
    ids["renamed.ipynb"] = "s10"
    m = roster.match_files(students, files, ids)
    assert m.files == {
        "s1": ["s1.ipynb"],
        "s10": ["hw_S10_final.ipynb", "renamed.ipynb"],
        "ana-b": ["x_ana-b.ipynb"],
    }
    assert set(m.unmatched) == {"s100.ipynb", "notes.ipynb", "s1_s10.ipynb"}
    assert "several" in m.unmatched["s1_s10.ipynb"]


def test_roster_errors_name_the_fix(tmp_path):
    bad = tmp_path / "r.csv"
    bad.write_text("student,name\n1,A\n")
    with pytest.raises(SystemExit, match="id,name,email"):
        roster.read_roster(bad)


def test_late_days_grace_cap_and_extensions():
    policy = late.LatePolicy(
        DUE, grace=timedelta(minutes=15), per_day=10, cap=25, extensions={"s2": DUE + 2 * late.DAY}
    )
    assert policy.days_late(DUE + timedelta(minutes=14)) == 0
    assert policy.days_late(DUE + timedelta(minutes=16)) == 1
    assert policy.days_late(DUE + late.DAY + timedelta(minutes=1)) == 2
    assert policy.days_late(DUE + late.DAY, "s2") == 0
    assert [policy.penalty_percent(d) for d in (0, 1, 2, 3, 9)] == [0, 10, 20, 25, 25]
    with pytest.raises(SystemExit, match="ISO 8601"):
        late.parse_time("March 1st", "--due")


def test_overrides_add_set_clamp_and_reject_bad_points(tmp_path):
    o = overrides.Override("s1", LSTM, Q3_TEST, "+5", "regraded by hand")
    assert o.new_value(0.0, 1.0) == 1.0  # a test's points stay within what it is worth
    assert overrides.Override("s1", "", "", "=2", "").new_value(7, 11) == 2
    path = tmp_path / "o.csv"
    path.write_text("student,assignment,test,points,comment\ns1,,,plenty,\n")
    with pytest.raises(SystemExit, match="write \\+1, -0.5"):
        overrides.read_overrides(path)


def _class_csv(path: Path, assignment: str, finals: dict[str, float], most: float) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "name", "email", "assignment", "final", "max_score"])
        for sid, final in finals.items():
            w.writerow([sid, sid.upper(), f"{sid}@x.edu", assignment, final, most])


def test_merge_weights_assignments_and_counts_a_missing_one_as_zero(tmp_path):
    _class_csv(tmp_path / "a.csv", "a", {"s1": 10, "s2": 5}, 10)
    _class_csv(tmp_path / "b.csv", "b", {"s1": 2}, 4)
    rows, names = gradebook.merge([tmp_path / "a.csv", tmp_path / "b.csv"], {"b": 3})
    by = {r["student"]: r for r in rows}
    assert names == ["a", "b"]
    assert by["s1"]["total %"] == pytest.approx((100 + 3 * 50) / 4)
    assert by["s2"]["total %"] == pytest.approx(50 / 4)  # b missing: 0
    with pytest.raises(SystemExit, match="not in these gradebooks"):
        gradebook.merge([tmp_path / "a.csv"], {"c": 1})


# -- the class of 30 -------------------------------------------------------------------------------

SPINNERS = "import os, time\n\nfor _ in range(4):\n    if os.fork() == 0:\n        while True:\n            pass\ntime.sleep(2)"
SHARED_HOG = (
    "import mmap\n\nm = mmap.mmap(-1, 1 << 30)\nfor i in range(0, 1 << 30, 1 << 20):\n"
    "    m[i : i + (1 << 20)] = b'x' * (1 << 20)"
)
EXIT = "import os\n\nos._exit(3)"


def _notebooks() -> tuple[dict, dict]:
    solution = read_notebook(ROOT / "solutions" / "ch01_lstm_cell.ipynb")
    stub = read_notebook(ROOT / "exercises" / "ch01_lstm_cell.ipynb")
    partial = copy.deepcopy(solution)
    for i, cell in enumerate(partial["cells"]):
        if "def lstm_num_parameters" in "".join(cell["source"]):
            partial["cells"][i] = stub["cells"][i]  # question 3 left as the stub
    return solution, partial


def _hostile(solution: dict, source: str) -> dict:
    nb = copy.deepcopy(solution)
    first_code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    nb["cells"].insert(first_code[2], _code_cell(source))
    return nb


def _make_class(folder: Path) -> dict:
    """Write the roster, the submissions, the manifest, extensions and overrides; the plan."""
    solution, partial = _notebooks()
    subs = folder / "submissions"
    subs.mkdir()
    ids = [f"s{i:02d}" for i in range(1, 31)]
    with open(folder / "roster.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "email", "section", "canvas_id"])
        for i, sid in enumerate(ids, start=1):
            w.writerow([sid, f"Student {i}", f"{sid}@uni.edu", "A" if i % 2 else "B", 1000 + i])
    plan = dict.fromkeys(ids[:14], "honest")  # s01-s14
    plan.update(dict.fromkeys(ids[14:19], "partial"))  # s15-s19
    plan.update({"s20": "late1", "s21": "late3", "s22": "late9", "s23": "extended"})
    plan.update({"s24": "spinners", "s25": "memory", "s26": "exit"})
    plan.update(dict.fromkeys(ids[26:30], "missing"))  # s27-s30
    times = {}
    for sid, kind in plan.items():
        if kind == "missing":
            continue
        nb = {"partial": partial, "spinners": _hostile(solution, SPINNERS)}.get(kind, solution)
        nb = {"memory": _hostile(solution, SHARED_HOG), "exit": _hostile(solution, EXIT)}.get(
            kind, nb
        )
        name = f"{LSTM}_{sid}.ipynb" if sid != "s07" else "homework.ipynb"
        if sid == "s07":  # matched by its metadata, not its name
            nb = copy.deepcopy(nb)
            nb["metadata"]["course"]["student"] = "s07"
        (subs / name).write_text(json.dumps(nb))
        days = {"late1": 0.5, "late3": 2.5, "late9": 8.5, "extended": 1.5}.get(kind, -1)
        times[name] = DUE + timedelta(days=days)
    (subs / f"{LSTM}_s02_first_try.ipynb").write_text(json.dumps(partial))  # superseded
    times[f"{LSTM}_s02_first_try.ipynb"] = DUE - timedelta(days=2)
    (subs / "mystery.ipynb").write_text(json.dumps(solution))  # matches no one
    with open(folder / "times.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "submitted"])
        for name, when in sorted(times.items()):
            w.writerow([name, when.isoformat()])
    (folder / "extensions.csv").write_text(f"student,due\ns23,{(DUE + 2 * late.DAY).isoformat()}\n")
    (folder / "overrides.csv").write_text(
        "student,assignment,test,points,comment\n"
        f"s15,{LSTM},{Q3_TEST},=1,counted by hand: the idea is right\n"
        f"s01,{LSTM},,-2,copied the docstring example\n"
    )
    return plan


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("term")
    plan = _make_class(folder)
    subs = sorted(str(p) for p in (folder / "submissions").glob("*.ipynb"))
    args = ["grade", *subs, "--csv", str(folder / "class.csv"), "--assignment", LSTM]
    args += ["--hidden", str(HIDDEN), "--feedback", str(folder / "feedback")]
    args += ["--roster", str(folder / "roster.csv"), "--times", str(folder / "times.csv")]
    args += ["--due", DUE.isoformat(), "--grace-minutes", "10", "--penalty-per-day", "10"]
    args += ["--penalty-cap", "50", "--extensions", str(folder / "extensions.csv")]
    args += ["--overrides", str(folder / "overrides.csv"), "--report", str(folder / "report.html")]
    args += ["--memory-mb", "1024", "--quiet"]  # default time limits: a loaded machine is slow
    start = time.perf_counter()
    proc = _run(args, folder)
    seconds = time.perf_counter() - start
    with open(folder / "class.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {"folder": folder, "plan": plan, "proc": proc, "rows": rows, "seconds": seconds}


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return _cli(*args, cwd=cwd, timeout=900)  # a whole class: more time than one file


def _by_student(graded) -> dict[str, dict]:
    return {r["student"]: r for r in graded["rows"] if r["student"]}


def test_every_student_has_a_row_and_unmatched_files_are_reported(graded):
    proc = graded["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"the class of 30 graded in {graded['seconds']:.1f} s")  # not asserted: shared machine
    by = _by_student(graded)
    assert sorted(by) == sorted(graded["plan"])
    for sid in ("s27", "s28", "s29", "s30"):
        assert (by[sid]["status"], by[sid]["final"], by[sid]["submission"]) == ("missing", "0", "")
    unmatched = [r for r in graded["rows"] if not r["student"]]
    assert [Path(r["submission"]).name for r in unmatched] == ["mystery.ipynb"]
    assert "unmatched" in unmatched[0]["note"] and unmatched[0]["raw"] == "16"
    # Not in the manifest: its time is the file's, written now, long after the due date.
    assert int(unmatched[0]["late_days"]) > 0 and unmatched[0]["final"] == "8"  # capped at 50 %
    assert "Missing (4): s27, s28, s29, s30" in proc.stdout
    assert "mystery.ipynb: unmatched" in proc.stdout
    assert Path(by["s07"]["submission"]).name == "homework.ipynb"  # by metadata
    assert "superseded" in by["s02"]["note"] and by["s02"]["final"] == "16"


def test_scores_late_penalties_and_overrides(graded):
    by = _by_student(graded)
    for sid in ("s03", "s14", "s23"):  # honest, on time (s23 with its extension)
        r = by[sid]
        assert (r["status"], r["raw"], r["late_days"], r["final"]) == ("ok", "16", "0", "16"), r
    for sid, days, penalty in (("s20", "1", "1.6"), ("s21", "3", "4.8"), ("s22", "9", "8")):
        r = by[sid]
        assert (r["raw"], r["late_days"], r["penalty"]) == ("16", days, penalty), r
        assert float(r["final"]) == pytest.approx(16 - float(penalty))
    for sid in ("s16", "s17"):
        assert by[sid]["status"] == "tests-failed" and 0 < float(by[sid]["final"]) < 16
    s15 = by["s15"]  # the override gives back question 3's first test
    assert float(s15["raw"]) == float(by["s16"]["raw"]) + 1 and s15["adjustment"] == "1"
    assert s15[Q3_TEST] == "1" and "counted by hand" in s15["adjustments"]
    assert (by["s01"]["raw"], by["s01"]["adjustment"]) == ("14", "-2")
    feedback = (graded["folder"] / "feedback").glob("*s15*.txt")
    text = next(feedback).read_text()
    assert "Adjusted by your instructor" in text and "counted by hand" in text
    late_text = next((graded["folder"] / "feedback").glob("*s21*.txt")).read_text()
    assert "Late by 3 days" in late_text


def test_hostile_students_get_nothing_and_the_limits_are_named(graded):
    by = _by_student(graded)
    assert by["s26"]["status"] == "crashed" and by["s26"]["final"] == "0"
    if cgroup.support().version:  # a shared mapping: only a control group sees it
        assert by["s25"]["status"] == "memory-limit", by["s25"]
        assert by["s25"]["stopped_by"] == "memory 1024 MB"
    assert by["s24"]["status"] == "ok"  # its spinners were held to its CPU share, it is honest
    honest = [by[f"s{i:02d}"] for i in range(2, 15)]
    assert all(r["status"] == "ok" and r["final"] == "16" for r in honest)


def test_course_gradebook_canvas_and_moodle(graded, tmp_path):
    folder = graded["folder"]
    other = tmp_path / "ch02.csv"
    _class_csv(other, "ch02-additive-attention", {f"s{i:02d}": 6 for i in range(1, 31)}, 8)
    args = ["gradebook", str(folder / "class.csv"), str(other), "--out", str(tmp_path / "c.csv")]
    args += ["--weight", f"{LSTM}=3", "--canvas", str(tmp_path / "canvas.csv")]
    args += ["--roster", str(folder / "roster.csv"), "--moodle", str(tmp_path / "moodle.csv")]
    proc = _run(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "c.csv", newline="") as f:
        course = {r["student"]: r for r in csv.DictReader(f)}
    assert len(course) == 30  # the unmatched file is not a student
    assert float(course["s03"]["total %"]) == pytest.approx((3 * 100 + 75) / 4)
    assert float(course["s30"]["total %"]) == pytest.approx(75 / 4)
    with open(tmp_path / "canvas.csv", newline="") as f:
        canvas = list(csv.reader(f))
    assert canvas[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        LSTM,
        "ch02-additive-attention",
    ]
    assert canvas[1][0] == "Points Possible" and canvas[1][5:] == ["16", "8"]
    s03 = next(r for r in canvas if r[2] == "s03")
    assert s03 == ["Student 3", "1003", "s03", "s03@uni.edu", "A", "16", "6"]
    moodle = (tmp_path / "moodle.csv").read_text().splitlines()
    assert moodle[0] == f"Email address,{LSTM},ch02-additive-attention"


def test_the_class_report_is_one_self_contained_page(graded):
    page = (graded["folder"] / "report.html").read_text()
    images = re.findall(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]+" alt="([^"]+)"', page)
    assert len(images) == 3 and all(images)  # scores, pass rates, statuses, each with alt text
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing from the network
    if cgroup.support().version:
        assert "s25" in page and "memory 1024 MB" in page  # the flagged table names the limit
    assert "mystery.ipynb" in page


def test_gradescope_results_json_hides_hidden_tests(graded, tmp_path):
    _, partial = _notebooks()
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "whatever.ipynb").write_text(json.dumps(partial))
    out = tmp_path / "results" / "results.json"
    args = ["gradescope", "--assignment", LSTM, "--submission-dir", str(sub)]
    proc = _run([*args, "--results", str(out), "--hidden", str(HIDDEN)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    tests = data["tests"]
    hidden = [t for t in tests if t["visibility"] == "hidden"]
    assert hidden and all(t["visibility"] == "visible" for t in tests if t not in hidden)
    assert data["score"] == pytest.approx(sum(t["score"] for t in tests))
    assert 0 < data["score"] < sum(t["max_score"] for t in tests)
    secrets = [line.strip() for line in (HIDDEN / f"{LSTM}.py").read_text().splitlines()]
    text = json.dumps(data)
    assert not [
        s for s in secrets if len(s) >= 12 and not s.startswith(("import", "from")) and s in text
    ]
    written = gradescope.write_setup(str(tmp_path / "zip"), LSTM)
    assert f"--assignment {LSTM}" in written[1].read_text()


def test_instructor_tables_name_the_option_file_and_columns(tmp_path):
    """Every CSV the grader reads (roster, extensions, times, overrides) fails in one line
    that names the option, the file and the columns, never with a traceback."""
    from course_grader.tables import read_table

    good = tmp_path / "ok.csv"
    good.write_text("\ufeffid,name,email\n")  # Excel's BOM, header only: an empty table
    assert read_table(good, "--roster", ["id", "name", "email"]) == []
    bad = tmp_path / "bad.csv"
    bad.write_text("id,mail\ns1,a@b\n")
    with pytest.raises(SystemExit, match=r"--roster .*bad.csv has no name, email column; its "
                       r"first line must name the columns: id,name,email"):  # fmt: skip
        read_table(bad, "--roster", ["id", "name", "email"])
    with pytest.raises(SystemExit, match=r"--times .*missing.csv: No such file"):
        read_table(tmp_path / "missing.csv", "--times", ["file", "submitted"])
