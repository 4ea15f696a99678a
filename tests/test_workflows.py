"""The GitHub workflows are valid against the published workflow schema (offline)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def test_workflows_match_the_schema():
    assert {p.name for p in WORKFLOWS} >= {"tests.yml", "gpu.yml", "pages.yml"}
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("check-jsonschema")),
            "--builtin-schema",
            "vendor.github-workflows",
            *map(str, WORKFLOWS),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path):
    """Guard against a check that cannot fail."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "name: broken\non: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps: 3\n"
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("check-jsonschema")),
            "--builtin-schema",
            "vendor.github-workflows",
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0


def test_gpu_workflow_checks_the_gpu_before_running_notebooks():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu.yml").read_text())
    steps = wf["jobs"]["notebooks"]["steps"]
    runs = [s.get("run", "") for s in steps]
    smi = next(i for i, r in enumerate(runs) if "nvidia-smi" in r)
    cuda = next(i for i, r in enumerate(runs) if "torch.cuda.is_available()" in r)
    nbval = next(i for i, r in enumerate(runs) if "pytest notebooks" in r)
    assert smi < cuda < nbval
    assert wf["jobs"]["notebooks"]["env"]["COURSE_REQUIRE_GPU"] == "1"


def test_cpu_workflow_runs_the_readme_command():
    readme = (ROOT / "README.md").read_text()
    assert "pip install -r requirements.txt && pytest" in readme
    wf = (ROOT / ".github" / "workflows" / "tests.yml").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -r requirements.txt" in wf and "&& pytest" in wf
    assert "\npip install -r requirements.txt && pytest\n" in ci


def test_pre_commit_config_is_valid():
    """The contributors' hooks (ruff, output stripping) are a valid pre-commit config."""
    config = ROOT / ".pre-commit-config.yaml"
    hooks = {h["id"] for repo in yaml.safe_load(config.read_text())["repos"] for h in repo["hooks"]}
    assert {"ruff", "ruff-format", "nbstripout"} <= hooks
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("pre-commit")), "validate-config", str(config)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pages_workflow_builds_and_publishes_the_book():
    """On every push to main: install as tests.yml does, time every chapter in Colab's
    runtime, restore the execution cache, build the book as the tests do, print the PDF
    handouts, and deploy _build/html to GitHub Pages."""
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as True
    assert on["push"]["branches"] == ["main"]
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"
    build, deploy = wf["jobs"]["build"]["steps"], wf["jobs"]["deploy"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in build]
    runs = [s.get("run", "") for s in build]
    install = next(i for i, r in enumerate(runs) if "pip install -r requirements.txt" in r)
    assert "download.pytorch.org/whl/cpu" in runs[install], "install PyTorch's CPU build"
    cache = uses.index("actions/cache")
    cached = build[cache]["with"]
    assert cached["path"] == "_build/.jupyter_cache"
    for part in ("requirements.txt", "course_lib/**", "github.sha"):
        assert part in cached["key"], f"the cache key must change with {part}"
    book = next(i for i, r in enumerate(runs) if "jupyter-book build ." in r)
    assert "-W" in runs[book].split()
    assert install < cache < book < uses.index("actions/upload-pages-artifact")
    # Every chapter is timed in Colab's runtime before the build, so the status page of
    # each published build shows that build's times (book/colab_run.json).
    timed = next(i for i, s in enumerate(build) if "tests/test_colab.py" in s.get("run", ""))
    env = build[timed]["env"]
    assert env["COLAB_ALL_CHAPTERS"] == "1" and env["COLAB_TIMES"] == "book/colab_run.json"
    assert "colab-python" in env["COLAB_PYTHON"] and install < timed < book
    assert "actions/configure-pages" in uses
    # The PDF handouts are printed from the pages just built, before they are uploaded.
    pdfs = next(i for i, r in enumerate(runs) if "python tools/handouts.py" in r)
    assert book < pdfs < uses.index("actions/upload-pages-artifact")
    assert "chromium-driver" in runs[pdfs]
    assert build[uses.index("actions/upload-pages-artifact")]["with"]["path"] == "_build/html"
    assert wf["jobs"]["deploy"]["needs"] == "build"
    assert wf["jobs"]["deploy"]["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy] == ["actions/deploy-pages"]


def test_readme_says_where_the_site_is():
    """The README gives the GitHub Pages address of the repository in _config.yml."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    owner, repo = url.removeprefix("https://github.com/").split("/")
    site = f"https://{owner}.github.io/{repo}/"
    assert site in (ROOT / "README.md").read_text(), f"the README should say the site is at {site}"
