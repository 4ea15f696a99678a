"""PDF handouts (tools/handouts.py): printed from the built site, opened and read back.

After the session's book build (the ``book_build`` fixture) the handouts are printed
once into its ``_build/html/handouts/``, as the website's workflow does; to test
them on a site built before, point ``COURSE_HANDOUTS_SITE`` at it (the handouts are
then written into that site). Each PDF is opened with pypdf:

- every chapter's handout: A4, a plausible number of pages, its text extractable
  and holding the chapter's numbered title and the opening words of its first
  paragraph, no raw TeX (MathJax typeset every equation before printing), and no
  text past the page's margins (``tools/pdf_layout.py``: a code line cut at the
  edge of its box is still in the PDF, past the margin);
- every deck's PDF: one page per slide of the deck, with its title and no text off
  the page;
- the book: every page of the contents in order, one bookmark each;
- the links: each chapter page links its handout and its deck's PDF, and the
  instructor guide lists every one and the book, all of them files of the site.

The controls print planted pages (no book build needed): a code line that does not
wrap, in a box that scrolls as on screen or not, is found past the margin; with the
course's print stylesheet the same line wraps and is all in the text; equations left
untypeset show as raw TeX, which the text check finds.
"""

from __future__ import annotations

import html
import io
import os
import re
import shutil
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import ROOT, chrome, load_tool

handouts = load_tool("handouts")
layout = load_tool("pdf_layout")
CHAPTERS = handouts.chapter_docs()
MARGIN_PT = handouts.MARGIN_IN * 72
#: Pages of a chapter's handout: the chapters print to 23 to 56 A4 pages (2026-11).
MIN_PAGES, MAX_PAGES = 8, 120
#: TeX that MathJax would have turned into an equation; never in a printed page's text.
RAW_TEX = ("\\(", "\\)", "\\[", "\\]", "$$", "\\begin{")


def _text(data: bytes) -> str:
    from pypdf import PdfReader

    text = " ".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _pages(data: bytes) -> int:
    from pypdf import PdfReader

    return len(PdfReader(io.BytesIO(data)).pages)


@pytest.fixture(scope="module")
def browser():
    driver = chrome(1280, 1000, logs=())
    yield driver
    driver.quit()


# ---------------------------------------------------------------------------
# The command's errors (no browser, no build)
# ---------------------------------------------------------------------------


def test_no_site_names_the_build(tmp_path):
    with pytest.raises(handouts.HandoutError, match=r"jupyter-book build \."):
        handouts.build(tmp_path)
    assert handouts.main(["--site", str(tmp_path)]) == 1


def test_no_deck_names_the_build(tmp_path):
    for doc in handouts.toc_pages():
        (tmp_path / f"{doc}.html").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{doc}.html").write_text("<html></html>")
    with pytest.raises(handouts.HandoutError, match=r"no deck for notebooks/ch01.*build the book"):
        handouts.build(tmp_path)


def test_no_browser_names_the_packages(monkeypatch):
    monkeypatch.setattr(handouts, "CHROMIUM", None)
    with pytest.raises(handouts.HandoutError, match="apt-get install -y chromium chromium-driver"):
        handouts.chrome()


# ---------------------------------------------------------------------------
# Controls: planted pages (a browser, no build)
# ---------------------------------------------------------------------------

