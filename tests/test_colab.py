"""Colab, proven: the install cell changes nothing Colab ships, and notebooks run there.

Students open each chapter in Google Colab, whose runtime comes with its own
torch, numpy, ipywidgets, transformers and more. A notebook whose install
cell upgrades or downgrades one of them mid-session is the classic way Colab
notebooks break. This test rebuilds Colab's environment and checks both that
the install cell leaves it alone and that chapters run in it.

How "Colab" is built here:

1. **The packages.** A fresh virtual environment made with Colab's Python
   (3.13: ``$COLAB_PYTHON``, else ``python3.13`` on ``PATH``, else pyenv's;
   CI fails without one, a local run skips) gets exactly the versions of
   ``tests/colab_constraints.txt``: Colab's, copied from the
   ``pip-freeze.txt`` Colab publishes by ``tools/colab_constraints.py`` (the
   file names the snapshot and every version that had to differ here),
   installed with ``--no-deps`` so that it holds what Colab holds and nothing
   more. The one exception is what PyPI's CUDA build of torch needs beside it
   (nvidia-*, triton, cuda-*): installed, but not compared with Colab.
2. **The repository.** The install cell installs ``course_lib`` from the
   course's GitHub repository. Here it installs from a git repository made
   from this checkout (its tracked files, and new files git does not ignore:
   what a commit of the working tree would hold), through a ``git+file://``
   URL. Replacing the URL is the only change made to the cell.
3. **"In Colab".** The cell runs only when ``"google.colab" in sys.modules``;
   Colab's kernel imports ``google.colab`` as it starts. The kernel here is
   started with IPython's own start-up option (``exec_lines``) set to put an
   empty module of that name into ``sys.modules``, and nothing else: the
   notebooks and the environment's packages stay as they are.
4. **Where notebooks run.** In a new, empty folder (Colab's ``/content``),
   with ``PYTHONPATH`` cleared, so ``import course_lib`` can only find the
   package the install cell installed (a last cell, added to the copy that
   runs, checks so).

Every installed distribution is recorded (name, version, and when its
metadata was written, so that reinstalling the same version counts too)
before the install cell and after each notebook; the only change allowed is
``course-lib`` being added.

This is the slowest test file after the notebooks. On Python 3.13 with PyPI's
CUDA build of torch it took about 17 minutes on two cores busy with other work
(2026-11-26): 4.5 to build the environment (the CUDA wheel and its nvidia
packages fill 5 GB), 6 for Chapter 14, 2 to grade the 28 exercises. It runs with the README's test command and in
CI; ``pytest -m "not colab"`` leaves it out locally. Nothing is cached
between runs: the environment and the repository snapshot are made anew in a
temporary folder each time.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import nbformat
import pytest
import yaml

import course_lib
from course_lib.long_runs import code_digest
from tests.conftest import ROOT

pytestmark = pytest.mark.colab

CONSTRAINTS = ROOT / "tests" / "colab_constraints.txt"
REPO_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]

# What the install cell may change in Colab's environment: add the course's
# package, nothing else.
ALLOWED_ADDITIONS = {"course-lib"}

# What runs in the Colab-like environment, and why each was chosen. With
# COLAB_ALL_CHAPTERS=1 (the scheduled workflow colab.yml, and the status page's
# timings) every chapter runs; COLAB_TIMES=path writes each one's seconds there.
NOTEBOOKS = {
    "notebooks/ch03_self_attention.ipynb": "torch.utils.flop_counter, timings, sympy-free core",
    "notebooks/ch05_embeddings_tokenization.ipynb": "tokenizers, sympy, widgets (ipywidgets 7)",
    "notebooks/ch10_time_series.ipynb": "loads data: CO2 (statsmodels, pandas)",
    "notebooks/ch14_graph_attention.ipynb": "loads data: Cora; the heaviest chapter",
    "solutions/ch08_alibi_t5.ipynb": "an exercise and its check() (matched against transformers)",
}
if os.environ.get("COLAB_ALL_CHAPTERS") == "1":
    for _chapter in sorted((ROOT / "notebooks").glob("ch*.ipynb")):
        NOTEBOOKS.setdefault(_chapter.relative_to(ROOT).as_posix(), "every chapter")
# Colab's Python; the machine image and GitHub's runners (actions/setup-python) have it.
COLAB_PYTHON_VERSION = "3.13"
# What pip installs beside PyPI's CUDA build of torch 2.11 (nvidia-cublas, nvidia-cudnn-cu13,
# ..., triton, cuda-toolkit, cuda-pathfinder, cuda-bindings): Colab's CPU runtime has the CPU
# build from PyTorch's index, which needs none of them, so they follow from where this test
# gets torch, not from Colab's choices, and are left out of the comparison with its versions.
TORCH_BUILD_EXTRAS = re.compile(r"^(nvidia-.*|triton|cuda-.*)$")
# After a chapter runs, change every widget's value once (as a student moving a
# slider would) and fail if a callback raised, directly or inside interact().
WIDGETS_RESPOND = """
import traceback, ipywidgets as W
_ip, _errors, _moved = get_ipython(), [], 0
_show = _ip.showtraceback
_ip.showtraceback = lambda *a, **k: (_errors.append(traceback.format_exc()), _show(*a, **k))
for _w in list(W.Widget.widgets.values()):
    if not isinstance(_w, W.ValueWidget) or getattr(_w, "disabled", False):
        continue
    try:
        _options = list(getattr(_w, "options", None) or [])
        if _options:  # by index: labels are strings, options need not be (a list of ints)
            _last = len(_options) - 1
            if isinstance(_w.index, tuple):  # SelectMultiple
                _w.index = (_last,) if _w.index != (_last,) else (0,)
            else:
                _w.index = _last if _w.index != _last else 0
        elif isinstance(_w.value, bool):
            _w.value = not _w.value
        elif isinstance(_w.value, (int, float)) and hasattr(_w, "max"):
            _w.value = _w.max if _w.value != _w.max else _w.min
        else:
            continue
        _moved += 1
    except Exception:
        _errors.append(traceback.format_exc())
