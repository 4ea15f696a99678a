"""A hostile class: submissions that try to fool the grader, graded in ONE batch with honest ones.

Each hostile submission is the untouched exercise of ``ch01-lstm-cell`` (which
earns nothing) plus one cell that attacks the grader in one of the ways issue
13 lists, or a few more: replacing the grader's functions, patching what the
tests compare with (``torch.Tensor`` methods, an ``int`` whose ``==`` is always
true), walking frames and the heap for reference values, rewriting the report
through the grader's own emit function or the channel, reading ``/proc`` to
find the hidden tests and a classmate's file (and copying its solution), a
double-forked process that outlives grading to rewrite the gradebook,
``sitecustomize.py`` and ``.pth`` files written into the import path,
overwriting a classmate's file, ``setsid`` children holding the output, a
fork bomb, a result too large to send, forged messages, network access.
Malformed files (``{"cells": [], "metadata": []}``, JSON nested 100 000 deep,
not JSON, empty) are in the same batch, with two honest solutions and one that
is honest but whose ``lstm_num_parameters`` never returns.

What must hold (issue 13): the batch completes and writes a CSV; honest
solutions get full marks; no hostile submission gains a point; the one that
hangs loses exactly the points of the function that hangs; no file of the
batch changes; nothing is left running; the gradebook is not rewritten later;
no text of the hidden tests appears in any output; the flags column flags
every hostile submission and no honest one (beyond copying the published
solution, which the honest ones here do, verbatim).

Needs ``bwrap`` (``apt-get install bubblewrap``); CI installs it.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_grader.notebook import cell_source, read_notebook
from course_grader.sandbox import SandboxUnavailable, require_bwrap
from course_grader.sandboxed.messages import Cell, CellFailed
from tests.test_grading import _code_cell

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ROOT / "tests" / "fixtures" / "hidden_examples"
LSTM = "ch01-lstm-cell"
MARK = "hostile-marker-7f3a"  # in the command line of anything a hostile cell leaves running

# The scan of /proc that several attacks share: command lines of every visible process.
PROC_SCAN = """
import os


def _cmdlines():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out.append([a.decode(errors="replace") for a in f.read().split(b"\\0")])
            except OSError:
                pass
    return out


def _after(flag):
    return [args[i + 1] for args in _cmdlines() for i, a in enumerate(args[:-1]) if a == flag]


def _notebooks():
    found = [a for args in _cmdlines() for a in args if a.endswith(".ipynb")]
    for args in _cmdlines():
        for a in args:
            if os.path.isdir(a):
                found += [os.path.join(a, n) for n in os.listdir(a) if n.endswith(".ipynb")]
    return sorted(set(found))
"""

ATTACKS = {
    # Replace the grader's own functions from the notebook.
    "replace_grader": """
import sys

import course_lib.grading.expect as expect
import course_lib.grading.runner as runner
from course_lib.grading.runner import TestResult


def _pass(spec, namespace):
    return TestResult(spec, 1.0, "")


for module in list(sys.modules.values()):
    for name in ("run_test", "fail", "expect_close", "expect_tensor", "expect_number"):
        if hasattr(module, name):
            try:
                setattr(module, name, _pass if name == "run_test" else (lambda *a, **k: None))
            except Exception:
                pass
runner.run_test = _pass
expect.TestFailed = type("TestFailed", (BaseException,), {})
""",
    # Patch what the tests compare with; results that claim to equal anything.
    "patch_torch": """
import torch

torch.Tensor.__eq__ = lambda self, other: torch.tensor(True)
torch.Tensor.__ne__ = lambda self, other: torch.tensor(False)
torch.Tensor.__gt__ = lambda self, other: torch.zeros((), dtype=torch.bool)
torch.Tensor.any = lambda self, *a, **k: torch.tensor(False)
torch.allclose = lambda *a, **k: True
torch.isfinite = lambda t: torch.ones_like(t, dtype=torch.bool)


class Anything(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __sub__(self, other):
        return 0

    def __rsub__(self, other):
        return 0

    __hash__ = int.__hash__


class Liar(torch.Tensor):
    def __eq__(self, other):
        return True


def lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh):
    return torch.zeros(1).as_subclass(Liar), torch.zeros(1).as_subclass(Liar)


