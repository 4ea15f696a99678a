"""PDF handouts of the website: one per chapter, one of the whole book, one per deck.

Printed by Debian's Chromium from the built site (``jupyter-book build .`` first;
it also writes the reveal.js decks under ``slides/``), served from a local HTTP
server, with the pages' print stylesheet (``book/_static/print.css``: no
navigation, figures kept with their captions, code wrapped rather than cut)::

    python tools/handouts.py [--site _build/html] [--only ch03 ch07]

writes into ``<site>/handouts/``:

- ``chNN_name.pdf``: the chapter's page, A4, after MathJax has typeset every
  equation, every image has loaded and the widgets have drawn (their initial
  state, as on the site); its hidden cells opened, an equation or table wider
  than the page scaled to fit, its links to other pages pointing at the
  published site; a tagged PDF (headings, reading order and the images' alt
  text for screen readers) with the page's headings as its outline;
- ``chNN_name-slides.pdf``: the chapter's deck in reveal.js's print mode
  (``?print-pdf``), one page per slide (the deck's 1280 x 720 frame and
  reveal.js's margin), every fragment shown;
- ``book.pdf``: every page of the table of contents in its order (the
  chapters, the exercises, the appendices), one bookmark per page with the
  page's own headings below it.

Chromium is driven with selenium and prints with Chrome DevTools'
``Page.printToPDF``; nothing is fetched from the network. The chapter pages
link their two PDFs and the instructor guide lists them all (the book's
extension, ``book/_ext/course_book.py``); a site built without this step has
those links dangling until it runs (the website's workflow runs it after the
build).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import http.server
import importlib.util
import io
import logging
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SITE = ROOT / "_build" / "html"
HANDOUTS = "handouts"  # the folder of the site the PDFs go to
BOOK_PDF = "book.pdf"
CHAPTER = re.compile(r"^notebooks/(ch\d\d_\w+)$")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
MISSING_BROWSER = (
    "Debian's chromium and chromium-driver are needed: "
    "apt-get update && apt-get install -y chromium chromium-driver"
)
#: Chromium's flags, those of the browser tests (tests/test_browser.py): headless, and
#: no request of its own to any other host (updates, sync, components).
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)

#: A4 in inches, 15 mm margins, the page number and the page's title in the footer.
A4 = {"paperWidth": 8.27, "paperHeight": 11.69}
MARGIN_IN = 15 / 25.4
#: A tagged PDF: headings, reading order and the images' alt text for screen readers
#: (a chapter's handout is about three times the size of an untagged one).
TAGGED = True
FOOTER = (
    '<div style="font-size:8px;width:100%;padding:0 15mm;display:flex;'
    'justify-content:space-between;color:#444;font-family:sans-serif">'
    '<span class="title"></span><span><span class="pageNumber"></span> / '
    '<span class="totalPages"></span></span></div>'
)


class HandoutError(RuntimeError):
    """The site or the browser is not there, or a page did not finish drawing."""


# ---------------------------------------------------------------------------
# What is printed
# ---------------------------------------------------------------------------


def toc_pages(root: Path = ROOT) -> list[str]:
    """Every page of ``_toc.yml``, in the book's order (docnames, no suffix)."""
    return _load_tool("i18n").toc_files(root)


def chapter_docs(root: Path = ROOT) -> list[str]:
    """The chapters' docnames (``notebooks/chNN_name``), in the book's order."""
    return [doc for doc in toc_pages(root) if CHAPTER.match(doc)]


def handout_name(doc: str) -> str:
    """The file name of a chapter's handout under handouts/."""
    return f"{Path(doc).name}.pdf"


def deck_pdf_name(doc: str) -> str:
    """The file name of a chapter's deck, printed, under handouts/."""
    return f"{Path(doc).name}-slides.pdf"


# ---------------------------------------------------------------------------
# The browser and the server
# ---------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on a free port of 127.0.0.1; yields the site's URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def chrome(width: int = 1280, height: int = 1000, log_types: dict | None = None):
    """Debian's headless Chromium under selenium; HandoutError naming the fix if absent."""
    if not (CHROMIUM and CHROMEDRIVER):
        raise HandoutError(MISSING_BROWSER)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROME_FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    if log_types:  # e.g. {"browser": "ALL"}: what driver.get_log returns
        options.set_capability("goog:loggingPrefs", log_types)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


