"""Open every page of the built site in a real headless Chromium.

Checks, for each page served from localhost with no network:
- math was typeset: MathJax left at least as many ``mjx-container`` elements
  as the page has math spans/blocks in its HTML source, and rejected none
  (no ``mjx-merror``: an equation MathJax cannot parse shows as red text);
- no uncaught JavaScript error reached the console (allow-list below);
- notebook pages carry the Colab launch button;
- pages that embed widget state render the widgets;
- every figure of a page (the diagrams of book/figures) is displayed: its
  image loaded (natural width > 0), has a visible size, its alt text and a
  numbered caption;
- every wire of every figure is drawn at the width the figure asks for
  (opened as a file, no book build needed);
- axe-core (vendored in tests/vendor) finds no serious or critical
  accessibility violation on any page, in light and dark mode, alt text of
  images included;
- every plot a widget draws carries its cell's written alt text.
  accessibility violation on any page, in light and dark mode;
- the Portuguese edition (``pt/``, issue 31): a sample of pt pages (one of each kind:
  pages, chapters with figures, proofs and widgets, an exercise) gets all the checks
  above, and the language switch of each opens its counterpart in the same tab, both
  ways (tests/test_book.py checks the switch of every page in the HTML). The edition's pages are built from the same notebooks and templates
  as the English ones, so the sample covers what differs (their text, its maths, the
  theme in Portuguese) within CI's time.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import threading
import time

import pytest

from tests.conftest import ROOT, chrome, load_tool
from tests.test_alt_text import alt_problem
from tests.test_book import _toc_files
from tests.test_figures import figures_by_page

# Console messages that are harmless here. Keep each one justified.
ALLOWED_CONSOLE = [
    # The browser asks for /favicon.ico; the site has no favicon.
    re.compile(r"favicon\.ico"),
]


@pytest.fixture(scope="module")
def site_url(book_build):
    if book_build.returncode != 0:
        pytest.fail("the book did not build; see test_book.py")
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(book_build.html)
    )
    handler.log_message = lambda *a, **k: None  # keep the test output quiet
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    driver = chrome(1280, 1000)
    yield driver
    driver.quit()


_wait_for = load_tool("handouts").wait_for  # poll a script until it is truthy


# The theme's colours change with CSS transitions (Bootstrap's .btn: 0.15 s): a check
# run in the middle of one sees a half-changed colour (CI saw the search button's text
# fail axe's contrast rule on three pages that way). Wait for every transition to end.
TRANSITIONS_DONE = (
    "return document.getAnimations().every("
    "a => !(a instanceof CSSTransition) || a.playState === 'finished')"
)


def _set_theme(driver, mode: str) -> None:
    """Switch the theme to `mode` ("light" or "dark") and wait until its colours settle."""
    driver.execute_script("document.documentElement.dataset.theme = arguments[0]", mode)
    time.sleep(0.05)  # let the style recalculation start the transitions
    assert _wait_for(driver, TRANSITIONS_DONE), f"the {mode} theme's transitions never ended"


def _pages() -> list[str]:
    return _toc_files()


#: The pt pages that get every check (see the module's docstring).
PT_SAMPLE = [
    "pt/book/intro",
    "pt/book/glossary",
    "pt/book/errata",
    "pt/notebooks/ch05_embeddings_tokenization",
    "pt/notebooks/ch06_attention_geometry",
    "pt/exercises/ch03_multi_head",
]


@pytest.mark.parametrize("page", _pages() + PT_SAMPLE)
def test_page_in_browser(browser, site_url, book_build, page):
    source = (book_build.html / f"{page}.html").read_text()
    math_in_source = len(re.findall(r'class="math notranslate nohighlight"', source))
    has_widgets = "application/vnd.jupyter.widget-state+json" in source

    browser.get_log("browser")  # drop messages from the previous page
    browser.get(f"{site_url}/{page}.html")
    _wait_for(browser, "return document.readyState === 'complete'")

    if math_in_source:
        typeset = _wait_for(
            browser,
            "return (window.MathJax && MathJax.startup && MathJax.startup.promise) ? "
            f"document.querySelectorAll('mjx-container').length >= {math_in_source} : false",
        )
        count = browser.execute_script("return document.querySelectorAll('mjx-container').length")
        assert typeset, (
            f"{page}: {math_in_source} math elements in the source but {count} typeset by MathJax"
        )
        # MathJax typesets an equation it rejects too, as its error message in red
        rejected = browser.execute_script(
            "return Array.from(document.querySelectorAll('mjx-merror'))"
            ".map(e => e.getAttribute('data-mjx-error') + ': ' + e.textContent.slice(0, 80))"
        )
        assert not rejected, f"{page}: MathJax could not typeset:\n" + "\n".join(rejected)

    if (ROOT / f"{page}.ipynb").exists():
        colab = browser.execute_script(
            "return Array.from(document.querySelectorAll('a'))"
            ".filter(a => a.href.includes('colab.research.google.com')).map(a => a.href)"
        )
        assert colab, f"{page}: no Colab launch button"
        assert any(href.endswith(f"/{page}.ipynb") for href in colab), colab
        # any other Colab link is one of this chapter's exercises (its closing cell)
        chapter = page.split("/")[-1][:5]
        others = [href for href in colab if not href.endswith(f"/{page}.ipynb")]
        assert all(f"/exercises/{chapter}" in href for href in others), colab

    if has_widgets:
        rendered = _wait_for(
            browser, "return document.querySelectorAll('.jupyter-widgets, .widget-box').length"
        )
        assert rendered, f"{page}: the page embeds widget state but no widget was rendered"

    errors = [
        entry["message"]
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE"
        and not any(p.search(entry["message"]) for p in ALLOWED_CONSOLE)
    ]
    assert not errors, f"{page}: JavaScript errors:\n" + "\n".join(errors)


def test_some_page_renders_a_widget(book_build):
    """The widget check above must not pass vacuously: at least one page has widgets."""
    pages = [
        p for p in _pages() if "widget-state+json" in (book_build.html / f"{p}.html").read_text()
    ]
    assert pages, "no built page embeds ipywidgets state; the widget check would be vacuous"


AXE = ROOT / "tests" / "vendor" / "axe-core" / "axe.min.js"  # 4.14.1, see its README
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
# Rules switched off, each with its reason; remove a line when its work is done.
AXE_OFF: dict[str, str] = {
    # none: every rule of AXE_TAGS runs. (image-alt was off until every plot had written
    # alt text, issue 30, section 3: tests/test_alt_text.py, and the widget plots below.)
}
AXE_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {runOnly: %s, rules: %s}).then(r => done(r.violations
  .filter(v => v.impact === 'serious' || v.impact === 'critical')
  .map(v => v.id + ' (' + v.impact + ', ' + v.nodes.length + '): ' + v.help + ' -- '
       + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join('; '))));
"""