def lstm_forward(xs, h0, c0, W_ih, W_hh, b_ih, b_hh):
    return torch.zeros(1).as_subclass(Liar), (torch.zeros(1), torch.zeros(1))


def lstm_num_parameters(input_size, hidden_size, num_layers=1):
    return Anything(0)
""",
    # Return the reference values the tests hold, found up the stack or on the heap.
    "walk_frames": """
import gc
import sys

import torch


def _steal(like):
    found = []
    frame = sys._getframe(1)
    while frame is not None:
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, torch.Tensor) and ("ref" in name or "expected" in name):
                found.append(value)
        frame = frame.f_back
    if len(found) < 2:
        found += [
            o
            for o in gc.get_objects()
            if isinstance(o, torch.Tensor) and o.shape == like.shape and o is not like
        ][:2]
    return found


def lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh):
    found = _steal(h)
    if len(found) >= 2:
        return found[0], found[1]
    return torch.zeros(1), torch.zeros(1)


def lstm_num_parameters(input_size, hidden_size, num_layers=1):
    frame = sys._getframe(1)
    while frame is not None:
        if isinstance(frame.f_locals.get("expected"), int):
            return frame.f_locals["expected"]
        frame = frame.f_back
    return -1
""",
    # Rewrite the report: the grader's emit function (through closures and the heap)
    # and the channel itself (every socket and pipe this process holds).
    "rewrite_report": """
import gc
import json
import os
import struct

IDS = [
    "q1:returns_h_and_c_of_shape_batch_by_hidden", "q1:matches_torch_lstmcell",
    "q1:works_for_any_batch_size", "q2:returns_every_hidden_state_and_the_last_state",
    "q2:matches_torch_lstm_over_a_sequence", "q2:the_last_output_is_the_final_state",
    "q3:counts_the_parameters_of_one_layer", "q3:counts_the_parameters_of_stacked_layers",
]
lines = [json.dumps({"event": "test", "id": i, "fraction": 1.0, "message": ""}) for i in IDS]
lines.append(json.dumps({"event": "done"}))
blob = ("\\n".join(lines) + "\\n").encode()
for obj in gc.get_objects():
    if callable(obj) and getattr(obj, "__name__", "") in ("emit", "send"):
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                target = cell.cell_contents
                if hasattr(target, "write"):
                    target.write(blob.decode())
                    target.flush()
            except Exception:
                pass
        try:
            obj({"id": 1, "ok": 16})
        except Exception:
            pass
for fd in range(64):
    try:
        os.write(fd, blob)
        head = json.dumps({"id": 1, "ok": {"t": [1, 1]}}).encode()
        os.write(fd, struct.pack(">II", len(head), 0) + head)
    except OSError:
        pass
""",
    # Find the hidden tests and the classmates' files in /proc; copy a classmate's solution.
    "proc_snoop": PROC_SCAN
    + """
import glob
import json

HIDDEN_SOURCE = ""
for folder in _after("--hidden") + ["/work", "/root", "/home", "/tmp"]:
    for path in glob.glob(os.path.join(folder, "**", "ch01-lstm-cell.py"), recursive=True):
        try:
            HIDDEN_SOURCE += open(path).read()
        except OSError:
            pass
for path in _notebooks():
    try:
        nb = json.load(open(path))
        sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    except Exception:
        continue
    if any("def lstm_step" in s and "NotImplementedError" not in s for s in sources):
        for s in sources:
            if s.lstrip().startswith(("def lstm", "import", "from")):
                exec(s, globals())
        break
""",
    # A double-forked daemon that outlives grading and rewrites the gradebook.
    "double_fork": PROC_SCAN
    + """
import sys

DAEMON = (
    "import sys, time\\n"
    "deadline = time.time() + 60\\n"
    "while time.time() < deadline:\\n"
    "    for path in sys.argv[2:]:\\n"
    "        try:\\n"
    "            rows = open(path).read().splitlines()\\n"
    "            rows = [r.replace(',0,16,', ',16,16,') for r in rows]\\n"
    "            open(path, 'w').write(chr(10).join(rows) + chr(10))\\n"
    "        except OSError:\\n"
    "            pass\\n"
    "    time.sleep(0.5)\\n"
)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", DAEMON, "MARKER", *_after("--csv")])
    os._exit(0)
