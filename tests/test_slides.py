"""Lecture slides: the plans, the notebooks' slide metadata, and every deck in a real browser.

The plans (``book/slides/chNN.yml``) and the notebooks must agree
(``python tools/slides.py apply`` writes one into the other); a cell that no
plan lists is ``skip``ped, the plan's ``default``.

The decks are tested where the website puts them, ``_build/html/slides/``,
after the book build (the ``book_build`` fixture). To test them without the
full build, point ``COURSE_SLIDES_CACHE`` at an execution cache that holds the
chapters (e.g. a copy of ``_build/.jupyter_cache``): the decks are then written
from it into a temporary site with the book's ``_static`` and figures, as the
build would write them; chapters that the cache does not hold are skipped.

For every deck, in headless Chromium at a 1280 x 720 viewport:

- it loads with no network request: every request (Chrome's performance log)
  goes to the local test server or is a ``data:``/``blob:``/``about:`` URL;
- it has between ``MIN_SLIDES`` and ``MAX_SLIDES`` slides (tools/slides.py:
  a 50-minute lecture, at least one slide every 6 minutes and at most about one
  a minute);
- no slide overflows: reveal.js lays every slide out at the deck's size,
  1280 x 720 CSS pixels, then scales the whole ``.slides`` box to the window
  with a CSS transform (here by 1/1.02, the margin). A transform does not
  change layout sizes, so each slide's ``<section>`` (100% of the frame,
  ``overflow-y: auto`` in the projector theme) is measured in the slide's own
  pixels: its ``scrollHeight`` must not exceed its ``clientHeight``, nor its
  ``scrollWidth`` its ``clientWidth``. Each slide is shown (``Reveal.slide``)
  before it is measured, after MathJax, the images and the widgets are done;
- the speaker-notes view opens: the notes plugin's window appears and shows
  the speaker view;
- every image has written alt text (issue 30, section 3), as on the website.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, chrome, load_tool
from tests.test_alt_text import alt_problem

slides = load_tool("slides")
CHAPTERS = slides.chapters()


# ---------------------------------------------------------------------------
# Plans and metadata (no browser, no build)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_notebook_metadata_matches_its_plan(notebook):
    assert not slides.problems(notebook), "\n".join(slides.problems(notebook))


def test_every_chapter_has_a_plan_and_no_plan_is_orphaned():
    plans = {p.stem for p in slides.PLAN_DIR.glob("*.yml")}
    assert plans == {nb.name[:4] for nb in CHAPTERS}


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_plan_shows_a_lecture(notebook):
    """Every plan opens with a slide and shows at least one figure, plot or widget."""
    nb = json.loads(notebook.read_text())
    types = slides.planned_types(notebook, nb)
    shown = [c for c in nb["cells"] if types[c["id"]] not in ("skip", "notes")]
    assert shown and types[shown[0]["id"]] == "slide"
    assert any(c["cell_type"] == "code" for c in shown), f"{notebook.name}: no result shown"


@pytest.fixture
def fake_chapter(tmp_path, monkeypatch):
    """A two-cell chapter and its plan in a temporary repository."""
    monkeypatch.setattr(slides, "ROOT", tmp_path)
    monkeypatch.setattr(slides, "PLAN_DIR", tmp_path / "book" / "slides")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book" / "slides").mkdir(parents=True)
    nb = {
        "cells": [
            {"cell_type": "markdown", "id": "title", "metadata": {}, "source": ["# T"]},
            {
                "cell_type": "code",
                "id": "03533647",
                "metadata": {},
                "source": ["1"],
                "outputs": [],
                "execution_count": None,
            },
            {"cell_type": "markdown", "id": "prose", "metadata": {}, "source": ["text"]},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "notebooks" / "ch99_fake.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n")

    def plan(cells: dict, default: str = "skip") -> None:
        data = {"notebook": "notebooks/ch99_fake.ipynb", "default": default, "cells": cells}
        (tmp_path / "book" / "slides" / "ch99.yml").write_text(yaml.safe_dump(data))

    return path, plan


def test_apply_writes_the_plan_and_check_sees_a_disagreement(fake_chapter):
    path, plan = fake_chapter
    plan({"title": "slide", "03533647": {"type": "fragment", "code": "show"}})
    assert slides.problems(path)  # nothing applied yet
    assert slides.apply(path)
    assert not slides.problems(path)
    nb = json.loads(path.read_text())
    assert [c["metadata"]["slideshow"]["slide_type"] for c in nb["cells"]] == [
        "slide",
        "fragment",
        "skip",  # not in the plan: the default
    ]
    assert ["".join(c["source"]) for c in nb["cells"]] == ["# T", "1", "text"]  # sources kept
    assert not slides.apply(path)  # idempotent
    plan({"title": "slide", "prose": "notes"})
    assert any("plan says 'notes'" in p for p in slides.problems(path))


def test_a_plan_naming_a_missing_cell_fails(fake_chapter):
    path, plan = fake_chapter
    plan({"title": "slide", "gone": "subslide"})
    with pytest.raises(slides.PlanError, match=r"no longer has: \['gone'\]"):
        slides.apply(path)
    assert any("no longer has" in p for p in slides.problems(path))


def test_a_chapter_with_no_plan_or_a_bad_plan_fails(fake_chapter):
    path, plan = fake_chapter
    with pytest.raises(slides.PlanError, match="has no lecture plan"):
        slides.apply(path)
    (slides.PLAN_DIR / "ch99.yml").write_text(
        "notebook: notebooks/ch99_fake.ipynb\ncells:\n  03533647: slide\n"
    )
    with pytest.raises(slides.PlanError, match="quote it"):  # YAML read the id as octal
        slides.apply(path)
    plan({"title": "slides"})
    with pytest.raises(slides.PlanError, match="type must be one of"):
        slides.apply(path)


def test_first_shown_cell_must_be_a_slide(fake_chapter):
    path, plan = fake_chapter
    plan({"title": "subslide"})
    slides.apply(path)
    assert any("first cell shown" in p for p in slides.problems(path))


def test_condense_keeps_headings_equations_figures_and_moves_prose_to_notes():
    text = (
        "## Scores\n\nA long paragraph of prose\nover two lines.\n\n$$\nq \\cdot k\n\\tag{6.1}\n$$\n\n"
        "```{figure} ../book/figures/x.svg\n:name: fig-x\n\nCaption.\n```\n\n- a short list\n"
    )
    shown, notes = slides.condense(text)
    assert "## Scores" in shown and "q \\cdot k" in shown and "{figure}" in shown
    assert "a short list" in shown
    assert "prose" not in shown and "prose" in notes


# ---------------------------------------------------------------------------
# The decks
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slides_site(tmp_path_factory, request) -> Path:
    """A folder served as the site root, with the decks under slides/."""
    cache = os.environ.get("COURSE_SLIDES_CACHE")
    if not cache:
        build = request.getfixturevalue("book_build")
        if build.returncode != 0:
            pytest.fail("the book did not build; see test_book.py")
        return build.html
    site = tmp_path_factory.mktemp("slides_site")
    shutil.copytree(ROOT / "book" / "_static", site / "_static")
    (site / "_images").mkdir()
    for figure in (ROOT / "book" / "figures").glob("*.svg"):
        shutil.copy(figure, site / "_images" / figure.name)
    for notebook in CHAPTERS:
        try:
            slides.export(site / "slides", Path(cache).resolve(), [notebook])
        except slides.PlanError as exc:
            print(f"skipped: {exc}")
    return site


@pytest.fixture(scope="module")
def slides_url(slides_site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(slides_site))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def slide_browser():
    driver = chrome(1280, 720, logs=("browser", "performance"))
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": False},
    )
    yield driver
    driver.quit()


_wait_for = load_tool("handouts").wait_for  # poll a script until it is truthy


def _requests(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


# Measured on the slide being shown, in the slide's own (untransformed) pixels.
MEASURE = """
const s = Reveal.getCurrentSlide();
const title = (s.querySelector('h1, h2, h3') || s).textContent.trim().slice(0, 60);
return {title: title, sh: s.scrollHeight, ch: s.clientHeight, sw: s.scrollWidth,
        cw: s.clientWidth, indices: Reveal.getIndices(s)};
