"""House rules that keep the course easy to change (see README, Contributors)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

import course_lib

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]
BRANCH = CONFIG["repository"]["branch"]
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


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
    urls = re.findall(r"git\+(https://[^\"'\s@]+)(@[^\"'\s]*)?", install)
    pin = f"@v{course_lib.__version__}"
    assert urls == [(REPO_URL, pin)], (
        f"install cell installs {urls}; it must install {REPO_URL}{pin}, the release this "
        "notebook is built with (a student mid-term keeps one library): run "
        "`python tools/pin_release.py` after a version bump"
    )
    extras = re.findall(r'"course-lib\[([\w,-]+)\] @ git\+', install)
    assert extras == ["notebooks"], (
        f"the install cell asks for course-lib{extras}: it must install the `notebooks` extra "
        "(everything the notebooks import; see pyproject.toml and tests/test_colab.py)"
    )
    assert "course_lib.setup_notebook(" in setup, "the second code cell must call setup_notebook"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_colab_badge_opens_this_notebook(path):
    """The first markdown cell is an "Open in Colab" badge for this very notebook, from the
    repository's Colab edition (the ``colab`` branch, MyST turned into Markdown), for students who start from GitHub. The website has its own
    launch button, so the cell is tagged remove-cell there (and the site loads no image
    from another host)."""
    nb = json.loads(path.read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    source = "".join(first["source"])
    owner_repo = REPO_URL.removeprefix("https://github.com/")
    rel = path.relative_to(ROOT).as_posix()
    target = f"https://colab.research.google.com/github/{owner_repo}/blob/{BRANCH}/{rel}"
    assert source.strip() == f"[![Open In Colab]({COLAB_BADGE})]({target})", (
        f"the first markdown cell must be the Colab badge opening {target}, found:\n{source}"
    )
    assert "remove-cell" in first.get("metadata", {}).get("tags", []), (
        "tag the badge cell remove-cell: the website has its own Colab button"
    )


def test_pyproject_declares_what_the_notebooks_import():
    """Every third-party package a notebook or course_lib imports is a dependency or in the
    extras the install cell installs (`notebooks`, which includes `data`); widgets and the
    kernel, which Colab ships, are in the `jupyter` extra."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def names(reqs):
        return {re.match(r"[\w.-]+", r).group(0).lower() for r in reqs}

    declared = names(project["dependencies"])
    for extra in ("notebooks", "data", "jupyter", "grader"):
        declared |= names(extras[extra]) - {"course-lib"}
    assert "course-lib[data]" in extras["notebooks"]
    # import name -> distribution name, where they differ
    distribution = {"sklearn": "scikit-learn", "IPython": "ipython"}
    imported = set()
    sources = [p.read_text() for p in (ROOT / "course_lib").rglob("*.py")]
    sources += [p.read_text() for p in (ROOT / "course_grader").rglob("*.py")]
    for path in _notebooks():
        nb = json.loads(path.read_text())
        sources += ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for text in sources:
        for m in re.finditer(r"^\s*(?:from|import)\s+(\w+)", text, re.M):
            imported.add(m.group(1))
    for name in ('import_module("', '_require("'):
        for text in sources:
            imported |= {m.split(".")[0] for m in re.findall(re.escape(name) + r"([\w.]+)", text)}
    third_party = {
        distribution.get(n, n).lower().replace("_", "-")
        for n in imported
        if n not in sys.stdlib_module_names and n not in {"course_lib", "course_grader", "the"}
    }
    missing = third_party - declared - {"ipython"}  # IPython is the kernel itself
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"


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
LINTED = (
    "course_lib",
    "course_grader",
    "benchmarks",
    "tests",
    "notebooks",
    "solutions",
    "exercises",
)


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

    import course_grader
    import course_lib

    missing = []
    packages = [(course_lib.__path__, "course_lib."), (course_grader.__path__, "course_grader.")]
    for info in (i for path, prefix in packages for i in pkgutil.walk_packages(path, prefix)):
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


