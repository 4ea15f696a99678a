"""Graded exercises: generation (sync), the student's check(), and batch grading.

What the issue asks to prove: ``sync --check`` passes and catches an edited
solution; for every assignment the generated stub scores 0 on every test and
the solution full marks, and every question has a test worth points; a batch of
deliberately broken submissions (each failure kind) completes with the right
status, a zero score and a reason for each; grading is deterministic; hidden
tests never leak into the CSV, the feedback or the printed output.

Broken submissions are generated from the solution notebooks in ``tmp_path``.
"""

from __future__ import annotations

import ast
import copy
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_grader.grade import grade_batch, write_csv
from course_grader.notebook import (
    assignment_of,
    cell_source,
    code_cells,
    dumps_notebook,
    read_notebook,
)
from course_grader.sync import SyncError, make_exercise, sync
from course_lib.grading import checker, registry
from course_lib.grading.check import check

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
HIDDEN = ROOT / "tests" / "fixtures" / "hidden_examples"
SOLUTION_FILES = sorted(SOLUTIONS.glob("*.ipynb"))
LSTM = "ch01-lstm-cell"


def _cli(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "course_lib.grading", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _read_csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


# -- authoring: sync ---------------------------------------------------------------------------


def test_sync_check_passes():
    proc = _cli("sync", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sync_check_fails_after_a_solution_changes_and_sync_is_stable(tmp_path):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    shutil.copytree(SOLUTIONS, solutions)
    shutil.copytree(EXERCISES, exercises)
    assert sync(solutions, exercises, check=True).changed == []
    edited = solutions / SOLUTION_FILES[0].name
    nb = read_notebook(edited)
    nb["cells"][0]["source"] = cell_source(nb["cells"][0]) + "\n\nAn instructor's new sentence."
    edited.write_text(dumps_notebook(nb))

    proc = _cli("sync", "--check", cwd=tmp_path)
    assert proc.returncode == 1
    assert f"exercises/{edited.name}" in proc.stdout and "sync" in proc.stdout

    assert sync(solutions, exercises).changed == [exercises / edited.name]
    first = {p.name: p.read_bytes() for p in exercises.glob("*.ipynb")}
    result = sync(solutions, exercises)
    assert result.changed == [] and result.stale == []
    assert first == {p.name: p.read_bytes() for p in exercises.glob("*.ipynb")}
    assert "instructor's new sentence" in (exercises / edited.name).read_text()


def _toy_solution() -> dict:
    code = (
        "def f(x):\n"
        '    """Doc."""\n'
        "    if x:\n"
        "        ### BEGIN SOLUTION\n"
        "        return 1\n"
        "        ### END SOLUTION\n"
        "    return 0\n"
    )
    return {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "Intro"},
            {
                "cell_type": "code",
                "metadata": {"tags": ["solution", "keep"], "scrolled": True},
                "source": "secret = 42",
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "x"}],
                "execution_count": 3,
            },
            {"cell_type": "markdown", "metadata": {"tags": ["solution"]}, "source": "Answer: 42"},
            {
                "cell_type": "code",
                "metadata": {},
                "source": code,
                "outputs": [],
                "execution_count": 1,
            },
        ],
        "metadata": {"course": {"assignment": "toy"}, "widgets": {}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_make_exercise_follows_the_rules():
    solution = _toy_solution()
    before = copy.deepcopy(solution)
    exercise = make_exercise(solution)
    assert solution == before, "make_exercise must not change its input"
    cells = exercise["cells"]
    assert [c["cell_type"] for c in cells] == ["markdown", "code", "code"]
    stub = cells[1]
    assert stub["source"].splitlines()[0] == "# YOUR CODE HERE"
    assert "NotImplementedError" in stub["source"] and "42" not in stub["source"]
    assert stub["metadata"] == {"tags": ["keep"]}
    assert stub["outputs"] == [] and stub["execution_count"] is None
    lines = cells[2]["source"].splitlines()
    assert lines[3] == "        # YOUR CODE HERE"
    assert lines[4].startswith("        raise NotImplementedError(")
    assert lines[5] == "    return 0"
    assert "return 1" not in cells[2]["source"]
    assert exercise["metadata"] == {"course": {"assignment": "toy"}}
    compile(cells[2]["source"], "<exercise>", "exec")
    assert dumps_notebook(exercise) == dumps_notebook(make_exercise(solution))


@pytest.mark.parametrize(
    ("edit", "fix"),
    [
        (lambda nb: nb["metadata"].pop("course"), '{"course": {"assignment": "<id>"}}'),
        (lambda nb: nb["cells"][3].update(source="### BEGIN SOLUTION\nx = 1\n"), "END marker"),
        (lambda nb: nb["cells"][3].update(source="x = 1\n### END SOLUTION\n"), "without a"),
        (lambda nb: nb.update(cells=nb["cells"][:1]), "no solution to hide"),
    ],
    ids=["no-assignment-id", "unclosed", "unopened", "nothing-hidden"],
)
def test_make_exercise_errors_name_the_fix(edit, fix):
    nb = _toy_solution()
    edit(nb)
    with pytest.raises(SyncError) as err:
        make_exercise(nb, "toy.ipynb")
    assert fix in str(err.value) and "toy.ipynb" in str(err.value)


def test_exercises_hide_every_solution():
    for src in SOLUTION_FILES:
        exercise = read_notebook(EXERCISES / src.name)
        solution = read_notebook(src)
        assert assignment_of(exercise) == assignment_of(solution)
        text = "\n".join(cell_source(c) for c in exercise["cells"])
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
        exercise_lines = {line.strip() for line in text.splitlines()}
        hidden, shown = [], []  # solution lines, and the lines students may see anyway
        for cell in solution["cells"]:
            parts = re.split(r"### (?:BEGIN|END) SOLUTION", cell_source(cell))
            if "solution" in cell.get("metadata", {}).get("tags", []):
                hidden += cell_source(cell).splitlines()
                continue
            for i, part in enumerate(parts):
                (hidden if i % 2 else shown).extend(part.splitlines())
        shown_lines = {line.strip() for line in shown}
        for line in {line.strip() for line in hidden}:
            # A blank line or a lone bracket is no leak; nor is a line the
            # solution notebook also shows outside its solution regions.
            if re.search(r"\w", line) and line not in shown_lines:
                assert line not in exercise_lines, f"{src.name}: {line!r} leaked"


# -- assignments: tests, questions, notebooks ------------------------------------------------


@pytest.mark.parametrize("path", SOLUTION_FILES, ids=lambda p: p.name)
def test_every_question_has_tests_and_a_check_call(path):
    nb = read_notebook(path)
    assignment_id = assignment_of(nb)
    spec = registry.load_assignment(assignment_id)
    text = "\n".join(cell_source(c) for c in nb["cells"] if c["cell_type"] == "code")
    assert f'check = checker("{assignment_id}")' in text
    checked = re.findall(r'^check\("(\w+)"\)$', text, flags=re.M)
    assert spec.questions, f"{assignment_id} has no tests"
    for question in spec.questions:
        visible = spec.for_question(question)
        assert sum(t.points for t in visible) > 0, f"{assignment_id} {question}: no points"
        assert question in checked, f"{path.name} never calls check({question!r})"
    assert set(checked) <= set(spec.questions), f"{path.name} checks a question without tests"
    hidden_file = HIDDEN / f"{assignment_id}.py"
    assert hidden_file.is_file(), f"no example hidden tests for {assignment_id}"
    hidden = registry.load_hidden_tests(hidden_file.read_text())
    assert hidden and {t.question for t in hidden} <= set(spec.questions)


@pytest.fixture(scope="module")
def stubs_and_solutions(tmp_path_factory) -> list:
    folder = tmp_path_factory.mktemp("stubs_and_solutions")
    paths = []
    for src in SOLUTION_FILES:
        paths += [folder / f"solution_{src.name}", folder / f"stub_{src.name}"]
        shutil.copy(src, paths[-2])
        shutil.copy(EXERCISES / src.name, paths[-1])
    return grade_batch(paths, hidden_dir=HIDDEN, timeout=60)


def test_solutions_score_full_marks(stubs_and_solutions):
    for row in stubs_and_solutions:
        if "solution_" in row.submission:
            assert row.status == "ok", (row.submission, row.reason)
            failed = {
                t.id: row.messages[t.id] for t in row.spec.tests if row.earned[t.id] < t.points
            }
            assert not failed, f"{row.submission}: {failed}"
            assert row.score == row.max_score > 0
            assert any(t.hidden for t in row.spec.tests), "the hidden tests were not used"


def test_stubs_score_zero_on_every_test(stubs_and_solutions):
    for row in stubs_and_solutions:
        if "stub_" in row.submission:
            passing = [t.id for t in row.spec.tests if row.earned[t.id] > 0]
            assert not passing, f"{row.submission}: tests that pass on the untouched stub {passing}"
            assert row.score == 0 and row.max_score > 0


# -- the student's check() ---------------------------------------------------------------------


def _student(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<ipython-input-7-abc>", "exec"), namespace)
    return namespace


def test_check_explains_failures_without_tracebacks(capsys):
    namespace = _student(
        "import torch\n"
        "def lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh):\n"
        "    gates = x @ W_ih.T + b_ih + h @ W_hh.T + b_hh\n"
        "    return gates, c\n"
        "def lstm_forward(xs, h0, c0, W_ih, W_hh, b_ih, b_hh):\n"
        "    return undefined_name\n"
    )
    q1 = check("q1", LSTM, namespace=namespace)
    q2 = check("q2", LSTM, namespace=namespace)
    out = capsys.readouterr().out
    assert q1 and q2 and not any(r.passed for r in q1 + q2)
    assert "expected shape (3, 5), got (3, 20)" in out
    assert "NameError: name 'undefined_name' is not defined (line 6 of your cell" in out
    assert "Traceback" not in out and "course_lib" not in out and "File " not in out
    assert "hidden tests may also count" in out
    q3 = check("q3", LSTM, namespace=namespace)
    assert "`lstm_num_parameters` is not defined" in capsys.readouterr().out and q3


def test_checker_uses_the_callers_namespace_and_is_silent_when_grading(capsys, monkeypatch):
    bound = checker(LSTM)
    exec(
        "def lstm_num_parameters(i, h, n=1):\n    return 4 * h * (i + h + 2) * n\ncheck('q3')\n",
        {"check": bound},
    )
    out = capsys.readouterr().out
    assert "PASS  counts the parameters of a one-layer LSTM" in out
    assert "FAIL  counts the parameters of stacked layers" in out
    assert "num_layers=3" in out and "Traceback" not in out
    monkeypatch.setenv("COURSE_GRADING", "1")
    exec("check('q3')", {"check": bound})
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("ipython", [True, False], ids=["ipython", "without-ipython"])
def test_code_cells_neutralise_shell_lines_and_blank_check_calls(ipython, monkeypatch):
    if not ipython:  # a grader installed without Jupyter (issue 29: every solution failed)
        monkeypatch.setitem(sys.modules, "IPython.core.inputtransformer2", None)
    nb = {
        "cells": [
            {"cell_type": "code", "source": '%pip install x\n!ls\nfiles = !ls\ncheck("q1")\ny = 2'},
            {"cell_type": "markdown", "source": "text"},
            {"cell_type": "code", "source": "%%bash\nrm -rf /\n"},
        ]
    }
    first, second = code_cells(nb)
    assert (first.number, second.number) == (1, 2)
    lines = first.source.splitlines()
    assert lines[0] == "get_ipython().run_line_magic('pip', 'install x')"
    assert lines[3] == "pass" and lines[4] == "y = 2"  # line numbers kept
    assert second.source.startswith("get_ipython().run_cell_magic('bash'")
    assert lines[1] == "get_ipython().system('ls')"
    assert lines[2] == "files = get_ipython().getoutput('ls')"
    for cell in (first, second):
        compile(cell.source, "<cell>", "exec")


# -- batch grading of broken submissions ----------------------------------------------------

SABOTAGE = {
    "nan_outputs": (
        "_step, _forward = lstm_step, lstm_forward\n\n\n"
        "def lstm_step(*args):\n"
        "    h, c = _step(*args)\n"
        '    return h * float("nan"), c * float("nan")\n\n\n'
        "def lstm_forward(*args):\n"
        "    hs, (h, c) = _forward(*args)\n"
        '    return hs * float("nan"), (h * float("nan"), c * float("nan"))\n\n\n'
        "def lstm_num_parameters(*args):\n"
        '    return float("nan")\n'
    ),
    "wrong_shapes": (
        "def lstm_step(x, h, c, *weights):\n"
        "    return x, x\n\n\n"
        "def lstm_forward(xs, h0, c0, *weights):\n"
        "    return xs, (xs[-1], xs[-1])\n\n\n"
        "def lstm_num_parameters(*args):\n"
        "    return [0, 0]\n"
    ),
}


def _code_cell(source: str) -> dict:
    return {
        "cell_type": "code",
        "metadata": {},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }


def _broken_batch(folder: Path) -> dict[str, tuple[str, bool]]:
    """Write one submission per failure kind; return {file name: (status, must score 0)}."""
    solution = read_notebook(SOLUTIONS / "ch01_lstm_cell.ipynb")

    def write(name: str, nb: dict) -> None:
        (folder / name).write_text(json.dumps(nb))

    def solution_cells(edit) -> dict:
        nb = copy.deepcopy(solution)
        for cell in nb["cells"]:
            if "### BEGIN SOLUTION" in cell_source(cell):
                cell["source"] = edit(cell_source(cell))
        return nb

    def inserted(source: str) -> dict:
        nb = copy.deepcopy(solution)
        first_code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
        nb["cells"].insert(first_code[2], _code_cell(source))
        return nb

    def appended(source: str) -> dict:
        nb = copy.deepcopy(solution)
        nb["cells"].append(_code_cell(source))
        return nb

    (folder / "invalid_json.ipynb").write_text('{"cells": [\n  {"cell_type": "code",\n')
    (folder / "not_a_notebook.ipynb").write_text("[1, 2, 3]")
    write("syntax_error.ipynb", solution_cells(lambda s: s + "\n    return (("))
    write("exception_at_import.ipynb", solution_cells(lambda s: "import no_such_module\n" + s))
    write("infinite_loop.ipynb", inserted("while True:\n    pass"))
    write("sys_exit.ipynb", inserted('import sys\n\nsys.exit("I give up")'))
    write("nan_outputs.ipynb", appended(SABOTAGE["nan_outputs"]))
    write("wrong_shapes.ipynb", appended(SABOTAGE["wrong_shapes"]))
    write("other_assignment.ipynb", read_notebook(SOLUTIONS / "ch01_encoder_decoder.ipynb"))
    write("os_exit.ipynb", inserted("import os\n\nos._exit(3)"))
    write(
        "memory_hog.ipynb", inserted("import torch\n\nbig = torch.ones(2**31, dtype=torch.uint8)")
    )
    shell = inserted(
        f"!touch {folder}/shell_ran\n%pip install nothing\nfiles = !ls\n"
        f"get_ipython().system('touch {folder}/system_ran')"
    )
    shell["cells"].append(_code_cell(f"%%bash\ntouch {folder}/bash_ran"))
    write("shell_magics.ipynb", shell)
    anonymous = copy.deepcopy(solution)
    del anonymous["metadata"]["course"]
    write("missing_assignment_id.ipynb", anonymous)
    return {
        "invalid_json.ipynb": ("invalid-notebook", True),
        "not_a_notebook.ipynb": ("invalid-notebook", True),
        "syntax_error.ipynb": ("syntax-error", True),
        "exception_at_import.ipynb": ("cell-error", True),
        "infinite_loop.ipynb": ("timeout", True),
        "sys_exit.ipynb": ("exit", True),
        "nan_outputs.ipynb": ("tests-failed", True),
        "wrong_shapes.ipynb": ("tests-failed", True),
        "other_assignment.ipynb": ("wrong-assignment", True),
        "os_exit.ipynb": ("crashed", True),
        "memory_hog.ipynb": ("memory-limit", False),  # later cells still run and score
        "shell_magics.ipynb": ("ok", False),  # neutralised, then graded in full
        "missing_assignment_id.ipynb": ("ok", False),  # --assignment says which
    }


def _hidden_secrets() -> list[str]:
    """Every string and code line of the hidden tests that a leak would reveal."""
    secrets = set()
    for path in HIDDEN.glob("*.py"):
        source = path.read_text()
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                secrets.add(node.value)
            if isinstance(node, ast.JoinedStr):
                parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
                secrets.update(p for p in parts if len(p) >= 12)
        secrets.update(line.strip() for line in source.splitlines())
    return sorted(
        s for s in secrets if len(s.strip()) >= 12 and not s.startswith(("import", "from"))
    )


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    expected = _broken_batch(folder)
    feedback = folder / "feedback"
    proc = _cli(
        "grade",
        *sorted(str(folder / name) for name in expected),
        "--csv",
        str(folder / "gradebook.csv"),
        "--assignment",
        LSTM,
        "--hidden",
        str(HIDDEN),
        "--feedback",
        str(feedback),
        "--timeout",
        "8",
        cwd=folder,
    )
    return folder, expected, proc


def test_broken_submissions_each_get_a_row_status_and_reason(broken):
    folder, expected, proc = broken
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _read_csv(folder / "gradebook.csv")
    assert len(rows) == len(expected), "a submission was skipped"
    for name, (status, zero) in expected.items():
        row = rows[str(folder / name)]
        assert row["status"] == status, (name, row["status"], row["reason"])
        if zero:
            assert float(row["score"]) == 0, (name, row)
            test_columns = [k for k in row if ":" in k]
            assert all(row[k] in ("0", "") for k in test_columns), (name, row)
        if status != "ok":
            assert row["reason"], f"{name}: no reason given"
        else:
            assert row["score"] == row["max_score"], (name, row["reason"])
    assert "NaN" in rows[str(folder / "nan_outputs.ipynb")]["reason"]
    assert "expected shape" in rows[str(folder / "wrong_shapes.ipynb")]["reason"]
    assert "not valid JSON" in rows[str(folder / "invalid_json.ipynb")]["reason"]
    assert "no_such_module" in rows[str(folder / "exception_at_import.ipynb")]["reason"]
    assert "ch01-encoder-decoder" in rows[str(folder / "other_assignment.ipynb")]["reason"]
    for marker in ("shell_ran", "system_ran", "bash_ran"):
        assert not (folder / marker).exists(), f"a submission's shell command ran ({marker})"


def test_csv_columns_and_printed_summary(broken):
    folder, expected, proc = broken
    with open(folder / "gradebook.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header[:5] == ["submission", "assignment", "score", "max_score", "status"]
    spec = registry.load_assignment(LSTM)
    visible = [t.id for t in spec.tests]
    assert [h for h in header[5:-3] if "[hidden]" not in h] == visible
    assert any("[hidden]" in h for h in header)
    assert header[-3:] == ["stopped_by", "reason", "flags"]
    out = proc.stdout
    assert f"Graded {len(expected)} submissions" in out
    assert "Mean score:" in out and "Failures by reason:" in out
    for status in ("timeout", "syntax-error", "wrong-assignment", "invalid-notebook"):
        assert f"  {status} (" in out


def test_hidden_tests_never_leak(broken):
    folder, expected, proc = broken
    texts = [proc.stdout, proc.stderr, (folder / "gradebook.csv").read_text()]
    texts += [p.read_text() for p in sorted((folder / "feedback").glob("*.txt"))]
    assert len(texts) == 3 + len(expected)
    everything = "\n".join(texts)
    assert "hidden test failed" in everything
    leaks = [s for s in _hidden_secrets() if s in everything]
    assert not leaks, f"hidden test text in the grading output: {leaks[:5]}"


def test_unknown_assignment_and_file_name_fallback(tmp_path):
    solution = read_notebook(SOLUTIONS / "ch01_lstm_cell.ipynb")
    del solution["metadata"]["course"]
    (tmp_path / "homework.ipynb").write_text(json.dumps(solution))
    (tmp_path / "alice_ch01_lstm_cell.ipynb").write_text(json.dumps(solution))
    rows = {r.submission: r for r in grade_batch(sorted(tmp_path.glob("*.ipynb")), timeout=60)}
    anonymous = rows[str(tmp_path / "homework.ipynb")]
    assert anonymous.status == "unknown-assignment" and anonymous.score == 0
    assert "--assignment" in anonymous.reason
    named = rows[str(tmp_path / "alice_ch01_lstm_cell.ipynb")]
    assert (named.assignment, named.status, named.score) == (LSTM, "ok", named.max_score)


def test_grading_twice_gives_the_same_csv(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _broken_batch(folder)
    shutil.copy(EXERCISES / "ch01_lstm_cell.ipynb", folder / "stub.ipynb")
    names = ["wrong_shapes.ipynb", "stub.ipynb", "invalid_json.ipynb"]
    paths = [folder / n for n in names]
    write_csv(grade_batch(paths, assignment=LSTM, hidden_dir=HIDDEN), tmp_path / "a.csv")
    write_csv(grade_batch(paths[::-1], assignment=LSTM, hidden_dir=HIDDEN), tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


STUDENT_SIDE_PROBE = """
import pkgutil, sys
import course_lib
from course_lib.grading import checker, registry

for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
    if not info.name.endswith("__main__"):  # the forwarding command, run by instructors only
        __import__(info.name)
for aid in registry.known_assignments():
    registry.load_assignment(aid)  # every assignment's visible tests

def lstm_num_parameters(input_size, hidden_size, num_layers=1):
    return 4 * hidden_size * (input_size + hidden_size + 2) * num_layers

check = checker("ch01-lstm-cell")
check("q3")
print("LOADED", sorted(m for m in sys.modules if m.split(".")[0] == "course_grader"))
"""


def test_the_students_side_never_imports_the_instructors_grader():
    """Issue 29: a student's notebook imports course_lib (every module of it), loads the
    visible tests and runs ``check``, and the instructor's package course_grader is never
    imported. (``python -m course_lib.grading`` forwards to it; a student never runs it.)"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("COURSE_GRADING", None)
    out = subprocess.run(
        [sys.executable, "-c", STUDENT_SIDE_PROBE],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ch01-lstm-cell, question q3:" in out.stdout, out.stdout  # check() did run
    assert "LOADED []" in out.stdout, out.stdout


def test_course_lib_grading_forwards_to_the_grader():
    """The old command, ``python -m course_lib.grading ...``, still runs the grader's."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "course_lib.grading", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "python -m course_grader" in out.stdout and "gradescope" in out.stdout


def test_the_sandbox_shows_only_the_sandboxed_part_of_the_grader():
    """Of course_grader, only sandboxed/ (the student process, the wire format, the shared
    messages) and the package's empty __init__ are bound into a submission's sandbox; the
    judge's modules (tests, flags, gradebooks) are not, and nothing in sandboxed/ imports them."""
    from course_grader import sandbox

    binds = sandbox._binds()
    grader = str(sandbox.GRADER_DIR)
    sources = [binds[i + 1] for i, a in enumerate(binds) if a == "--ro-bind"]
    assert sorted(s for s in sources if s.startswith(grader)) == [
        f"{grader}/__init__.py",
        f"{grader}/sandboxed",
    ]
    init = (sandbox.GRADER_DIR / "__init__.py").read_text()
    assert not re.search(r"^\s*(import|from)\s", init, re.M), "course_grader/__init__ imports"
    for path in sorted((sandbox.GRADER_DIR / "sandboxed").glob("*.py")):
        for m in re.finditer(r"^\s*(?:from|import)\s+(course_\w+[\w.]*)", path.read_text(), re.M):
            assert m.group(1).startswith("course_grader.sandboxed"), (path.name, m.group(1))