def wait_for(driver, script: str, timeout: float = 30.0):
    """Poll a JavaScript expression (a ``return ...`` body) until it is truthy; its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    return driver.execute_script(script)


# A page is ready to print once MathJax has typeset everything (its startup promise
# resolved and as many containers as the source has math), every image has loaded
# (lazy ones are made eager first) and the widgets have drawn, if it has any.
PAGE_READY = """
if (document.readyState !== 'complete') return false;
document.querySelectorAll('img[loading="lazy"]').forEach(i => i.loading = 'eager');
const math = document.querySelectorAll('.math').length;
if (math) {
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
  if (!window.__typeset) { MathJax.startup.promise.then(() => { window.__typeset = true; }); return false; }
  if (document.querySelectorAll('mjx-container').length < math) return false;
}
if (!Array.from(document.images).every(i => i.complete)) return false;
const state = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
return !state || document.querySelectorAll('.jupyter-widgets, .widget-box').length > 0;
"""

# Run in the print layout (print media, the width of the paper's printable area):
# - the light theme;
# - links into the site point at the published site (the local server is gone when
#   the PDF is read); links within the page stay, as the PDF's internal links;
# - a display equation, table, widget or plot wider than the page is scaled down to
#   fit (CSS zoom) rather than cut at the edge;
# - hidden cells (<details>) are opened: a reader of paper cannot click them.
# Returns how many were scaled, and what would still be cut: a box narrower than its
# content that scrolls or hides the rest, or a page wider than the paper (which
# Chromium prints smaller, every line of it).
PREPARE = r"""
const site = arguments[0];
document.documentElement.dataset.theme = 'light';
document.documentElement.dataset.mode = 'light';
for (const a of document.querySelectorAll('a[href]')) {
  const url = new URL(a.getAttribute('href'), location.href);
  if (url.origin !== location.origin) continue;
  if (url.pathname === location.pathname && url.hash) continue;
  a.setAttribute('href', site + url.pathname + url.search + url.hash);
}
const extent = el => {
  let left = Infinity, right = -Infinity;
  for (const e of [el, ...el.querySelectorAll('*')]) {
    const r = e.getBoundingClientRect();
    if (r.width > 0) { left = Math.min(left, r.left); right = Math.max(right, r.right); }
  }
  return [left, right];
};
const wide = 'mjx-container[display="true"], table, .jupyter-widgets, .widget-box, .cell_output img';
let fitted = 0;
for (const el of document.querySelectorAll(wide)) {
  if (el.parentElement.closest(wide)) continue;
  const box = el.parentElement.getBoundingClientRect();
  const [left, right] = extent(el);
  const width = Math.max(right, box.right) - Math.min(left, box.left);
  if (width > box.width + 1) {
    el.style.zoom = (box.width / width * 0.98).toFixed(3);
    fitted += 1;
  }
}
for (const d of document.querySelectorAll('details')) d.open = true;
// MathJax's copy of each equation for screen readers is invisible, and often wider than
// the equation: measured without it
const sr = document.createElement('style');
sr.textContent = 'mjx-assistive-mml { display: none !important; }';
document.head.appendChild(sr);
const clipped = [];
for (const el of document.querySelectorAll('body *')) {
  // (a form field's text scrolls inside it by design: a widget's text box)
  if (el.closest('mjx-container') || el.matches('input, textarea, select')) continue;
  const style = getComputedStyle(el), x = style.overflowX;  // (no effect on an inline)
  if (x !== 'visible' && style.display !== 'inline' && el.scrollWidth > el.clientWidth + 1) {
    clipped.push(el.tagName.toLowerCase() + ' (' + (el.scrollWidth - el.clientWidth) + ' px cut): '
                 + (el.textContent || '').trim().slice(0, 60));
  }
}
const wider = document.documentElement.scrollWidth - document.documentElement.clientWidth;
if (wider > 1) clipped.push('the page is ' + wider + ' px wider than the paper: printed smaller');
const headings = Array.from(document.querySelectorAll('h1, h2, h3, h4, h5, h6'))
  .filter(h => h.getClientRects().length)
  .map(h => {
    const copy = h.cloneNode(true);
    copy.querySelectorAll('.headerlink, mjx-container > mjx-math').forEach(e => e.remove());
    return copy.textContent.replace(/\s+/g, ' ').trim();
  });
