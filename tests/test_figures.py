"""The architecture diagrams (book/figures, issue 14), checked without a build.

- every SVG is exactly what ``book/figures/make_figures.py`` writes, so the
  script stays the one source to edit;
- every SVG is self-contained (no external file, font, image, link or script:
  the site renders offline) and carries a ``<title>`` and a ``<desc>``;
- every figure directive of the book points to an existing file and has a
  name, a non-empty ``:alt:`` text and a caption;
- every SVG is shown by at least one page of the book, every ``{numref}`` to a
  figure names one that exists, and the figures README lists every SVG.

``tests/test_browser.py`` checks on the built site that each figure is
displayed.
"""

from __future__ import annotations

import importlib.util
import json
import re
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_book import _toc_files

FIGURES = ROOT / "book" / "figures"
SVG_NS = "{http://www.w3.org/2000/svg}"

# A MyST figure directive, fenced with backticks or colons:
# ```{figure} path  /  :name: ...  /  :alt: ...  /  (blank line)  /  caption  /  ```
FIGURE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{figure\}[ \t]*(?P<path>\S*)[ \t]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.M | re.S,
)
NUMREF = re.compile(r"\{numref\}`[^`]*?<(fig-[\w-]+)>`|\{numref\}`(fig-[\w-]+)`")


