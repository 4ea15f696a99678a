"""The errata appendix states what its checks compute.

Entries whose check is a chapter's cell quote that cell's recorded numbers
through glue (the book build fails on a missing key). The entries checked
here read the source notes themselves, in ``../shared/seeds`` (beside the
repository, as in CI).
"""

from __future__ import annotations

import os
import re

import pytest

from tests.conftest import ROOT

SEEDS = ROOT.parent / "shared" / "seeds"
ERRATA = ROOT / "book" / "errata"


def _seed(prefix: str) -> str:
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    if not found:
        if os.environ.get("CI"):
            pytest.fail(f"the source notes are missing: expected {SEEDS}/{prefix}_*.txt")
        pytest.skip(f"the source notes are not beside the repository ({SEEDS})")
    return found[0].read_text(encoding="utf-8")


def _normalise(text: str) -> str:
    """Lower case; citation marks, markup and table pipes dropped; whitespace collapsed."""
    text = re.sub(r"\s*\[\d+\]", "", text)
    return re.sub(r"\s+", " ", re.sub(r"[*_`|:$\\{}]", "", text)).lower()


def _self_quotes(note: str) -> tuple[int, int, list[int]]:
    """(references, references quoting the note's own body, those that do not)."""
    body, _, refs = note.partition("### Referências")
    quotes = re.findall(r'^\[(\d+)\] "(.*?)" \(', refs, re.M)
    text = _normalise(body)
    others = [
        int(n)
        for n, quote in quotes
        if not all(_normalise(p.strip(" .")) in text for p in quote.split("[...]") if p.strip())
    ]
    return len(quotes), len(quotes) - len(others), others


def test_positional_notes_quote_themselves():
    entry = _normalise((ERRATA / "sources.md").read_text(encoding="utf-8"))
    total, own, others = _self_quotes(_seed("000"))
    assert (total, own, others) == (35, 34, [2])
    assert _normalise(f"Note 000 has {total} references, and {own} of them") in entry
    assert _normalise(f"the exception, reference {others[0]}") in entry
    total, own, others = _self_quotes(_seed("001"))
    assert (total, own, others) == (9, 9, [])
    assert _normalise(f"all {total} of note 001's") in entry


def test_self_quote_detection_can_fail():
    """A reference quoting text that is not in the note is not counted as its own."""
    note = 'Body text here.\n### Referências\n[1] "Body text here" (X)\n[2] "Elsewhere" (X)\n'
    assert _self_quotes(note) == (2, 1, [2])


def test_every_check_named_in_the_errata_exists():
    """An entry's "Check:" that names a test file or test names one that is there."""
    named = set()
    for page in sorted(ERRATA.glob("*.md")):
        named |= set(re.findall(r"tests/(test_\w+\.py)(?:::(\w+))?", page.read_text()))
    assert named, "the errata name no test: the pattern is wrong"
    for filename, function in sorted(named):
        path = ROOT / "tests" / filename
        assert path.is_file(), f"the errata name tests/{filename}, which does not exist"
        if function:
            assert re.search(rf"^def {function}\(", path.read_text(), re.M), (
                f"the errata name tests/{filename}::{function}, which does not exist"
            )


GLUE = re.compile(r"\{glue(?::\w+)?\}`(?:/(notebooks/[\w-]+\.ipynb)::)?([A-Za-z_]\w*)")


def _recorded_keys(notebook) -> set[str]:
    """Names passed to ``record(...)`` or ``glue(...)`` in the notebook's code cells."""
    import ast
    import json

    keys: set[str] = set()
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        code = "\n".join(  # IPython magics become no-ops at their indentation
            line[: len(line) - len(line.lstrip())] + "pass"
            if line.lstrip().startswith(("%", "!"))
            else line
            for line in lines
        )
        for node in ast.walk(ast.parse(code)):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name == "record":
                keys |= {k.arg for k in node.keywords if k.arg}
            elif name == "glue" and node.args and isinstance(node.args[0], ast.Constant):
                keys.add(node.args[0].value)
    return keys


def test_every_glue_reference_names_a_recorded_value():
    """A quoted number's key exists where it is read from (the build would only warn per page)."""
    pages = sorted(ROOT.glob("notebooks/ch*.ipynb")) + sorted((ROOT / "book").rglob("*.md"))
    missing, checked = [], 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for m in GLUE.finditer(text):
            source = ROOT / m.group(1) if m.group(1) else page
            if source.suffix != ".ipynb" or not source.exists():
                missing.append(
                    f"{page.name}: {m.group(0)} (no notebook {source.name}; "
                    "write /notebooks/chNN_name.ipynb::key)"
                )
                continue
            checked += 1
            if m.group(2) not in _recorded_keys(source):
                missing.append(f"{page.name}: {m.group(2)} is not recorded in {source.name}")
    assert checked > 50, checked
    assert not missing, "\n".join(missing)