sr.remove();
return {fitted: fitted, clipped: clipped, headings: headings};
"""

DECK_READY = """
if (!(window.Reveal && Reveal.isReady())) return false;
if (!document.querySelectorAll('.pdf-page').length) return false;
if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
if (!window.__typeset) { MathJax.startup.promise.then(() => { window.__typeset = true; }); return false; }
if (!Array.from(document.images).every(i => i.complete)) return false;
const views = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length;
return views === 0 || document.querySelectorAll('.jupyter-widgets, .widget-box').length > 0;
"""


def _settle(driver, ready: str, what: str, timeout: float) -> None:
    if not wait_for(driver, ready, timeout):
        raise HandoutError(
            f"{what}: MathJax, the images or the widgets did not finish in {timeout:.0f} s"
        )
    # the fonts must be in before anything is measured or printed
    driver.execute_async_script("document.fonts.ready.then(() => arguments[0]())")


def _print_layout(driver) -> None:
    """Print media from now on (as Page.printToPDF lays the page out), painted twice."""
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    driver.execute_async_script(
        "const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(done));"
    )


def _prepare(driver) -> dict:
    """The page in its print layout: light theme, published links, wide things fitted;
    {"fitted": how many, "clipped": what is still cut}."""
    width = round((A4["paperWidth"] - 2 * MARGIN_IN) * 96)  # CSS px of the printable width
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
    )
    driver.execute_cdp_cmd("Emulation.setScrollbarsHidden", {"hidden": True})  # paper has none
    try:
        _print_layout(driver)
        return driver.execute_script(PREPARE, _published_site())
    finally:
        driver.execute_cdp_cmd("Emulation.setScrollbarsHidden", {"hidden": False})
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@functools.cache
def _published_site() -> str:
    """The website's address (tools/colab_edition.py, the one place it is written)."""
    return _load_tool("colab_edition").SITE


def _load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"_course_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Page(NamedTuple):
    """A printed page: the PDF, and what the print layout still cut (see PREPARE)."""

    data: bytes
    clipped: list[str]


def retitle_outline(data: bytes, titles: list[str]) -> bytes:
    """The PDF with the titles of its outline (Chromium's, one item per heading, pages
    right) replaced in order by the page's headings as the HTML writes them: Chromium
    drops the space at a wrapped heading's line break, repeats some, and leaves out an
    equation's text. Unchanged if the counts differ."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(io.BytesIO(data))
    items: list[tuple[int, int]] = []  # (depth, page) in order

    def walk(outline, depth: int) -> None:
        for item in outline:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                items.append((depth, reader.get_destination_page_number(item)))

    walk(reader.outline, 0)
    if len(items) != len(titles) or not items:
        return data
    writer = PdfWriter(clone_from=reader)
    del writer.root_object["/Outlines"]
    parents: list = []
    for (depth, page), title in zip(items, titles, strict=True):
        parent = parents[depth - 1] if depth else None
        parents[depth:] = [writer.add_outline_item(title=title, page_number=page, parent=parent)]
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def print_page(driver, url: str, what: str, timeout: float = 90.0) -> Page:
    """One page of the book as an A4 PDF (the print stylesheet applies)."""
    driver.get(url)
    _settle(driver, PAGE_READY, what, timeout)
    try:
        prepared = _prepare(driver)
        _print_layout(driver)
        pdf = driver.execute_cdp_cmd(
            "Page.printToPDF",
            {
                **A4,
                "marginTop": MARGIN_IN,
                "marginBottom": MARGIN_IN,
                "marginLeft": MARGIN_IN,
                "marginRight": MARGIN_IN,
                "printBackground": True,
                "displayHeaderFooter": True,
                "headerTemplate": "<span></span>",
                "footerTemplate": FOOTER,
                "generateDocumentOutline": True,
                "generateTaggedPDF": TAGGED,
            },
        )
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    data = retitle_outline(base64.b64decode(pdf["data"]), prepared["headings"])
    return Page(data, prepared["clipped"])


def print_deck(driver, url: str, what: str, timeout: float = 90.0) -> bytes:
    """A reveal.js deck in its print mode: one page per slide, at the deck's size."""
    # every fragment shown, one page per slide (reveal.js reads its options from the query)
    driver.get(url + "?print-pdf&pdfSeparateFragments=false&pdfMaxPagesPerSlide=1")
    _settle(driver, DECK_READY, what, timeout)
    # Printed straight away, a deck came out blank about half the time (16 empty pages);
    # laid out in print media first and painted, it never did (22 of 22).
    try:
        _print_layout(driver)
        pdf = driver.execute_cdp_cmd(
            "Page.printToPDF",
            {"printBackground": True, "preferCSSPageSize": True, "generateTaggedPDF": TAGGED},
        )
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    return base64.b64decode(pdf["data"])


def merge(parts: list[tuple[str, bytes]]) -> bytes:
    """The PDFs in order as one, with one bookmark per part and its own outline below:
    a page's outline whose one top item is its title is taken as it is; otherwise the
    part's title heads it. (pypdf does not carry a structure tree over: the book is not
    a tagged PDF, the chapters' handouts are.)"""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for title, data in parts:
        outline = PdfReader(io.BytesIO(data)).outline
        tops = [item for item in outline if not isinstance(item, list)]
        own = len(tops) == 1 and tops[0].title == title
        writer.append(io.BytesIO(data), outline_item=None if own else title)
    writer.compress_identical_objects()  # the fonts and images that pages share, once
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def page_title(data: bytes) -> str:
    """A printed page's own title: the HTML <title> (which Chromium writes into the
    PDF's metadata) without the book's title after it."""
    from pypdf import PdfReader

    book = yaml.safe_load((ROOT / "_config.yml").read_text())["title"]
    title = PdfReader(io.BytesIO(data)).metadata.title or ""
    return title.removesuffix(book).strip().removesuffix("—").strip()


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------