""".replace("MARKER", MARK),
    # sitecustomize.py / usercustomize.py / .pth written into the import path.
    "sitecustomize": """
import os
import site
import sys

import course_lib

PAYLOAD = "import os\\nif os.environ.get('COURSE_GRADING') == '1':\\n    os._exit(0)\\n"
PTH = "import os; os.environ.get('COURSE_GRADING') == '1' and os._exit(0)\\n"
folders = {os.getcwd(), os.path.expanduser("~"), *sys.path, *site.getsitepackages()}
folders.add(os.path.dirname(os.path.dirname(course_lib.__file__)))
folders.add(os.path.join(os.path.dirname(course_lib.__file__), "grading", "assignments"))
for folder in folders:
    for name, text in (
        ("sitecustomize.py", PAYLOAD),
        ("usercustomize.py", PAYLOAD),
        ("zz_hostile.pth", PTH),
    ):
        try:
            with open(os.path.join(folder or ".", name), "w") as f:
                f.write(text)
        except OSError:
            pass
try:
    path = os.path.join(os.path.dirname(course_lib.__file__), "grading", "runner.py")
    with open(path, "a") as f:
        f.write("\\nHIDDEN_FAILED = 'passed'\\n")
except OSError:
    pass
""",
    # Overwrite every classmate's file it can find.
    "overwrite_classmate": PROC_SCAN
    + """
import glob

candidates = _notebooks()
for folder in ("/tmp", "/work", "/home", os.getcwd()):
    candidates += glob.glob(os.path.join(folder, "**", "*.ipynb"), recursive=True)
for path in candidates:
    if "overwrite_classmate" not in path:
        try:
            with open(path, "w") as f:
                f.write('{"cells": [], "metadata": {}}')
        except OSError:
            pass
""",
    # setsid children that keep the output pipes (and the channel) open.
    "setsid_pipe": """
import os
import subprocess

subprocess.Popen(["sh", "-c", "sleep 600; : MARKER"], start_new_session=True)
subprocess.Popen("setsid sh -c 'sleep 601; : MARKER' &", shell=True)
if os.fork() == 0:
    os.setsid()
    os.execv("/bin/sh", ["sh", "-c", "sleep 602; : MARKER"])
""".replace("MARKER", MARK),
    # Every process it can start, forever.
    "fork_bomb": """
import os

while True:
    try:
        os.fork()
    except OSError:
        pass
""",
    # Results too large to send, and objects instead of results.
    "oversized_result": """
import torch


def lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh):
    return torch.zeros(80_000_000), torch.zeros(1)


class Result:
    def __eq__(self, other):
        return True


def lstm_forward(xs, h0, c0, W_ih, W_hh, b_ih, b_hh):
    return Result()


def lstm_num_parameters(input_size, hidden_size, num_layers=1):
    return [Result()]
""",
    # Network, environment and the grader's sources.
    "network_and_env": """
import os
import socket

import course_lib

LOOT = {"env": dict(os.environ)}
for address in (("1.1.1.1", 53), ("pypi.org", 443), ("127.0.0.1", 22)):
    try:
        socket.create_connection(address, timeout=1).close()
        LOOT[str(address)] = "open"
    except OSError as err:
        LOOT[str(address)] = str(err)
root = os.path.dirname(os.path.dirname(course_lib.__file__))
for sub in ("tests/fixtures/hidden_examples", "solutions", "submissions"):
    try:
        LOOT[sub] = os.listdir(os.path.join(root, sub))
    except OSError as err:
        LOOT[sub] = str(err)
""",
}

HANG_Q3 = """
def lstm_num_parameters(input_size, hidden_size, num_layers=1):
    while True:
        pass
