"""Colab, proven: the install cell changes nothing Colab ships, and notebooks run there.

Students open each chapter in Google Colab, whose runtime comes with its own
torch, numpy, ipywidgets, transformers and more. A notebook whose install
cell upgrades or downgrades one of them mid-session is the classic way Colab
notebooks break. This test rebuilds Colab's environment and checks both that
the install cell leaves it alone and that chapters run in it.

How "Colab" is built here:

1. **The packages.** A fresh virtual environment (this machine's Python) gets
   exactly the versions of ``tests/colab_constraints.txt``: Colab's, copied
   from the ``pip-freeze.txt`` Colab publishes (the file names the snapshot
   and every version that had to differ here), installed with ``--no-deps``
   so that it holds what Colab holds and nothing more.
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

This is the slowest test file after the notebooks: about seven minutes on two
cores, nine when they are busy with other work (most of it Chapter 14 and
grading the 28 exercises). It runs with the README's test command and in
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
import sys
import time
from pathlib import Path

import nbformat
import pytest
import yaml

import course_lib
from tests.conftest import ROOT

pytestmark = pytest.mark.colab

CONSTRAINTS = ROOT / "tests" / "colab_constraints.txt"
REPO_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]

# What the install cell may change in Colab's environment: add the course's
# package, nothing else.
ALLOWED_ADDITIONS = {"course-lib"}

# What runs in the Colab-like environment, and why each was chosen.
NOTEBOOKS = {
    "notebooks/ch03_self_attention.ipynb": "torch.utils.flop_counter, timings, sympy-free core",
    "notebooks/ch05_embeddings_tokenization.ipynb": "tokenizers, sympy, widgets (ipywidgets 7)",
    "notebooks/ch10_time_series.ipynb": "loads data: CO2 (statsmodels, pandas)",
    "notebooks/ch14_graph_attention.ipynb": "loads data: Cora; the heaviest chapter",
    "solutions/ch08_alibi_t5.ipynb": "an exercise and its check() (matched against transformers)",
}
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
        _run([sys.executable, "-m", "venv", str(self.venv)])
        self.env = _clean_env(self.venv)
        pins = _constraints()
        # Colab's pip first: the install cell runs with it.
        _run([str(self.python), "-m", "pip", "install", "-q", f"pip=={pins['pip']}"], env=self.env)
        _run(
            [str(self.python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(CONSTRAINTS)],
            env=self.env,
        )
        installed = _installed(self.python, self.env)
        versions = {name: version for name, (version, _) in installed.items()}
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
    assert re.search(r"googlecolab/backend-info.*\n.*commit [0-9a-f]{40}", text), "source missing"
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


def test_every_exercise_passes_its_tests_in_colab(colab, tmp_path):
    """Every exercise's tests (those check() runs, and the hidden examples) give its solution
    full marks with Colab's versions: they compare with transformers and tokenizers, whose
    Colab releases are older than requirements.txt's. Run by the batch grader (without its
    sandbox: these are the course's own solutions) in the Colab-like environment."""
    colab.run_install_cell()
    gradebook = tmp_path / "grades.csv"
    solutions = sorted((ROOT / "solutions").glob("*.ipynb"))
    start = time.perf_counter()
    cmd = [str(colab.python), "-m", "course_lib.grading", "grade", *map(str, solutions)]
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
