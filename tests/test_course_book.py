"""The book's Sphinx extension (book/_ext/course_book.py): its pure helpers.

The directives that render the status page's tables are tested in
test_runtime.py; the whole extension runs in the book build (test_book.py)."""

from __future__ import annotations

import importlib.util

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("course_book", ROOT / "book/_ext/course_book.py")
course_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course_book)


def test_a_tag_moves_after_the_split_sphinx_adds():
    """Sphinx wraps a display equation containing \\\\ in split, where MathJax rejects
    \\tag (the page showed chapter 3's eq. (3.4) as an error): the tag moves outside."""
    cases = r"M_{ij} = \begin{cases} 0 & a \\ -\infty & b \end{cases} \tag{3.4}"
    assert course_book.tag_outside_split(cases) == (
        r"\begin{split}M_{ij} = \begin{cases} 0 & a \\ -\infty & b \end{cases}\end{split}"
        r"\tag{3.4}"
    )
    starred = r"\begin{aligned} a &= b \\ c &= d \end{aligned} \tag*{(9.5)}"
    assert course_book.tag_outside_split(starred).endswith(r"\end{split}\tag*{(9.5)}")
    # nothing to do: no line break, or no tag, or two equations (Sphinx aligns those)
    assert course_book.tag_outside_split(r"x = 1 \tag{1}") is None
    assert course_book.tag_outside_split(r"\begin{cases} a \\ b \end{cases}") is None
    assert course_book.tag_outside_split("a \\\\ b \\tag{1}\n\nc \\tag{2}") is None


def test_every_chapter_equation_with_a_tag_and_a_line_break_is_rewritten():
    """The rule covers the chapters' real equations: every $$ block with both."""
    import json
    import re

    found = 0
    for path in sorted((ROOT / "notebooks").glob("ch*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for block in re.findall(r"\$\$(.*?)\$\$", "".join(cell["source"]), re.S):
                if "\\tag" in block and "\\\\" in block:
                    fixed = course_book.tag_outside_split(block)
                    assert fixed is not None and fixed.count("\\tag") == 1, (path.name, block)
                    assert re.search(r"\\end\{split\}\\tag\*?\{[^{}]*\}$", fixed)
                    found += 1
    assert found >= 8  # chapters 3, 5, 7, 8, 9 (two), 11, 12 when this was written


def test_changing_a_stylesheet_or_an_extension_changes_the_assets_digest(tmp_path):
    """The digest is a config value that rebuilds HTML: a changed asset rewrites every page."""
    for name in ("_ext/ext.py", "_static/site.css", "_static/site.js", "_static/vendor/x.js"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("one")
    before = course_book.assets_digest(tmp_path)
    assert course_book.assets_digest(tmp_path) == before
    (tmp_path / "_static/vendor/x.js").write_text("two")  # vendored copies: not the book's own
    assert course_book.assets_digest(tmp_path) == before
    for name in ("_ext/ext.py", "_static/site.css", "_static/site.js"):
        (tmp_path / name).write_text("changed")
        assert course_book.assets_digest(tmp_path) != before, name
        before = course_book.assets_digest(tmp_path)
