"""Pin every notebook's install cell to this release, and open Colab links on the Colab edition.

Run after bumping the version in pyproject.toml (and CHANGELOG.md, CITATION.cff,
course_lib.__version__; tests/test_repo.py checks they agree):

    python tools/pin_release.py

Each install cell then reads ``course-lib[notebooks] @ git+<repository>@vX.Y.Z``: the
tag the release workflow creates when the version reaches main, so a student who
opens chapter 3 today and chapter 4 next week installs the same library. Colab
links (``.../blob/<branch>/...``) are pointed at the branch ``_config.yml`` names,
where the website's workflow publishes the Colab edition. Idempotent; exits 1 and
lists the files when ``--check`` finds one that needs rewriting.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("notebooks", "solutions", "exercises")


def _rewrite(source: str, is_code: bool, url: str, version: str, branch: str) -> str:
    if is_code and "%pip install" in source:
        source = re.sub(re.escape(url) + r'(@v[\w.]+)?"', f'{url}@v{version}"', source)
    colab = r"(https://colab\.research\.google\.com/github/[^/\s()]+/[^/\s()]+/blob/)[^/\s()]+/"
    return re.sub(colab, rf"\g<1>{branch}/", source)


def pin(root: Path = ROOT, check: bool = False) -> list[Path]:
    """Rewrite (or, with ``check``, only list) the notebooks whose pin or links are stale."""
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    config = yaml.safe_load((root / "_config.yml").read_text())["repository"]
    stale = []
    for path in sorted(p for f in FOLDERS for p in (root / f).glob("*.ipynb")):
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
        changed = False
        for cell in nb["cells"]:
            src = "".join(cell["source"])
            new = _rewrite(
                src, cell["cell_type"] == "code", config["url"], version, config["branch"]
            )
            if new != src:
                changed = True
                lines = new.split("\n")
                cell["source"] = [line + "\n" for line in lines[:-1]] + [lines[-1]] * bool(
                    lines[-1]
                )
        if changed:
            stale.append(path)
            if not check:
                out = json.dumps(nb, indent=1, ensure_ascii=False)
                path.write_text(out + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list stale notebooks, change none")
    args = parser.parse_args(argv)
    stale = pin(check=args.check)
    for path in stale:
        print(("stale: " if args.check else "pinned: ") + str(path.relative_to(ROOT)))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