LONG_LINE = "scores = " + " + ".join(f"weight_{i} * value_{i}" for i in range(14)) + "  # END"
ALIGNED = "out = attention(q, k, v)" + " " * 150 + "# [B, T, D]"  # a shape comment, far right
PROSE = "Attention weighs the values by how well their keys match the query. " * 6
PLANTED = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>planted</title>
{css}</head><body><p>{prose}</p><div class="highlight"><pre{style}>{line}</pre></div>
</body></html>"""
CSS = '<link rel="stylesheet" media="print" href="print.css">'
PLANTED_PAGES = {
    # the course's print stylesheet: the line wraps
    "wrapped": {"css": CSS, "style": "", "line": LONG_LINE},
    # no print stylesheet, a box that scrolls as the theme's code cells do on screen
    "scrolls": {"css": "", "style": ' style="overflow-x: auto"', "line": LONG_LINE},
    # no print stylesheet, nothing to stop the line: the page is wider than the paper
    "runs_off": {"css": "", "style": "", "line": LONG_LINE},
    # wrapped as pre-wrap does (the spaces at the wrap hang) instead of break-spaces
    "hanging": {
        "css": CSS,
        "style": ' style="white-space: pre-wrap !important"',
        "line": ALIGNED,
    },
    # equations written as TeX with nothing to typeset them
    "raw_tex": {
        "css": CSS,
        "style": "",
        "line": "\\(QK^\\top\\) $$\\begin{aligned}a\\end{aligned}$$",
    },
}


def _nows(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).split())


def _missing_code_lines(page_html: str, data: bytes) -> list[str]:
    """The lines of the page's code and text outputs (its <pre> blocks) whose text is not
    in the PDF's text (spaces aside, the page footers taken out): cut on paper. A line
    wrapped over a page break counts as there when its start is on one page and its end
    on the next (Chromium writes a page's text in painting order, not reading order)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    footer = re.escape(_nows(reader.metadata.title or "")) + r"\d+/\d+"
    pages = [re.sub(footer, "", _nows(page.extract_text())) for page in reader.pages]
    text = "".join(pages)

    def across_a_break(line: str) -> bool:
        return any(
            line[:k] in pages[i] and line[k:] in pages[i + 1]
            for i in range(len(pages) - 1)
            for k in range(1, len(line))
        )

    missing = []
    for pre in re.findall(r"<pre[^>]*>(.*?)</pre>", page_html, re.S):
        for line in html.unescape(re.sub(r"<[^>]+>", "", pre)).splitlines():
            flat = _nows(line)
            if flat and flat not in text and not across_a_break(flat):
                missing.append(line)
    return missing


@pytest.fixture(scope="module")
def planted_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("planted")
    shutil.copy(ROOT / "book" / "_static" / "print.css", site / "print.css")
    for name, parts in PLANTED_PAGES.items():
        (site / f"{name}.html").write_text(PLANTED.format(prose=PROSE, **parts))
    untypeset = '<p><span class="math">\\(QK^\\top\\)</span></p>'
    (site / "untypeset.html").write_text(f"<html><body>{untypeset}</body></html>")
    return site


@pytest.fixture(scope="module")
def planted(browser, planted_site) -> dict:
    with handouts.serve(planted_site) as url:
        return {
            name: handouts.print_page(browser, f"{url}/{name}.html", name, timeout=15)
            for name in PLANTED_PAGES
        }


def test_control_the_print_stylesheet_wraps_a_long_line(planted, planted_site):
    """With the course's print stylesheet a long code line wraps: nothing cut in the
    print layout, nothing past the margins, every character of it in the text, and the
    prose at its size (16 CSS px, 12 pt)."""
    page = planted["wrapped"]
    assert not page.clipped
    assert not layout.overflows(page.data, MARGIN_PT, MARGIN_PT)
    assert not _missing_code_lines((planted_site / "wrapped.html").read_text(), page.data)
    assert layout.size_shares(page.data).get(12.0, 0) > 0.5


def test_control_a_line_cut_by_its_box_is_found(planted, planted_site):
    """The same line in a box that scrolls, as on screen: its end is cut at the box's
    edge. The print layout reports the box, and the line is not whole in the PDF's text."""
    page = planted["scrolls"]
    assert page.clipped and page.clipped[0].startswith("pre ("), page.clipped
    missing = _missing_code_lines((planted_site / "scrolls.html").read_text(), page.data)
    assert missing == [LONG_LINE], missing


def test_control_a_page_wider_than_the_paper_is_found(planted):
    """A line that nothing stops makes the page wider than the paper: Chromium prints the
    whole page smaller, so that no text is left at the stylesheet's 12 pt; the print
    layout reports it too."""
    page = planted["runs_off"]
    assert any("wider than the paper" in cut for cut in page.clipped), page.clipped
    assert layout.size_shares(page.data).get(12.0, 0) == 0


def test_control_text_past_the_margin_is_found(planted):
    """Spaces that hang past the edge of a wrapped code line (white-space: pre-wrap) are
    printed past the right margin, and the PDF check finds them; the stylesheet's
    break-spaces moves them to the next line (the "wrapped" control)."""
    found = layout.overflows(planted["hanging"].data, MARGIN_PT, MARGIN_PT)
    assert found and all(o.x1 > 595.9 - MARGIN_PT for o in found), found


def test_control_raw_tex_is_found_in_the_text(planted):
    """A page printed with its equations untypeset shows its TeX, which the text check
    of the handouts finds."""
    text = _text(planted["raw_tex"].data)
    assert [t for t in RAW_TEX if t in text] == ["\\(", "\\)", "$$", "\\begin{"], text


def test_control_a_page_whose_math_is_not_typeset_is_not_printed(browser, planted_site):
    """A page with math that MathJax never typesets (here: no MathJax at all) is not
    printed: the command fails, naming the page."""
    with handouts.serve(planted_site) as url:
        with pytest.raises(handouts.HandoutError, match="untypeset: MathJax"):
            handouts.print_page(browser, f"{url}/untypeset.html", "untypeset", timeout=3)


# ---------------------------------------------------------------------------
# The handouts of the built site
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(request) -> Path:
    built = os.environ.get("COURSE_HANDOUTS_SITE")
    if built:
        return Path(built).resolve()
    build = request.getfixturevalue("book_build")
    if build.returncode != 0:
        pytest.fail("the book did not build; see test_book.py")
    return build.html


@pytest.fixture(scope="module")
def printed(site, browser) -> dict[str, handouts.Printed]:
    """Every handout, printed once by the command's own code."""
    try:
        written = handouts.build(site)
    except handouts.HandoutError as exc:
        pytest.fail(str(exc))
    return {pdf.name: pdf for pdf in written}


def test_every_handout_is_written(printed, site):
    expected = {handouts.BOOK_PDF}
    for doc in CHAPTERS:
        expected |= {handouts.handout_name(doc), handouts.deck_pdf_name(doc)}
    assert set(printed) == expected
    assert {p.name for p in (site / handouts.HANDOUTS).glob("*.pdf")} == expected
    total = sum(p.mb for p in printed.values())
    print(f"{len(printed)} PDFs, {sum(p.pages for p in printed.values())} pages, {total:.1f} MB")


def _plain(fragment: str) -> str:
    """The text of an HTML fragment, without the headings' anchor links (# or ¶)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("#", "").replace("¶", "")
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _title_and_opening(page: str) -> tuple[str, str]:
    """A chapter page's numbered title and the first eight words of its first paragraph
    of prose (one without math or code, whose text a PDF gives back word for word)."""
    numbered = re.search(r'<h1><span class="section-number">.*?</h1>', page, re.S)
    title = _plain(numbered.group(0))
    body = page[numbered.end() :]
    for para in re.findall(r"<p>(.*?)</p>", body, re.S):
        if "math" not in para and "<code" not in para and len(para.split()) >= 8:
            return title, " ".join(_plain(para).split()[:8])
    raise AssertionError("no paragraph of prose on the page")


@pytest.mark.parametrize("doc", CHAPTERS, ids=lambda d: Path(d).name)
def test_chapter_handout(printed, site, doc):
    pdf = printed[handouts.handout_name(doc)]
    data = (site / handouts.HANDOUTS / pdf.name).read_bytes()
    from pypdf import PdfReader

    box = PdfReader(io.BytesIO(data)).pages[0].mediabox
    assert (round(float(box.width)), round(float(box.height))) == (596, 842), "not A4"
    assert MIN_PAGES <= pdf.pages <= MAX_PAGES, f"{pdf.name}: {pdf.pages} pages"
    text = _text(data)
    title, opening = _title_and_opening((site / f"{doc}.html").read_text())
    assert title in text, f"{pdf.name}: the title {title!r} is not in the text"
    assert opening in text, f"{pdf.name}: {opening!r} is not in the text"
    tex = [t for t in RAW_TEX if t in text]
    assert not tex, f"{pdf.name}: raw TeX {tex} in the text: an equation was not typeset"
    assert not pdf.clipped, f"{pdf.name}: cut in the print layout:\n" + "\n".join(pdf.clipped)
    assert not pdf.overflows, f"{pdf.name}: text past the margins:\n" + "\n".join(
        str(o) for o in pdf.overflows[:10]
    )
    missing = _missing_code_lines((site / f"{doc}.html").read_text(), data)
    assert not missing, f"{pdf.name}: code lines cut or left out:\n" + "\n".join(missing[:10])
    prose = layout.size_shares(data).get(12.0, 0)
    assert prose > 0.2, f"{pdf.name}: {prose:.0%} of the text at 12 pt: printed smaller?"


class _Slides(HTMLParser):
    """Counts a deck's slides: its innermost <section> elements (reveal.js)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[bool] = []
        self.slides = 0

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "section":
            if self.stack:
                self.stack[-1] = True  # has a slide inside: a vertical stack
            self.stack.append(False)

    def handle_endtag(self, tag) -> None:
        if tag == "section" and not self.stack.pop():
            self.slides += 1


@pytest.mark.parametrize("doc", CHAPTERS, ids=lambda d: Path(d).name)
def test_deck_pdf(printed, site, doc):
    pdf = printed[handouts.deck_pdf_name(doc)]
    deck = (site / "slides" / f"{Path(doc).name}.html").read_text()
    counter = _Slides()
    counter.feed(deck)
    assert pdf.pages == counter.slides, f"{pdf.name}: {pdf.pages} pages, {counter.slides} slides"
    text = _text((site / handouts.HANDOUTS / pdf.name).read_bytes())
    first = _plain(re.search(r"<h1[^>]*>(.*?)</h1>", deck, re.S).group(1))
    assert first in text, f"{pdf.name}: the first slide's title {first!r} is not in the text"
    assert len(text) > 40 * pdf.pages, f"{pdf.name}: {len(text)} characters on {pdf.pages} pages"
    assert not [t for t in RAW_TEX if t in text], f"{pdf.name}: raw TeX in the text"
    assert not pdf.overflows, f"{pdf.name}: text off the page: {pdf.overflows[:5]}"


def test_book_pdf(printed, site):
    from pypdf import PdfReader

    reader = PdfReader(site / handouts.HANDOUTS / handouts.BOOK_PDF)
    chapters = sum(printed[handouts.handout_name(d)].pages for d in CHAPTERS)
    assert len(reader.pages) > chapters, "the book has fewer pages than its chapters"
    top = [item for item in reader.outline if not isinstance(item, list)]
    pages = handouts.toc_pages()
    assert len(top) == len(pages), f"{len(top)} bookmarks for {len(pages)} pages"
    starts = [reader.get_destination_page_number(item) for item in top]
    assert starts == sorted(starts) and starts[0] == 0, "bookmarks out of order"
    for doc, item in zip(pages, top, strict=True):
        if doc in CHAPTERS:
            title, _ = _title_and_opening((site / f"{doc}.html").read_text())
            assert item.title == title, (doc, item.title)
    assert not printed[handouts.BOOK_PDF].overflows
    assert not printed[handouts.BOOK_PDF].clipped, "\n".join(printed[handouts.BOOK_PDF].clipped)


def test_pages_link_the_handouts(printed, site):
    """Each chapter page links its handout and its deck's PDF; the instructor guide lists
    them all and the book; every link is a file of the site."""
    guide_page = site / "book" / "instructor_guide.html"
    guide = guide_page.read_text()
    for doc in CHAPTERS:
        page = site / f"{doc}.html"
        links = set(re.findall(r'href="([^"#]*\.pdf)"', page.read_text()))
        expected = {
            f"../{handouts.HANDOUTS}/{handouts.handout_name(doc)}",
            f"../{handouts.HANDOUTS}/{handouts.deck_pdf_name(doc)}",
        }
        assert expected <= links, f"{doc}: links {sorted(links)}"
        for name in (handouts.handout_name(doc), handouts.deck_pdf_name(doc)):
            assert f'href="../{handouts.HANDOUTS}/{name}"' in guide, f"the guide lacks {name}"
    assert f'href="../{handouts.HANDOUTS}/{handouts.BOOK_PDF}"' in guide
    for page in [guide_page, *(site / f"{doc}.html" for doc in CHAPTERS)]:
        for href in re.findall(r'href="([^"#]*\.pdf)"', page.read_text()):
            assert (page.parent / href).resolve().is_file(), f"{page.name}: {href} is missing"


def test_edition_pages_link_the_english_handouts(printed, site):
    """The pt pages link the same PDFs (printed from the English pages), one folder up, and
    every link is a file of the site."""
    edition = site / "pt"
    pages = [edition / "book" / "instructor_guide.html"]
    pages += [edition / f"{doc}.html" for doc in CHAPTERS]
    for page in pages:
        hrefs = re.findall(r'href="([^"#]*\.pdf)"', page.read_text())
        assert hrefs, f"{page.relative_to(site)} links no PDF"
        for href in hrefs:
            target = (page.parent / href).resolve()
            assert target.is_file(), f"{page.relative_to(site)}: {href} is missing"
            assert target.parent == (site / handouts.HANDOUTS).resolve(), href
