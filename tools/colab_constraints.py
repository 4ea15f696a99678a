"""Refresh tests/colab_constraints.txt from a newer Colab snapshot, and show what moved.

Colab publishes its preinstalled packages in the repository
googlecolab/backend-info (``pip-freeze.txt``, the CPU runtime). The
constraints file lists the packages the course reaches, at Colab's versions;
``tests/test_colab.py`` rebuilds that environment. When Colab moves:

    git clone https://github.com/googlecolab/backend-info /tmp/backend-info
    python tools/colab_constraints.py /tmp/backend-info

rewrites the versions of the same package names from the snapshot's
``pip-freeze.txt`` (and the header's commit, date and Python), prints each
change, and fails on a listed package the snapshot no longer has. Add a name
by hand when pip reports a missing dependency. Then run
``pytest tests/test_colab.py``.

Colab's torch is its CPU build from PyTorch's own index
(``torch @ https://download.pytorch.org/whl/cpu/torch-X%2Bcpu-...``), which
this machine cannot reach; the file pins ``torch==X``, which PyPI serves as
the CUDA build (it runs on the CPU, with the nvidia packages PyPI installs
beside it; the test leaves those out of its comparison).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "tests" / "colab_constraints.txt"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)$")
URL_PIN = re.compile(r"^([A-Za-z0-9_.-]+) @ \S+/\1-([^%-]+)(?:%2B[^-]+)?-", re.I)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_freeze(text: str) -> dict[str, str]:
    """pip freeze -> canonical name -> version (URL pins give the wheel's version)."""
    versions = {}
    for line in text.splitlines():
        match = PIN.match(line.strip()) or URL_PIN.match(line.strip())
        if match:
            versions[canonical(match.group(1))] = match.group(2)
    return versions


def refresh(constraints: str, freeze: dict[str, str], header: dict[str, str]) -> tuple[str, list]:
    """The constraints text with every pin moved to the snapshot's version; the changes."""
    changes, missing, out = [], [], []
    for line in constraints.splitlines():
        match = PIN.match(line.strip())
        if match:
            name, old = match.groups()
            new = freeze.get(canonical(name))
            if new is None:
                missing.append(name)
                new = old
            if new != old:
                changes.append((name, old, new))
            line = f"{name}=={new}"
        else:
            for key, value in header.items():
                line = re.sub(rf"(# {key}: ).*", rf"\g<1>{value}", line)
        out.append(line)
    if missing:
        raise SystemExit(f"the snapshot has none of: {', '.join(missing)} (remove or replace them)")
    return "\n".join(out) + "\n", changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend_info", type=Path, help="a clone of googlecolab/backend-info")
    parser.add_argument("--dry-run", action="store_true", help="print the changes only")
    args = parser.parse_args(argv)
    repo = args.backend_info

    def git(*cmd: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *cmd], capture_output=True, text=True, check=True
        ).stdout.strip()

    freeze_text = git("show", "HEAD:pip-freeze.txt")
    freeze = read_freeze(freeze_text)
    torch_line = next(ln for ln in freeze_text.splitlines() if ln.startswith("torch"))
    python = re.search(r"-cp(\d)(\d+)-", torch_line)
    header = {
        "commit": git("rev-parse", "HEAD"),
        "date": git("log", "-1", "--format=%ad", "--date=short"),
        "python": f"{python.group(1)}.{python.group(2)}" if python else "unknown",
    }
    text, changes = refresh(CONSTRAINTS.read_text(), freeze, header)
    for name, old, new in changes:
        print(f"{name}: {old} -> {new}")
    print(f"{len(changes)} changed; snapshot {header['commit'][:7]} of {header['date']}")
    if not args.dry_run:
        CONSTRAINTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