_ip.showtraceback = _show
print("WIDGETS_MOVED", _moved, "ERRORS", len(_errors))
print("\\n".join(_errors))
"""
# Every exercise's visible and hidden tests run too (what check() runs), on the
# solutions, through the batch grader: see test_every_exercise_passes_its_tests_in_colab.

# The name under which Colab's kernel has imported its own module; the
# install cell's guard looks for nothing else.
COLAB_MARKER = (
    "import sys, types; sys.modules.setdefault('google.colab', types.ModuleType('google.colab'))"
)
# The last cell added to each copy that runs.
WHERE_FROM = "import course_lib, sys\nprint('COURSE_LIB_FROM', course_lib.__file__)\nprint('PYTHON', sys.executable)"
CELL_TIMEOUT = 300  # seconds, as the book build


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _constraints() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[_canonical(name)] = version
    return pins


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def _clean_env(venv: Path) -> dict[str, str]:
    """The environment of Colab's kernel and pip: this one less anything that
    points Python at the checkout or at another environment."""
    env = {
        k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_NO_INPUT"] = "1"
    # ipykernel 6.17's debugger warns about Python 3.11's frozen modules at every start.
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return env


def _installed(python: Path, env: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Every distribution in the environment: name -> (version, mtime of its METADATA)."""
    report = json.loads(_run([str(python), "-m", "pip", "inspect", "--local"], env=env).stdout)
    installed = {}
    for dist in report["installed"]:
        meta = Path(dist["metadata_location"])
        stamp = (meta / "METADATA" if meta.is_dir() else meta).stat().st_mtime_ns
        installed[_canonical(dist["metadata"]["name"])] = (dist["metadata"]["version"], stamp)
    return installed


def _changes(before: dict, after: dict) -> list[str]:
    """What pip did to the environment, one line per package; additions of
    ALLOWED_ADDITIONS are not listed."""
    lines = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            if name not in ALLOWED_ADDITIONS:
                lines.append(f"added {name} {new[0]}")
        elif new is None:
            lines.append(f"removed {name} {old[0]}")
        elif old[0] != new[0]:
            lines.append(f"changed {name} {old[0]} -> {new[0]}")
        else:
            lines.append(f"reinstalled {name} {old[0]}")
    return lines