#: The size limits of course_lib's and course_grader's modules: one concept per module.
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
#: The packages the limits apply to: the teaching library (with the student's side of
#: grading) and the instructor's grader (issue 29).
SIZE_LIMITED = ("course_lib", "course_grader")

#: Functions allowed over MAX_FUNCTION_LINES for now, each to be split by its module's owner.
LONG_FUNCTIONS_ALLOWED = {
    # 81 lines: the vmap-batched trainer of Chapter 8's seeds; not split yet (issue 28).
    "course_lib/lm.py:train_lm_seeds",
}


def size_offenders(
    root: Path, allowed: Iterable[str] = ()
) -> tuple[list[str], list[str], list[str]]:
    """Modules over MAX_MODULE_LINES, functions (methods and nested ones included) over
    MAX_FUNCTION_LINES (``end_lineno - lineno + 1``, decorators not counted) and
    allow-list entries that no longer need their place, in ``root/course_lib`` and
    ``root/course_grader``."""
    import ast

    modules, functions, long_ones = [], [], set()
    paths = [p for package in SIZE_LIMITED for p in sorted((root / package).rglob("*.py"))]
    for path in paths:
        rel = path.relative_to(root)
        text = path.read_text(encoding="utf-8")
        if (n := len(text.splitlines())) > MAX_MODULE_LINES:
            modules.append(f"{rel}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                key = f"{rel}:{node.name}"
                if length > MAX_FUNCTION_LINES:
                    long_ones.add(key)
                    if key not in allowed:
                        functions.append(f"{key} (line {node.lineno}): {length} lines")
    stale = sorted(set(allowed) - long_ones)
    return modules, functions, stale


def test_course_lib_modules_and_functions_stay_small():
    """Convention (developers' guide): no module of course_lib (grading included) or of the
    grader course_grader over 500 lines, no function over 80; split along the concepts,
    re-exporting moved names."""
    modules, functions, stale = size_offenders(ROOT, LONG_FUNCTIONS_ALLOWED)
    assert not modules, f"modules over {MAX_MODULE_LINES} lines (split them): {modules}"
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines (split them): {functions}"
    assert not stale, f"LONG_FUNCTIONS_ALLOWED entries now short enough (remove them): {stale}"


def test_the_size_checker_reports_long_modules_and_functions(tmp_path):
    """Guards the size checker: a planted long module and long function are reported, in
    course_lib, its grading/ and course_grader (a nested method too); allow-listed functions
    are not, and a stale allow-list entry is."""
    lib = tmp_path / "course_lib"
    grader = tmp_path / "course_grader" / "sandboxed"
    (lib / "grading").mkdir(parents=True)
    grader.mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    long_function = "def long():\n" + body  # MAX_FUNCTION_LINES + 1 lines
    long_method = (
        "class S:\n    def handle(self):\n" + "    " + body.replace("\n    ", "\n        ")
    )
    (lib / "big.py").write_text("x = 0\n" * (MAX_MODULE_LINES + 1))
    (lib / "f.py").write_text(long_function + "\n\nclass C:\n    def ok(self):\n        pass\n")
    (lib / "grading" / "g.py").write_text(long_function + "x = 0\n" * MAX_MODULE_LINES)
    (grader / "s.py").write_text(long_method)
    modules, functions, stale = size_offenders(tmp_path)
    n = MAX_FUNCTION_LINES + 1
    assert modules == [
        f"course_lib/big.py: {MAX_MODULE_LINES + 1} lines",
        f"course_lib/grading/g.py: {MAX_MODULE_LINES + n} lines",
    ]
    assert functions == [
        f"course_lib/f.py:long (line 1): {n} lines",
        f"course_lib/grading/g.py:long (line 1): {n} lines",
        f"course_grader/sandboxed/s.py:handle (line 2): {n} lines",
    ]
    allowed = {
        "course_lib/f.py:long",
        "course_lib/grading/g.py:long",
        "course_grader/sandboxed/s.py:handle",
        "course_lib/f.py:ok",
    }
    assert size_offenders(tmp_path, allowed)[1:] == ([], ["course_lib/f.py:ok"])


def _exercise_title(solution: Path) -> str:
    nb = json.loads(solution.read_text())
    for cell in nb["cells"]:
        for line in cell["source"]:
            if cell["cell_type"] == "markdown" and line.startswith("# Exercise"):
                return line.removeprefix("# ").strip()
    raise AssertionError(f"{solution} has no '# Exercise N.M: title' heading")


def expected_exercises_cell(chapter: Path) -> str:
    """The closing cell every chapter ends with: its exercises, each opening in Colab."""
    owner_repo = REPO_URL.removeprefix("https://github.com/")
    prefix = chapter.name[:5]  # "ch01_"
    items = []
    for solution in sorted((ROOT / "solutions").glob(f"{prefix}*.ipynb")):
        title = _exercise_title(solution)
        rel = f"exercises/{solution.name}"
        url = f"https://colab.research.google.com/github/{owner_repo}/blob/{BRANCH}/{rel}"
        items.append((title, url, rel))
    items.sort(key=lambda item: [int(n) for n in re.findall(r"\d+", item[0].split(":")[0])])
    lines = [
        "## Exercises",
        "",
        "Each exercise is a notebook: read it here, or open it in Colab (or locally, from",
        "`exercises/`) to do it. Every question ends with a `check(...)` cell that tells you",
        "at once whether your answer is right, and what is wrong if it is not.",
        "",
    ]
    lines += [f"- [{title}](../{rel}) ([open in Colab]({url}))" for title, url, rel in items]
    return "\n".join(lines)


@pytest.mark.parametrize(
    "chapter", sorted((ROOT / "notebooks").glob("ch*.ipynb")), ids=lambda p: p.name
)
def test_every_chapter_ends_with_what_to_remember_and_its_exercises(chapter):
    nb = json.loads(chapter.read_text())
    cells = nb["cells"]
    last = "".join(cells[-1]["source"])
    expected = expected_exercises_cell(chapter)
    assert expected.count("](https://colab") >= 2, f"{chapter.name}: no exercises found for it"
    assert cells[-1]["cell_type"] == "markdown" and last == expected, (
        f"{chapter.name} must end with a markdown cell linking its exercises, exactly:\n\n"
        f"{expected}\n\n(found:\n{last[:300]})"
    )
    before = "".join(cells[-2]["source"])
    assert before.startswith("## What to remember\n"), (
        f"{chapter.name}: the cell before the exercises must be the chapter's short summary, "
        "starting with '## What to remember'"
    )


def test_release_metadata_agrees():
    """One version everywhere: pyproject.toml, course_lib.__version__, CITATION.cff, and a
    CHANGELOG.md section for it (the release workflow tags vX.Y.Z from these)."""
    import tomllib

    import course_lib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert course_lib.__version__ == version
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == version and cff["cff-version"] == "1.2.0"
    assert re.search(
        rf"^## \[{re.escape(version)}\] - \d{{4}}-\d\d-\d\d$",
        (ROOT / "CHANGELOG.md").read_text(),
        re.M,
    ), "CHANGELOG.md: no section"
    licence = (ROOT / "LICENSE").read_text()
    assert "MIT License" in licence and "CC BY 4.0" in licence


def test_every_colab_link_and_install_pin_follows_the_release():
    """Every install cell pins this version and every Colab link (badges, exercise lists)
    opens the Colab edition's branch: what ``tools/pin_release.py`` writes."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import pin_release
    finally:
        sys.path.remove(str(ROOT / "tools"))
    stale = pin_release.pin(ROOT, check=True)
    assert not stale, f"run `python tools/pin_release.py`: stale pins or links in {stale}"
    assert (
        pin_release._rewrite('x "a @ git+U@v0.1.0"\n%pip install', True, "U", "9.9.9", "colab")
        == 'x "a @ git+U@v9.9.9"\n%pip install'
    )