"""

# What each hostile cell must at least be flagged for.
EXPECTED_FLAGS = {
    "replace_grader": "grader-internals",
    "patch_torch": "patching",
    "walk_frames": "frames",
    "rewrite_report": "frames",
    "proc_snoop": "proc",
    "double_fork": "processes",
    "sitecustomize": "patching",
    "overwrite_classmate": "files",
    "setsid_pipe": "processes",
    "fork_bomb": "processes",
    "network_and_env": "network",
}


def _write_batch(folder: Path) -> dict[str, str]:
    """Write the batch; return {file name: kind} with kind honest, hang, hostile or malformed."""
    stub = read_notebook(ROOT / "exercises" / "ch01_lstm_cell.ipynb")
    solution = read_notebook(ROOT / "solutions" / "ch01_lstm_cell.ipynb")
    kinds = {}
    for name, source in ATTACKS.items():
        nb = copy.deepcopy(stub)
        nb["cells"].append(_code_cell(source))
        (folder / f"{name}.ipynb").write_text(json.dumps(nb))
        kinds[f"{name}.ipynb"] = "hostile"
    for name in ("honest_a", "honest_b"):
        shutil.copy(ROOT / "solutions" / "ch01_lstm_cell.ipynb", folder / f"{name}.ipynb")
        kinds[f"{name}.ipynb"] = "honest"
    hang = copy.deepcopy(solution)
    hang["cells"].append(_code_cell(HANG_Q3))
    (folder / "honest_but_q3_hangs.ipynb").write_text(json.dumps(hang))
    kinds["honest_but_q3_hangs.ipynb"] = "hang"
    malformed = {
        "metadata_list.ipynb": '{"cells": [], "metadata": []}',
        "deeply_nested.ipynb": "[" * 100_000 + "]" * 100_000,
        "not_json.ipynb": "print('hello')\n",
        "empty.ipynb": "",
    }
    for name, text in malformed.items():
        (folder / name).write_text(text)
        kinds[name] = "malformed"
    return kinds


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.ipynb"))
    }


def _left_running() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if MARK.encode() in cmdline:
                found.append(pid + ": " + cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def _import_path_files() -> list[Path]:
    """sitecustomize/usercustomize/.pth planted on this machine's import path (or the repo)."""
    folders = {Path(p) for p in sys.path if p} | {ROOT, ROOT / "course_lib"}
    found = []
    for folder in folders:
        for name in ("sitecustomize.py", "usercustomize.py", "zz_hostile.pth"):
            path = folder / name
            if path.is_file() and "COURSE_GRADING" in path.read_text(errors="replace"):
                found.append(path)
    return found


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    try:
        require_bwrap()
    except SandboxUnavailable as err:
        pytest.fail(f"the hostile suite needs the sandbox: {err}")
    folder = tmp_path_factory.mktemp("hostile")
    batch = folder / "submissions"
    batch.mkdir()
    kinds = _write_batch(batch)
    before = _digest(batch)
    hidden_before = {p.name: p.read_bytes() for p in HIDDEN.glob("*.py")}
    gradebook = folder / "gradebook.csv"
    start = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_lib.grading",
            "grade",
            *sorted(str(batch / n) for n in kinds),
            "--csv",
            str(gradebook),
            "--assignment",
            LSTM,
            "--hidden",
            str(HIDDEN),
            "--feedback",
            str(folder / "feedback"),
            "--timeout",
            "12",
            "--call-timeout",
            "4",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.perf_counter() - start
    written = gradebook.read_bytes() if gradebook.exists() else b""
    time.sleep(3)  # time for anything left running to rewrite the gradebook
    planted = _import_path_files()
    for path in planted:
        path.unlink()
    yield {
        "folder": folder,
        "batch": batch,
        "kinds": kinds,
        "proc": proc,
        "seconds": seconds,
        "before": before,
        "after": _digest(batch),
        "hidden_before": hidden_before,
        "written": written,
        "later": gradebook.read_bytes() if gradebook.exists() else b"",
        "planted": planted,
        "running": _left_running(),
    }


def _rows(hostile) -> dict[str, dict[str, str]]:
    with open(hostile["folder"] / "gradebook.csv", newline="") as f:
        return {Path(r["submission"]).name: r for r in csv.DictReader(f)}