def _colab_python() -> Path:
    """Python 3.13, as Colab has it: $COLAB_PYTHON, python3.13 on PATH, or pyenv's."""
    fix = (
        "set COLAB_PYTHON to a Python 3.13, or install one "
        "(pyenv install 3.13; on GitHub, actions/setup-python)"
    )
    chosen = os.environ.get("COLAB_PYTHON")
    candidates = [chosen] if chosen else []
    # python3.13 on PATH may be a pyenv shim that refuses to run: each candidate is probed.
    candidates.append(shutil.which("python3.13") or "")
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(map(str, (pyenv / "versions").glob("3.13*/bin/python3.13")))
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() == COLAB_PYTHON_VERSION:
            return Path(candidate)
        if candidate == chosen:
            pytest.fail(
                f"COLAB_PYTHON={chosen} is not a working Python {COLAB_PYTHON_VERSION}: {fix}"
            )
    message = f"Colab runs Python {COLAB_PYTHON_VERSION}; none found: {fix}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _snapshot_repository(target: Path) -> str:
    """A git repository holding this checkout's files as a commit of the
    working tree would; returns the URL the install cell should use."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():  # a tracked file deleted in the working tree is left out
            dst = target / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    git = ["git", "-c", "user.name=colab-test", "-c", "user.email=colab-test@localhost"]
    _run([*git, "init", "-q", "-b", "main"], cwd=target)
    _run([*git, "add", "-A"], cwd=target)
    _run([*git, "commit", "-q", "-m", "snapshot of the working tree"], cwd=target)
    # the release tag the install cells pin, as the release workflow tags it on GitHub
    _run([*git, "tag", f"v{course_lib.__version__}"], cwd=target)
    return f"file://{target}"


class ColabEnv:
    """A Colab-like environment: its packages, a kernel, a folder to run in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.python = self.venv / "bin" / "python"
        self.content = root / "content"
        self.kernels = root / "kernels"
        self.repo_url = ""
        self.env: dict[str, str] = {}
        self.before: dict[str, tuple[str, int]] = {}
        self.times: dict[str, float] = {}
        self.install_output: str | None = None

    def build(self) -> None:
        start = time.perf_counter()
        _run([str(_colab_python()), "-m", "venv", str(self.venv)])
        self.env = _clean_env(self.venv)
        pins = _constraints()
        # Colab's pip first: the install cell runs with it.
        _run([str(self.python), "-m", "pip", "install", "-q", f"pip=={pins['pip']}"], env=self.env)
        _run(
            [str(self.python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(CONSTRAINTS)],
            env=self.env,
        )
        # What PyPI's CUDA build of torch needs beside it (nvidia-*, triton): pip adds only
        # these, since every other requirement is already met by Colab's versions.
        _run(
            [str(self.python), "-m", "pip", "install", "-q", f"torch=={pins['torch']}"],
            env=self.env,
        )
        installed = _installed(self.python, self.env)
        # The local label is dropped: where PyTorch's CPU index is reachable (GitHub's
        # runners: PIP_EXTRA_INDEX_URL) pip takes Colab's own build, 2.11.0+cpu.
        versions = {
            name: version.split("+")[0]
            for name, (version, _) in installed.items()
            if not TORCH_BUILD_EXTRAS.match(name)
        }
        assert versions == pins, (
            "the environment is not the constraints file: "
            f"{sorted(set(versions.items()) ^ set(pins.items()))}"
        )
        self.before = installed
        self.content.mkdir()
        spec = self.kernels / "colab"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [
                        str(self.python),
                        "-m",
                        "ipykernel_launcher",
                        "-f",
                        "{connection_file}",
                        f"--IPKernelApp.exec_lines={COLAB_MARKER}",
                    ],
                    "display_name": "Colab-like (test)",
                    "language": "python",
                }
            )
        )
        self.repo_url = _snapshot_repository(self.root / "repo")
        self.times["environment"] = time.perf_counter() - start

    def localise(self, nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
        """The notebook with its install cell pointed at the local snapshot."""
        nb = nbformat.from_dict(json.loads(json.dumps(nb)))
        install = next(c for c in nb.cells if c.cell_type == "code")
        assert REPO_URL in install.source, "the first code cell is not the install cell"
        install.source = install.source.replace(REPO_URL, self.repo_url)
        return nb

    def execute(self, nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager
        from nbclient import NotebookClient

        km = KernelManager(
            kernel_name="colab",
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(self.kernels)]),
        )
        client = NotebookClient(
            nb,
            km=km,
            timeout=CELL_TIMEOUT,
            allow_errors=False,
            resources={"metadata": {"path": str(self.content)}},
        )
        # cleanup_kc: shut the kernel down at the end (nbclient keeps a kernel alive
        # when it was handed the kernel manager).
        client.execute(cwd=str(self.content), env=self.env, cleanup_kc=True)
        return nb

    def changes(self) -> list[str]:
        return _changes(self.before, _installed(self.python, self.env))

    def run_install_cell(self) -> str:
        """Run the install cell alone (once), as the first cell of a new Colab session; its output."""
        if self.install_output is None:
            install = next(
                c
                for c in nbformat.read(ROOT / "notebooks" / "ch01_rnn_bottleneck.ipynb", 4).cells
                if c.cell_type == "code"
            )
            start = time.perf_counter()
            ran = self.execute(self.localise(nbformat.v4.new_notebook(cells=[install])))
            self.times["install cell"] = time.perf_counter() - start
            self.install_output = _text(ran.cells[0])
        return self.install_output


