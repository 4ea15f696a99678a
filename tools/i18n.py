"""Translations of the course, kept as data beside the English source (issue 31).

One file per translated notebook, ``i18n/<lang>/<path of the notebook>.md``, holds the
translation of each of its Markdown cells, in the notebook's order, each under a marker
naming the cell and the English text it translates:

    <!-- cell: ch01-intro en: 3f2a9c1b7d04 -->
    # O gargalo de uma RNN
    ...

``en`` is the first 12 hex digits of the SHA-256 of the English cell's source
(:func:`en_hash`). When the English cell changes its hash changes, and the translation is
stale until someone updates it (and its marker). Code cells are never translated: the
translated notebook takes them verbatim from the English one.

    python tools/i18n.py extract notebooks/ch01_rnn_bottleneck.ipynb --lang pt

writes the skeleton of a new translation file: every Markdown cell's marker followed by its
English text, to be replaced by the translation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Markdown cells that tools write (the Colab badge): generated for each edition, never
#: translated by hand.
GENERATED_CELLS = {"colab-badge"}
MARKER = re.compile(r"^<!-- cell: (?P<id>\S+) en: (?P<en>[0-9a-f]{12}) -->$", re.M)


def en_hash(source: str) -> str:
    """The first 12 hex digits of the SHA-256 of an English cell's source."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


def markdown_cells(notebook: Path) -> list[tuple[str, str]]:
    """(cell id, source) of every Markdown cell of ``notebook`` that is translated."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and cell.get("id") not in GENERATED_CELLS:
            source = cell["source"]
            cells.append((cell["id"], "".join(source) if isinstance(source, list) else source))
    return cells


def translation_path(notebook: Path, lang: str) -> Path:
    """Where the translation of ``notebook`` (a path inside the repository) lives."""
    rel = notebook.resolve().relative_to(ROOT)
    return ROOT / "i18n" / lang / rel.with_suffix(".md")


def read_translation(path: Path) -> dict[str, tuple[str, str]]:
    """cell id -> (English hash, translated text) of a translation file."""
    text = path.read_text(encoding="utf-8")
    marks = list(MARKER.finditer(text))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[m["id"]] = (m["en"], text[m.end() : end].strip("\n"))
    return out


def extract(notebook: Path, lang: str) -> Path:
    """Write the skeleton translation file of ``notebook``: each marker, then its English."""
    path = translation_path(notebook, lang)
    if path.exists():
        sys.exit(f"{path} exists already: edit it (or delete it to start again)")
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [
        f"<!-- cell: {cid} en: {en_hash(src)} -->\n{src.strip()}\n"
        for cid, src in markdown_cells(notebook)
    ]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="write the skeleton translation of notebooks")
    ex.add_argument("notebooks", nargs="+", type=Path)
    ex.add_argument("--lang", default="pt")
    args = parser.parse_args(argv)
    if args.command == "extract":
        for nb in args.notebooks:
            print(extract(nb, args.lang).relative_to(ROOT))


if __name__ == "__main__":
    main()