def _make_figures():
    spec = importlib.util.spec_from_file_location("make_figures", FIGURES / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _svgs() -> list[Path]:
    return sorted(FIGURES.glob("*.svg"))


def page_text(page: str) -> str:
    """The markdown of a book page (a notebook's markdown cells joined, or a .md file)."""
    notebook = ROOT / f"{page}.ipynb"
    if notebook.exists():
        cells = json.loads(notebook.read_text())["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return (ROOT / f"{page}.md").read_text()


def figure_directives(text: str, folder: Path) -> list[dict]:
    """Every figure directive of ``text``: path (resolved from ``folder``), options
    and caption."""
    found = []
    for m in FIGURE.finditer(text):
        options, caption, lines = {}, [], m.group("body").split("\n")
        n = 0
        while n < len(lines) and (opt := re.match(r"^:([\w-]+):[ \t]*(.*)$", lines[n])):
            options[opt.group(1)] = opt.group(2).strip()
            n += 1
        caption = "\n".join(lines[n:]).strip()
        found.append(
            {
                "source": m.group("path"),
                "path": (folder / m.group("path")).resolve(),
                "options": options,
                "caption": caption,
            }
        )
    return found


def directive_problems(where: str, directives: list[dict]) -> list[str]:
    problems = []
    for d in directives:
        label = f"{where}: figure {d['source'] or '(no path)'}"
        if not d["source"] or not d["path"].is_file():
            problems.append(f"{label}: the file does not exist")
        if not d["options"].get("alt"):
            problems.append(f"{label}: no :alt: text")
        if not re.fullmatch(r"fig-[a-z0-9-]+", d["options"].get("name", "")):
            problems.append(f"{label}: no :name: of the form fig-<name>")
        if not d["caption"]:
            problems.append(f"{label}: no caption")
    return problems


@cache
def figures_by_page() -> dict[str, list[dict]]:
    """Book page (as in _toc.yml) -> the figure directives it holds."""
    pages = {}
    for page in _toc_files():
        directives = figure_directives(page_text(page), (ROOT / page).parent)
        if directives:
            pages[page] = directives
    return pages


def test_the_svgs_are_what_the_script_writes():
    module = _make_figures()
    written = {}
    for fn in module.FIGURES:
        svg = fn()
        assert svg.name == fn.__name__, f"{fn.__name__} names its file {svg.name}.svg"
        written[f"{svg.name}.svg"] = svg.render()
    on_disk = {p.name: p.read_text() for p in _svgs()}
    assert sorted(on_disk) == sorted(written), (
        "book/figures holds SVGs the script does not draw, or the script draws figures that "
        "are not in book/figures: run python book/figures/make_figures.py"
    )
    stale = [name for name in written if written[name] != on_disk[name]]
    assert not stale, (
        f"{stale} differ from what make_figures.py writes: edit the script, not the SVG, "
        "and run python book/figures/make_figures.py"
    )


@pytest.mark.parametrize("path", _svgs(), ids=lambda p: p.name)
def test_svg_is_self_contained_and_described(path):
    text = path.read_text()
    root = ET.fromstring(text)  # well-formed XML, or this raises
    assert root.tag == f"{SVG_NS}svg"
    assert re.fullmatch(r"0 0 \d+ \d+", root.get("viewBox", "")), "the SVG needs a viewBox"
    title, desc = root.find(f"{SVG_NS}title"), root.find(f"{SVG_NS}desc")
    assert title is not None and (title.text or "").strip(), "no <title>"
    assert desc is not None and len((desc.text or "").strip()) > 40, "no useful <desc>"
    for element in root.iter():
        assert element.tag not in {f"{SVG_NS}{t}" for t in ("image", "script", "foreignObject")}, (
            f"{element.tag} in {path.name}"
        )
        for name, value in element.attrib.items():
            if name.endswith("href"):
                assert value.startswith("#"), f"{path.name} links to {value}"
    # no font, stylesheet or image fetched from anywhere: url() only to the file's own ids
    assert not re.search(r"@import|@font-face", text)
    assert all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", text)), path.name


def test_every_figure_directive_has_a_file_a_name_alt_text_and_a_caption():
    directives = figures_by_page()
    assert directives, "no page of the book shows a figure"
    problems = [p for page, ds in directives.items() for p in directive_problems(page, ds)]
    assert not problems, "\n".join(problems)


def test_the_directive_checker_reports_a_broken_path_and_a_missing_alt():
    text = (
        "Some prose.\n\n"
        "```{figure} ../book/figures/masks.svg\n:name: fig-masks\n:alt: Three grids.\n\n"
        "A caption.\n```\n\n"
        "```{figure} ../book/figures/no_such_figure.svg\n:name: fig-none\n:alt: Nothing.\n\n"
        "Caption.\n```\n\n"
        ":::{figure} ../book/figures/masks.svg\n:name: fig-again\n:width: 50%\n\nCaption.\n:::\n"
    )
    directives = figure_directives(text, ROOT / "notebooks")
    assert [d["source"] for d in directives] == [
        "../book/figures/masks.svg",
        "../book/figures/no_such_figure.svg",
        "../book/figures/masks.svg",
    ]
    problems = directive_problems("page", directives)
    assert len(problems) == 2, problems
    assert "no_such_figure.svg: the file does not exist" in problems[0]
    assert "no :alt: text" in problems[1]
    assert not directive_problems("page", directives[:1])


def test_every_svg_is_shown_on_a_page():
    shown = {d["path"] for ds in figures_by_page().values() for d in ds}
    unused = [p.name for p in _svgs() if p.resolve() not in shown]
    assert not unused, f"{unused} are in book/figures but no page of _toc.yml shows them"


def test_figure_names_are_unique_and_every_figure_reference_resolves():
    names = [d["options"].get("name") for ds in figures_by_page().values() for d in ds]
    assert len(names) == len(set(names)), f"figure names used twice: {names}"
    missing = []
    for page in _toc_files():
        for m in NUMREF.finditer(page_text(page)):
            target = m.group(1) or m.group(2)
            if target not in names:
                missing.append(f"{page}: {target}")
    assert not missing, "references to figures that do not exist:\n" + "\n".join(missing)


def test_a_later_chapter_refers_to_each_chapter_figure():
    """The issue asks that a figure be reused where a later chapter refers to it:
    the figures of the architecture chapters are cited from at least one other page."""
    cited_from: dict[str, set[str]] = {}
    for page in _toc_files():
        for m in NUMREF.finditer(page_text(page)):
            cited_from.setdefault(m.group(1) or m.group(2), set()).add(page)
    reused = {
        d["options"]["name"]
        for page, ds in figures_by_page().items()
        for d in ds
        if cited_from.get(d["options"]["name"], set()) - {page}
    }
    for name in ("fig-seq2seq-bottleneck", "fig-multi-head", "fig-masks", "fig-transformer"):
        assert name in reused, f"{name} is not referred to from any other page"


def test_the_figures_readme_lists_every_svg():
    readme = (FIGURES / "README.md").read_text()
    missing = [p.name for p in _svgs() if f"`{p.name}`" not in readme]
    assert not missing, f"book/figures/README.md does not list {missing}"


def test_the_bpe_figure_draws_the_librarys_merges_and_ids():
    """bpe_pipeline.svg draws the merges, counts and ids of make_figures.toy_bpe; they must
    be what Chapter 5's library learns on the same corpus (the chapter's next cell)."""
    from course_lib import tokenization

    module = _make_figures()
    drawn = module.toy_bpe(module.TOY_CORPUS, 10)
    library = tokenization.train_bpe(module.TOY_CORPUS, vocab_size=1 + 10 + 10)
    assert [pair for pair, _ in drawn] == library.merges
    assert module.toy_vocab() == dict(library.vocab)
    assert library.encode("lowest newer") == [14, 12, 16, 2, 7]  # the ids the figure shows
    assert [count for _, count in drawn][:4] == [9, 9, 7, 7]


def test_the_gat_figure_weights_are_a_softmax_output():
    weights = _make_figures().GAT_WEIGHTS
    assert abs(sum(weights.values()) - 1) < 1e-12 and min(weights.values()) > 0