@pytest.fixture(scope="module")
def colab(tmp_path_factory) -> ColabEnv:
    env = ColabEnv(tmp_path_factory.mktemp("colab"))
    env.build()
    print(f"\nColab-like environment built in {env.times['environment']:.0f} s")
    return env


def _text(cell) -> str:
    return "".join(
        o.get("text", "") if o.get("output_type") == "stream" else json.dumps(o.get("data", {}))
        for o in cell.get("outputs", [])
    )


def test_constraints_file_pins_colab_versions():
    """The constraints file is well formed, names its source, and pins what the course imports."""
    text = CONSTRAINTS.read_text()
    assert "googlecolab/backend-info" in text and re.search(r"^# commit: [0-9a-f]{40}$", text, re.M)
    assert _header("python") == COLAB_PYTHON_VERSION, "the snapshot's Python is not the test's"
    pins = _constraints()
    for name in ("torch", "numpy", "matplotlib", "ipywidgets", "ipykernel", "transformers"):
        assert name in pins, f"{name} is not pinned"
    assert pins["ipywidgets"].startswith("7."), "Colab ships ipywidgets 7"


def test_install_cell_changes_nothing_colab_ships(colab):
    output = colab.run_install_cell()
    # IPython's %pip says this after running pip: proof that the guard let it run.
    assert "you may need to restart the kernel" in output, f"the install cell did not run: {output}"
    after = _installed(colab.python, colab.env)
    assert "course-lib" in after, "the install cell did not install course-lib"
    changes = _changes(colab.before, after)
    assert not changes, "the install cell changed Colab's packages:\n" + "\n".join(changes)
    print(f"install cell: {colab.times['install cell']:.1f} s, nothing changed")