def test_the_batch_completes_with_a_row_for_every_file(hostile):
    proc = hostile["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _rows(hostile)
    assert sorted(rows) == sorted(hostile["kinds"])
    for name, row in rows.items():
        assert row["status"], name
        if row["status"] != "ok":
            assert row["reason"], f"{name}: no reason"
    # 20 submissions, some stuck on purpose (time-outs of 4 s or 12 s): the batch must not
    # be stretched by a process that keeps a pipe open
    assert hostile["seconds"] < 240, hostile["seconds"]


def test_honest_solutions_get_full_marks_in_the_same_batch(hostile):
    rows = _rows(hostile)
    for name, kind in hostile["kinds"].items():
        if kind == "honest":
            row = rows[name]
            assert (row["status"], row["score"], row["max_score"]) == ("ok", "16", "16"), row


def test_a_function_that_hangs_costs_only_its_own_points(hostile):
    row = _rows(hostile)["honest_but_q3_hangs.ipynb"]
    assert row["status"] == "timeout", row
    assert float(row["score"]) == 16 - 3, row  # q3: 1 + 1 visible, 1 hidden
    assert "did not return within 4 s" in row["reason"], row["reason"]
    q3 = [k for k in row if k.startswith("q3:")]
    assert q3 and all(row[k] == "0" for k in q3)
    assert all(row[k] != "0" for k in row if k.startswith(("q1:", "q2:")))


def test_no_hostile_submission_gains_a_point(hostile):
    rows = _rows(hostile)
    for name, kind in hostile["kinds"].items():
        if kind in ("hostile", "malformed"):
            row = rows[name]
            assert float(row["score"]) == 0, (name, row["status"], row["reason"])
            assert all(row[k] in ("0", "") for k in row if ":" in k), (name, row)
    for name in ("metadata_list.ipynb", "deeply_nested.ipynb", "not_json.ipynb", "empty.ipynb"):
        assert rows[name]["status"] == "invalid-notebook", rows[name]


def test_no_file_changes_and_the_gradebook_is_not_rewritten_later(hostile):
    assert hostile["after"] == hostile["before"], "a submission's file was changed"
    assert {p.name: p.read_bytes() for p in HIDDEN.glob("*.py")} == hostile["hidden_before"]
    assert hostile["written"] and hostile["later"] == hostile["written"]
    assert not hostile["planted"], f"files planted on the import path: {hostile['planted']}"
    assert not hostile["running"], f"left running after grading: {hostile['running']}"


def test_no_hidden_text_in_any_output(hostile):
    from tests.test_grading import _hidden_secrets

    folder = hostile["folder"]
    texts = [hostile["proc"].stdout, hostile["proc"].stderr, (folder / "gradebook.csv").read_text()]
    texts += [p.read_text() for p in sorted((folder / "feedback").glob("*.txt"))]
    everything = "\n".join(texts)
    assert "hidden test failed" in everything
    leaks = [s for s in _hidden_secrets() if s in everything]
    assert not leaks, f"hidden test text in the grading output: {leaks[:5]}"


def test_the_flags_column_points_at_every_hostile_submission(hostile):
    rows = _rows(hostile)
    for name, flag in EXPECTED_FLAGS.items():
        flags = rows[f"{name}.ipynb"]["flags"]
        assert flag in flags, (name, flags)
    for name, kind in hostile["kinds"].items():
        if kind == "honest":
            assert rows[name]["flags"].startswith("copies-solution"), rows[name]["flags"]
            assert ";" not in rows[name]["flags"], rows[name]["flags"]
    # the flags are for the instructor: not in the students' feedback
    feedback = "\n".join(p.read_text() for p in (hostile["folder"] / "feedback").glob("*.txt"))
    assert "copies-solution" not in feedback


def test_the_sandbox_hides_the_host(tmp_path):
    """Run one cell in the sandbox and look at what it sees (the instructor's view of item 2)."""
    from course_grader.remote import Session
    from course_grader.sandbox import Limits

    secrets = [ROOT / "tests", ROOT / "solutions", ROOT / ".git", HIDDEN, tmp_path]
    (tmp_path / "classmate.ipynb").write_text("{}")
    probe = f"""
import os, socket
seen = {{
    "proc": sorted(p for p in os.listdir("/proc") if p.isdigit()),
    "pid1": open("/proc/1/cmdline", "rb").read().replace(b"\\0", b" ").decode(),
    "visible": [p for p in {[str(p) for p in secrets]!r} if os.path.exists(p)],
    "uid": os.getuid(),
    "env": sorted(os.environ),
}}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    seen["net"] = "open"
except OSError as err:
    seen["net"] = type(err).__name__
for path in ("/usr/x", "/opt/course/course_lib/x", "/x", {str(ROOT / "x")!r}):
    try:
        open(path, "w")
        seen[path] = "writable"
    except OSError:
        seen[path] = "read-only"
open("/tmp/x", "w").write("private")
"""
    session = Session([Cell(1, probe)], Limits(), cells_timeout=60, uid=2_999_991)
    events, kind, reason = session.start()
    assert kind is None, (kind, reason, events)
    assert not [e for e in events if isinstance(e, CellFailed)], events
    seen = session.namespace(["seen"])["seen"]
    session.close()

    assert len(seen["proc"]) <= 3, seen["proc"]  # bwrap's init and the student's process
    assert "--ro-bind" not in seen["pid1"] and "--hidden" not in seen["pid1"], seen["pid1"]
    assert seen["visible"] == [], f"host paths visible in the sandbox: {seen['visible']}"
    assert seen["net"] != "open"
    for path in ("/usr/x", "/opt/course/course_lib/x", "/x", str(ROOT / "x")):
        assert seen[path] == "read-only", path
    assert {"HOME", "PATH", "PYTHONPATH"} <= set(seen["env"])
    assert not [k for k in seen["env"] if "TOKEN" in k or "KEY" in k or "SECRET" in k]
    if os.geteuid() == 0:
        assert seen["uid"] != 0, "the student's code runs as root"
    assert not (ROOT / "x").exists()
    assert not Path("/tmp/x").exists() or Path("/tmp/x").read_text() != "private"


def test_grade_refuses_without_bwrap_and_says_how_to_install_it(tmp_path):
    shutil.copy(ROOT / "exercises" / "ch01_lstm_cell.ipynb", tmp_path / "stub.ipynb")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=str(tmp_path / "nowhere"))

    def grade(*extra):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "course_lib.grading",
                "grade",
                str(tmp_path / "stub.ipynb"),
                "--csv",
                str(tmp_path / "g.csv"),
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    refused = grade()
    assert refused.returncode == 2
    assert "bwrap" in refused.stderr and "apt-get install bubblewrap" in refused.stderr
    assert "--no-sandbox" in refused.stderr and not (tmp_path / "g.csv").exists()
    trusted = grade("--no-sandbox")
    assert trusted.returncode == 0, trusted.stderr
    assert "WITHOUT the bubblewrap sandbox" in trusted.stderr
    assert "READ AND WRITE YOUR FILES" in trusted.stderr
    assert (tmp_path / "g.csv").exists()