"""

READY = """
if (!(window.Reveal && Reveal.isReady())) return false;
if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
if (!window.__mathjaxDone) { MathJax.startup.promise.then(() => { window.__mathjaxDone = true; }); return false; }
const images = Array.from(document.images).every(img => img.complete);
const views = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length;
const widgets = document.querySelectorAll('.jupyter-widgets, .widget-box').length;
return images && (views === 0 || widgets > 0);
"""


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_deck_in_browser(slide_browser, slides_site, slides_url, notebook):
    deck = slides_site / "slides" / slides.deck_name(notebook)
    if not deck.exists():
        if os.environ.get("COURSE_SLIDES_CACHE"):
            pytest.skip(f"{notebook.name} is not in COURSE_SLIDES_CACHE")
        pytest.fail(f"the build wrote no deck for {notebook.name}: {deck}")
    driver = slide_browser
    driver.get_log("performance")
    driver.get_log("browser")
    driver.get(f"{slides_url}/slides/{deck.name}")
    assert _wait_for(driver, READY, 60), f"{deck.name}: reveal.js, MathJax or widgets not ready"

    # 1. no request leaves the local server
    local = (slides_url, "data:", "blob:", "about:")
    remote = [u for u in _requests(driver) if not u.startswith(local)]
    assert not remote, f"{deck.name} requested other hosts: {remote}"

    # 2. a lecture's number of slides
    total = driver.execute_script("return Reveal.getTotalSlides()")
    assert slides.MIN_SLIDES <= total <= slides.MAX_SLIDES, (
        f"{deck.name}: {total} slides, outside [{slides.MIN_SLIDES}, {slides.MAX_SLIDES}]"
    )

    # 3. nothing overflows the 1280 x 720 frame
    frame = driver.execute_script(
        "const c = Reveal.getConfig(); return [c.width, c.height, window.innerWidth, window.innerHeight]"
    )
    assert frame == [1280, 720, 1280, 720], frame
    stacks = driver.execute_script(
        "return Reveal.getHorizontalSlides().map(h => Math.max(1, h.querySelectorAll(':scope > section').length))"
    )
    overflows = []
    for h, count in enumerate(stacks):
        for v in range(count):
            driver.execute_script(f"Reveal.slide({h}, {v}); Reveal.layout();")
            m = driver.execute_script(MEASURE)
            if m["sh"] > m["ch"] + 1 or m["sw"] > m["cw"] + 1:
                overflows.append(
                    f"slide {h}.{v} {m['title']!r}: content {m['sw']}x{m['sh']} "
                    f"in a {m['cw']}x{m['ch']} frame"
                )
    assert not overflows, f"{deck.name}: slides overflow 1280x720:\n" + "\n".join(overflows)

    # 4. the speaker view opens (the notes plugin, as the "s" key does). The window
    # is read from here (it is same-origin) rather than switched to: it loads the
    # deck twice more in iframes, and a busy renderer would time the switch out.
    notes = driver.execute_script("return document.querySelectorAll('aside.notes').length")
    assert notes, f"{deck.name}: no speaker notes in the deck"
    driver.execute_script(
        "const open = window.open; window.open = function () {"
        " window.__notes = open.apply(window, arguments); return window.__notes; };"
        "Reveal.slide(0, 0); Reveal.getPlugin('notes').open();"
    )
    view = _wait_for(
        driver,
        "const w = window.__notes; return !!(w && w.document &&"
        " w.document.querySelector('.speaker-controls-notes'));",
        30,
    )
    driver.execute_script("window.__notes && window.__notes.close()")
    assert view, f"{deck.name}: the speaker-notes window did not open"

    # 5. every image has written alt text, as on the website: a plot its cell's
    # mystnb.image.alt, a widget's plot its cell's course.widget_alt (set by a11y.js), a
    # figure its own; never nbconvert's "No description has been provided for this image"
    _wait_for(driver, "return Array.from(document.images).every(i => i.getAttribute('alt'))", 10)
    alts = driver.execute_script(
        "return Array.from(document.images).map(i => i.getAttribute('alt') || '')"
    )
    unwritten = [a[:60] for a in alts if alt_problem(a) or a.startswith("No description")]
    assert not unwritten, f"{deck.name}: images without written alt text: {unwritten}"

    errors = [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]  # the site has none
    ]
    assert not errors, f"{deck.name}: JavaScript errors:\n" + "\n".join(errors)


# ---------------------------------------------------------------------------
# Links from the website (needs the book build)
# ---------------------------------------------------------------------------


def test_chapter_pages_and_instructor_guide_link_the_decks(request):
    if os.environ.get("COURSE_SLIDES_CACHE"):
        pytest.skip("COURSE_SLIDES_CACHE tests the decks without the book build; the links need it")
    html = request.getfixturevalue("book_build").html
    guide = (html / "book" / "instructor_guide.html").read_text()
    for notebook in CHAPTERS:
        name = slides.deck_name(notebook)
        assert (html / "slides" / name).exists(), f"no deck {name}"
        page = (html / "notebooks" / f"{notebook.stem}.html").read_text()
        assert f'href="../slides/{name}"' in page, f"{notebook.stem}: no link to its deck"
        assert f'href="../slides/{name}"' in guide, f"instructor guide: no link to {name}"