@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("page", _pages() + PT_SAMPLE)
def test_page_has_no_serious_accessibility_violation(browser, site_url, book_build, page, mode):
    """axe-core, served from the repository, finds no serious or critical violation of
    WCAG 2.1 A/AA or of its best practices on the page, in the theme's light and dark
    modes (colour contrast, names of buttons and widgets, headings, ARIA roles; the fixes
    for what the theme and the widget renderer write are in book/_static/a11y.js)."""
    browser.get(f"{site_url}/{page}.html")
    _wait_for(browser, "return document.readyState === 'complete'")
    _set_theme(browser, mode)
    source = (ROOT / f"{page}.ipynb").read_text() if (ROOT / f"{page}.ipynb").exists() else ""
    if "widgets" in source:  # let the widgets draw (a11y.js names their sliders)
        _wait_for(browser, "return document.querySelectorAll('.jupyter-widgets').length")
    math = (
        (book_build.html / f"{page}.html").read_text().count('class="math notranslate nohighlight"')
    )
    _wait_for(browser, f"return document.querySelectorAll('mjx-container').length >= {math}")
    browser.set_script_timeout(60)
    browser.execute_script(AXE.read_text())
    off = json.dumps({rule: {"enabled": False} for rule in AXE_OFF})
    violations = browser.execute_async_script(AXE_RUN % (json.dumps(AXE_TAGS), off))
    assert not violations, f"{page} ({mode} mode):\n" + "\n".join(violations)


