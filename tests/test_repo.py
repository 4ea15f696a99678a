"""House rules that keep the course easy to change (see README, Contributors)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]


def _tracked(pattern: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / p for p in out]


def _notebooks() -> list[Path]:
    """Every notebook of the course, tracked or new (fixtures under tests/ excluded)."""
    return sorted(
        p
        for folder in ("notebooks", "exercises", "solutions")
        for p in (ROOT / folder).rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts
    )


def test_layout_is_as_designed():
    for name in ("book", "notebooks", "course_lib", "exercises", "solutions", "tests"):
        assert (ROOT / name).is_dir(), f"missing folder {name}/"
    for name in ("_config.yml", "_toc.yml", "requirements.txt", "README.md", "pyproject.toml"):
        assert (ROOT / name).is_file(), f"missing file {name}"
    assert (ROOT / ".ci" / "run").is_file()


def test_requirements_pin_what_must_be_pinned():
    reqs = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^torch==2\.13\.0\b", reqs, re.M), "torch must be pinned to the CPU build"
    version = re.search(r"^jupyter-book==(\S+)", reqs, re.M)
    assert version and version.group(1).startswith("1."), "jupyter-book must stay below 2"


@pytest.mark.parametrize("path", _tracked("*.ipynb"), ids=lambda p: str(p.relative_to(ROOT)))
def test_tracked_notebooks_are_stripped(path):
    nb = json.loads(path.read_text())
    with_outputs = [
        i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and c.get("outputs")
    ]
    counted = [
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and c.get("execution_count")
    ]
    assert not with_outputs, f"cells {with_outputs} carry outputs: run pre-commit (nbstripout)"
    assert not counted, f"cells {counted} carry execution counts: strip the notebook"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_standard_opening_cells(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(code) >= 2, "a notebook opens with the install cell and the set-up cell"
    install, setup = "".join(code[0]["source"]), "".join(code[1]["source"])
    assert "google.colab" in install and "%pip install" in install, (
        "the first code cell must be the Colab-only install cell (see README, Contributors)"
    )
    assert "remove-cell" in code[0].get("metadata", {}).get("tags", []), (
        "the install cell must be tagged remove-cell so the website hides it"
    )
    urls = re.findall(r"git\+(https://[^\"'\s]+)", install)
    assert urls == [REPO_URL], f"install cell installs from {urls}, _config.yml says {REPO_URL}"
    assert "course_lib.setup_notebook(" in setup, "the second code cell must call setup_notebook"


def test_readme_uses_the_configured_repository():
    readme = (ROOT / "README.md").read_text()
    urls = set(re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", readme))
    assert urls == {REPO_URL}, f"README mentions {urls}; _config.yml says {REPO_URL}"


def test_toc_lists_only_existing_pages():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    entries = [toc["root"]] + [ch["file"] for part in toc["parts"] for ch in part["chapters"]]
    for entry in entries:
        found = [ROOT / f"{entry}{ext}" for ext in (".md", ".ipynb")]
        assert any(p.exists() for p in found), f"_toc.yml lists {entry}, which does not exist"
    assert not any(e.startswith("solutions/") for e in entries), "solutions must stay off the site"


def test_every_chapter_notebook_is_in_the_toc():
    toc_text = (ROOT / "_toc.yml").read_text()
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert f"notebooks/{nb.stem}" in toc_text, f"{nb.name} is not listed in _toc.yml"


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


# Every folder of Python code (book/ holds the Sphinx extension and conf).
LINTED = ("course_lib", "benchmarks", "tests", "notebooks", "solutions", "exercises")


def test_ruff_lint():
    proc = _ruff("check", *LINTED, "book")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    proc = _ruff("format", "--check", *LINTED)
    assert proc.returncode == 0, "run `ruff format`:\n" + proc.stdout + proc.stderr


def test_public_functions_have_type_hints():
    import importlib
    import inspect
    import pkgutil

    import course_lib

    missing = []
    for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isfunction(obj) and obj.__module__ == module.__name__:
                sig = inspect.signature(obj)
                if sig.return_annotation is inspect.Signature.empty:
                    missing.append(f"{info.name}.{name}")
    assert not missing, f"public functions without a return type hint: {missing}"