def test_exercise_notebooks_still_check_themselves_without_a_sandbox(capsys):
    """The student's own check() runs in the student's kernel: no bwrap, no judge."""
    import torch

    from course_lib.grading.check import check

    namespace: dict = {"torch": torch}
    solution = read_notebook(ROOT / "solutions" / "ch01_lstm_cell.ipynb")
    for cell in solution["cells"]:
        if cell["cell_type"] == "code" and "def lstm" in cell_source(cell):
            exec(compile(cell_source(cell), "<ipython-input-1>", "exec"), namespace)
    results = check("q1", LSTM, namespace=namespace)
    assert results and all(r.passed for r in results), capsys.readouterr().out


def test_a_python_installed_under_tmp_is_not_hidden_by_the_private_tmp(monkeypatch):
    """A checkout or virtual environment under /tmp is bound after the sandbox's own /tmp
    is mounted; the other way round the tmpfs hides it and every student process dies at
    start (this happened to a clean clone made under /tmp)."""
    from course_grader import sandbox

    monkeypatch.setattr(sandbox, "_python_roots", lambda: ["/tmp/checkout/.venv"])
    args = sandbox._binds()
    pairs = list(zip(args, args[1:], strict=False))
    private_tmp = pairs.index(("--tmpfs", "/tmp"))
    venv = pairs.index(("--ro-bind", "/tmp/checkout/.venv"))
    assert private_tmp < venv
    assert ("--dir", "/tmp/checkout") in pairs[private_tmp:venv]  # its parent made inside