def _widget_alts() -> dict[str, list[str]]:
    """Chapter page -> the written alt texts of its widget plots (metadata.course.widget_alt),
    in the order of its cells."""
    pages = {}
    for path in sorted((ROOT / "notebooks").glob("ch*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        alts = [
            c["metadata"].get("course", {}).get("widget_alt")
            for c in cells
            if c["cell_type"] == "code"
        ]
        if any(alts):
            pages[f"notebooks/{path.stem}"] = [a.strip() for a in alts if a]
    return pages


# Each widget-alt marker of the page (book/_ext/course_widget_alt.py), with the alt of every
# image drawn in the same cell output (by the widget renderer, named by book/_static/a11y.js).
WIDGET_IMAGES = """
return Array.from(document.querySelectorAll('.course-widget-alt')).map(m => {
  const out = m.closest('.cell_output') || m.parentElement;
  return {written: m.getAttribute('data-alt'),
          alts: Array.from(out.querySelectorAll('img')).map(i => i.getAttribute('alt'))};
});
"""
WIDGETS_DRAWN_AND_NAMED = (
    "return Array.from(document.querySelectorAll('.course-widget-alt')).every(m => {"
    "  const imgs = (m.closest('.cell_output') || m.parentElement).querySelectorAll('img');"
    "  return imgs.length > 0 && Array.from(imgs).every("
    "    i => i.getAttribute('alt') === m.getAttribute('data-alt'));"
    "})"
)


def test_some_widget_plot_has_written_alt_text():
    """The check below must not pass vacuously."""
    assert len(_widget_alts()) >= 10


@pytest.mark.parametrize("page", sorted(_widget_alts()))
def test_widget_plots_have_their_written_alt_text(browser, site_url, page):
    """A plot drawn by a widget (from the embedded widget state, with no alt of its own)
    shows the alt text its cell's metadata.course.widget_alt writes: not empty, not a path."""
    browser.get(f"{site_url}/{page}.html")
    _wait_for(browser, "return document.readyState === 'complete'")
    _wait_for(browser, WIDGETS_DRAWN_AND_NAMED, timeout=30)
    state = browser.execute_script(WIDGET_IMAGES)
    written = _widget_alts()[page]
    assert [s["written"] for s in state] == written, (
        f"{page}: the page's widget alt markers differ from the notebook's widget_alt texts"
    )
    for s in state:
        assert s["alts"], f"{page}: the widget drew no image next to {s['written'][:60]!r}"
        assert all(alt == s["written"] for alt in s["alts"]), (
            f"{page}: a widget image's alt is {s['alts']}, not the written text"
        )
        assert alt_problem(s["alts"][0]) is None, f"{page}: {alt_problem(s['alts'][0])}"


# State of one figure: found by the id Sphinx gives it (the directive's :name:),
# scrolled into view, so that an image the browser would load lazily is loaded.
FIGURE_STATE = """
const fig = document.getElementById(%s);
if (!fig) return {found: false};
const img = fig.querySelector('img');
if (!img) return {found: true, img: false};
img.scrollIntoView({block: 'center'});
const box = img.getBoundingClientRect();
const style = getComputedStyle(img);
const caption = fig.querySelector('figcaption');
return {
  found: true, img: true, complete: img.complete, natural: img.naturalWidth,
  width: box.width, height: box.height, alt: img.getAttribute('alt') || '',
  src: img.getAttribute('src') || '',
  shown: style.display !== 'none' && style.visibility !== 'hidden' && img.offsetParent !== null,
  caption: caption ? caption.textContent : '',
};
"""


@pytest.mark.parametrize("page", sorted(figures_by_page()))
def test_figures_are_displayed(browser, site_url, page):
    browser.get(f"{site_url}/{page}.html")
    _wait_for(browser, "return document.readyState === 'complete'")
    for figure in figures_by_page()[page]:
        name = figure["options"]["name"]
        script = FIGURE_STATE % json.dumps(name)
        _wait_for(browser, f"const s = (() => {{{script}}})(); return s.complete && s.natural > 0;")
        state = browser.execute_script(script)
        assert state["found"], f"{page}: no element with id {name}"
        assert state["img"], f"{page}: figure {name} has no image"
        assert state["complete"] and state["natural"] > 0, f"{page}: {name} did not load: {state}"
        assert state["shown"] and state["width"] > 0 and state["height"] > 0, (
            f"{page}: {name} is not displayed: {state}"
        )
        assert state["src"].endswith(figure["path"].name), f"{page}: {name} shows {state['src']}"
        assert state["alt"].strip() == figure["options"]["alt"], f"{page}: {name} alt text"
        assert re.match(r"\s*Figure \d+\.\d+", state["caption"]), (
            f"{page}: {name} has no numbered caption: {state['caption'][:80]!r}"
        )


# Every wire of a figure, as the browser draws it: its path and computed stroke width.
WIRE_WIDTHS = """
return Array.from(document.querySelectorAll('path.wire')).map(
  p => [p.getAttribute('d'), parseFloat(getComputedStyle(p).strokeWidth)]);
"""


WIRE_DEFAULT = 1.6  # the .wire rule of make_figures.py's stylesheet


def _intended_width(path) -> float:
    """The width a wire asks for: its style, else its stroke-width attribute, else the
    stylesheet's .wire rule."""
    style = re.search(r"stroke-width:\s*([\d.]+)", path.get("style", ""))
    if style:
        return float(style.group(1))
    return float(path.get("stroke-width", WIRE_DEFAULT))


def test_figure_stroke_widths_render(browser):
    """The widths a figure encodes are the widths Chromium draws: the LSTM's cell
    state is thicker than the other wires, and in the attention figure the three
    alpha wires have three different widths. (A stroke-width attribute loses to the
    stylesheet's .wire rule in the CSS cascade and renders at 1.6 px; the control
    below shows that this check would catch it.)"""
    import xml.etree.ElementTree as ET

    from tests.test_figures import FIGURES, SVG_NS

    drawn = {}
    for svg in sorted(FIGURES.glob("*.svg")):
        browser.get(svg.as_uri())
        _wait_for(browser, "return document.readyState === 'complete'")
        computed = browser.execute_script(WIRE_WIDTHS)
        root = ET.fromstring(svg.read_text())
        wires = [p for p in root.iter(f"{SVG_NS}path") if "wire" in p.get("class", "").split()]
        assert [p.get("d") for p in wires] == [d for d, _ in computed], svg.name
        for path, (d, width) in zip(wires, computed, strict=True):
            assert width == pytest.approx(_intended_width(path), abs=0.01), (
                f"{svg.name}: the wire {d[:40]} asks for {_intended_width(path)} px "
                f"and renders at {width} px"
            )
        drawn[svg.stem] = computed
        if svg.stem == "lstm_cell":
            # the control: the same wire with a stroke-width attribute renders at 1.6 px
            control = browser.execute_script(
                "const p = document.querySelector('path.wire').cloneNode();"
                "p.removeAttribute('style'); p.setAttribute('stroke-width', '3.2');"
                "document.documentElement.appendChild(p);"
                "return parseFloat(getComputedStyle(p).strokeWidth);"
            )
            assert control == pytest.approx(WIRE_DEFAULT)
    cell_state = [w for d, w in drawn["lstm_cell"] if d.endswith(",80")]
    others = [w for d, w in drawn["lstm_cell"] if not d.endswith(",80")]
    assert len(cell_state) == 3 and min(cell_state) > 1.5 * max(others), drawn["lstm_cell"]
    alphas = sorted({w for _, w in drawn["seq2seq_attention"] if w != WIRE_DEFAULT})
    assert len(alphas) == 3 and alphas[-1] > 2 * alphas[0], drawn["seq2seq_attention"]


def _ink_contrast(png: bytes) -> float:
    """WCAG contrast ratio between a screenshot's background (its median luminance)
    and its ink (the darkest 1%): how readable a line drawing is where it is shown."""
    import io

    import numpy as np
    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")) / 255.0
    linear = np.where(rgb <= 0.03928, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    lum = linear @ np.array([0.2126, 0.7152, 0.0722])  # relative luminance, WCAG 2.1
    ink, background = np.percentile(lum, 1), np.percentile(lum, 50)
    return (max(ink, background) + 0.05) / (min(ink, background) + 0.05)


def test_figures_are_readable_in_light_and_dark_mode(browser, site_url):
    """The architecture figures carry their own light background, and the theme's dark
    mode dims images (brightness 0.8, contrast 1.2): the ink keeps a contrast of at least
    3 against it in both modes (WCAG 2.1's 1.4.11 for graphics), measured on a
    screenshot. Control: the same figure dimmed to a fifth, as a theme that darkens
    images for dark mode would, is unreadable, and the measure says so."""
    page = sorted(figures_by_page())[0]
    name = figures_by_page()[page][0]["options"]["name"]
    browser.get(f"{site_url}/{page}.html")
    _wait_for(browser, "return document.readyState === 'complete'")
    contrast = {}
    for mode in ("light", "dark"):
        _set_theme(browser, mode)
        img = browser.find_element("css selector", f"#{name} img")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", img)
        contrast[mode] = _ink_contrast(img.screenshot_as_png)
    browser.execute_script(
        "const s = document.createElement('style'); s.id = 'no-panel';"
        "s.textContent = 'img { filter: brightness(0.2) !important; }';"
        "document.head.appendChild(s);"
    )
    time.sleep(0.5)
    bare = _ink_contrast(browser.find_element("css selector", f"#{name} img").screenshot_as_png)
    browser.execute_script("document.getElementById('no-panel').remove()")
    browser.execute_script("document.documentElement.dataset.theme = 'light'")
    assert contrast["light"] >= 3 and contrast["dark"] >= 3, (page, name, contrast)
    assert bare < 3, f"control: the measure should see the dimmed figure as unreadable ({bare:.1f})"


SWITCH = "document.querySelector('a.btn-language-switch')"


@pytest.mark.parametrize("page", [p.removeprefix("pt/") for p in PT_SAMPLE])
def test_language_switch_opens_the_counterpart(browser, site_url, page):
    """On the English page, the header's language button opens the pt page, in the same
    tab (book/_static/a11y.js drops the theme's target="_blank"), and the pt page's
    button leads back. (tests/test_book.py checks every page pair's link in the HTML;
    clicking every pair here would cost CI five minutes.)"""
    for here, there, lang in ((page, f"pt/{page}", "pt-BR"), (f"pt/{page}", page, "en")):
        browser.get(f"{site_url}/{here}.html")
        _wait_for(browser, "return document.readyState === 'complete'")
        link = _wait_for(browser, f"return {SWITCH} && !{SWITCH}.hasAttribute('target')")
        assert link, f"{here}: no language switch, or it opens another tab"
        browser.execute_script(f"{SWITCH}.click()")
        arrived = _wait_for(
            browser,
            f"return location.pathname.endsWith('/{there}.html') && "
            "document.readyState === 'complete'",
        )
        assert arrived, f"{here}: the language switch opened {browser.current_url}"
        assert browser.execute_script("return document.documentElement.lang") == lang
        assert len(browser.window_handles) == 1, f"{here}: the switch opened a new tab"