def check_site(site: Path, chapters: list[str]) -> None:
    """HandoutError naming the fix if the site, a deck or pypdf is missing."""
    missing = [d for d in toc_pages() if not (site / f"{d}.html").is_file()]
    if missing:
        raise HandoutError(
            f"the website is not built in {site} (no {missing[0]}.html): run "
            "`jupyter-book build .` first (or pass --site)"
        )
    decks = [d for d in chapters if not (site / "slides" / f"{Path(d).name}.html").is_file()]
    if decks:
        raise HandoutError(
            f"no deck for {decks[0]} under {site / 'slides'}: build the book again (the "
            "build writes the decks from its execution cache; see tools/slides.py)"
        )
    if importlib.util.find_spec("pypdf") is None:
        raise HandoutError("pypdf is needed: pip install -r requirements.txt")


class Printed(NamedTuple):
    """One PDF written: its file name, pages, megabytes, seconds; what the print layout
    cut (``Page.clipped``) and the text past a margin of the PDF (pdf_layout.overflows)."""

    name: str
    pages: int
    mb: float
    seconds: float
    clipped: list[str]
    overflows: list


def _save(out: Path, name: str, page: Page, seconds: float, margin_pt: float) -> Printed:
    from pypdf import PdfReader

    layout = _load_tool("pdf_layout")
    (out / name).write_bytes(page.data)
    pages = len(PdfReader(io.BytesIO(page.data)).pages)
    found = layout.overflows(page.data, margin_pt, margin_pt)
    return Printed(name, pages, len(page.data) / 1e6, seconds, page.clipped, found)


def build(site: Path = DEFAULT_SITE, only: list[str] | None = None, log=print) -> list[Printed]:
    """Print the handouts into ``site/handouts``: the chapters, their decks and (unless
    ``only`` names some chapters, e.g. ``["ch03"]``) the whole book."""
    chapters = chapter_docs()
    pages = toc_pages()
    if only:
        chapters = [d for d in chapters if any(Path(d).name.startswith(o) for o in only)]
        pages = chapters
    check_site(site, chapters)
    out = site / HANDOUTS
    out.mkdir(exist_ok=True)
    margin_pt = MARGIN_IN * 72
    written, book, book_clipped = [], [], []
    with serve(site) as url:
        driver = chrome()
        try:
            for doc in pages:
                start = time.perf_counter()
                page = print_page(driver, f"{url}/{doc}.html", doc)
                book.append((page_title(page.data) or doc, page.data))
                book_clipped += [f"{doc}: {cut}" for cut in page.clipped]
                if doc in chapters:
                    seconds = time.perf_counter() - start
                    written.append(_save(out, handout_name(doc), page, seconds, margin_pt))
                log(f"{doc}: {time.perf_counter() - start:.1f} s")
            for doc in chapters:
                start = time.perf_counter()
                data = print_deck(driver, f"{url}/slides/{Path(doc).name}.html", doc)
                seconds = time.perf_counter() - start
                written.append(_save(out, deck_pdf_name(doc), Page(data, []), seconds, 0.0))
                log(f"slides/{Path(doc).name}: {seconds:.1f} s")
        finally:
            driver.quit()
    if not only:
        start = time.perf_counter()
        page = Page(merge(book), book_clipped)
        written.append(_save(out, BOOK_PDF, page, time.perf_counter() - start, margin_pt))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=DEFAULT_SITE, help="the built site")
    parser.add_argument("--only", nargs="*", help="chapters to print (e.g. ch03); no book.pdf")
    args = parser.parse_args(argv)
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # Chromium's trailer sizes are off by 2
    start = time.perf_counter()
    try:
        written = build(args.site.resolve(), args.only)
    except HandoutError as exc:
        print(f"handouts: {exc}", file=sys.stderr)
        return 1
    for pdf in written:
        print(f"{pdf.name}: {pdf.pages} pages, {pdf.mb:.2f} MB, {pdf.seconds:.1f} s")
        for cut in pdf.clipped[:5]:
            print(f"  cut on paper: {cut}")
        for overflow in pdf.overflows[:5]:
            print(f"  text past the margin: {overflow}")
    print(
        f"wrote {len(written)} PDFs ({sum(p.pages for p in written)} pages, "
        f"{sum(p.mb for p in written):.1f} MB) to {args.site / HANDOUTS} "
        f"in {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