@pytest.mark.parametrize("path", list(NOTEBOOKS), ids=lambda p: Path(p).stem)
def test_notebook_runs_in_colab(colab, path):
    nb = colab.localise(nbformat.read(ROOT / path, 4))
    chapter = path.startswith("notebooks/")
    if chapter:
        nb.cells.append(nbformat.v4.new_code_cell(WIDGETS_RESPOND))
    nb.cells.append(nbformat.v4.new_code_cell(WHERE_FROM))
    start = time.perf_counter()
    ran = colab.execute(nb)
    colab.times[path] = seconds = time.perf_counter() - start
    where = _text(ran.cells[-1])
    site = str(colab.venv / "lib")
    assert re.search(rf"COURSE_LIB_FROM {re.escape(site)}\S*site-packages/course_lib/", where), (
        f"course_lib was not imported from the installed package: {where}"
    )
    assert f"PYTHON {colab.python}" in where, where
    if chapter:
        report = _text(ran.cells[-2])
        moved, errors = map(int, re.search(r"WIDGETS_MOVED (\d+) ERRORS (\d+)", report).groups())
        assert errors == 0, f"{path}: a widget raised under ipywidgets 7.7.1:\n{report}"
        own = nbformat.read(ROOT / path, 4).cells
        code = "\n".join(c.source for c in own if c.cell_type == "code")
        if re.search(r"\binteract\w*\(|ipywidgets|\bwidgets\.", code):
            assert moved >= 1, f"{path} makes widgets, but none could be moved: {report}"
    _record_time(colab, path, seconds)
    if path.startswith("solutions/"):
        checks = [
            _text(c) for c in ran.cells if c.cell_type == "code" and c.source.startswith("check(")
        ]
        assert checks, f"{path} has no check() cell"
        for report in checks:
            verdicts = re.findall(r"^\s+(PASS|PART|FAIL)\s", report, re.M)
            assert verdicts and set(verdicts) == {"PASS"}, (
                f"check() did not pass in Colab:\n{report}"
            )
    changes = colab.changes()
    assert not changes, f"running {path} changed Colab's packages:\n" + "\n".join(changes)
    print(f"{path} ({NOTEBOOKS[path]}): {seconds:.1f} s in the Colab-like environment")


def _record_time(colab: ColabEnv, path: str, seconds: float) -> None:
    """With COLAB_TIMES=file, keep each notebook's seconds there (for the status page)."""
    out = os.environ.get("COLAB_TIMES")
    if not out:
        return
    data = json.loads(Path(out).read_text()) if Path(out).exists() else {}
    data.setdefault("notebooks", {})[path] = round(seconds, 1)
    # which code was timed: the status page marks a time whose notebook changed since
    data.setdefault("code", {})[path] = code_digest(path)
    # asked of the Colab-like environment's Python, so that it names its Python and torch
    hardware = "from course_lib.runtime import describe_hardware; print(describe_hardware())"
    data["hardware"] = _run(
        [str(colab.python), "-c", hardware], env=colab.env, cwd=colab.content
    ).stdout.strip()
    data["environment"] = (
        f"Colab's packages of {_header('date')} (torch {_constraints()['torch']}; its build "
        "is named with the hardware), one notebook at a time, on a fresh kernel"
    )
    data["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    Path(out).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _header(key: str) -> str:
    match = re.search(rf"^# {key}: (.*)$", CONSTRAINTS.read_text(), re.M)
    return match.group(1) if match else "?"


def test_every_exercise_passes_its_tests_in_colab(colab, tmp_path):
    """Every exercise's tests (those check() runs, and the hidden examples) give its solution
    full marks with Colab's versions: they compare with transformers and tokenizers, whose
    Colab releases are older than requirements.txt's. Run by the batch grader (without its
    sandbox: these are the course's own solutions) in the Colab-like environment."""
    colab.run_install_cell()
    gradebook = tmp_path / "grades.csv"
    solutions = sorted((ROOT / "solutions").glob("*.ipynb"))
    start = time.perf_counter()
    cmd = [str(colab.python), "-m", "course_grader", "grade", *map(str, solutions)]
    cmd += [
        "--csv",
        str(gradebook),
        "--hidden",
        str(ROOT / "tests" / "fixtures" / "hidden_examples"),
    ]
    proc = subprocess.run(
        [*cmd, "--no-sandbox", "--quiet"],
        cwd=colab.content,
        env=colab.env,
        capture_output=True,
        text=True,
    )
    assert gradebook.is_file(), f"the grader wrote no gradebook:\n{proc.stdout}\n{proc.stderr}"
    seconds = time.perf_counter() - start
    with gradebook.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(solutions)
    short = [
        f"{Path(r['submission']).name}: {r['score']}/{r['max_score']} {r['status']} {r['reason']}"
        for r in rows
        if r["status"] != "ok" or float(r["score"]) != float(r["max_score"])
    ]
    assert not short, "solutions that do not get full marks in Colab:\n" + "\n".join(short)
    assert not colab.changes()
    print(f"{len(rows)} exercise solutions graded in the Colab-like environment: {seconds:.1f} s")
