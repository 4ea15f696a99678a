"""The GitHub workflows are valid against the published workflow schema (offline)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def test_workflows_match_the_schema():
    assert {p.name for p in WORKFLOWS} >= {"tests.yml", "gpu.yml"}
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
