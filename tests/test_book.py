"""The website builds with warnings as errors and carries everything it loads."""

from __future__ import annotations

import json
import re

import nbformat
import yaml

from tests.conftest import ROOT, load_tool


def _toc_files() -> list[str]:
    """Every page of the English book's table of contents (tools/i18n.py reads it too)."""
    return load_tool("i18n").toc_files(ROOT)


def test_book_builds_without_warnings(book_build):
    tail = "\n".join(book_build.log.splitlines()[-60:])
    assert book_build.returncode == 0, f"jupyter-book build -W -n failed:\n{tail}"
    assert "WARNING" not in book_build.log, tail
    print(f"book build took {book_build.seconds:.1f} s")


def test_every_toc_page_is_built(book_build):
    for name in _toc_files():
        page = book_build.html / f"{name}.html"
        assert page.is_file(), f"{name} is in _toc.yml but {page} was not built"


def test_notebook_pages_have_outputs_and_no_errors(book_build):
    for name in _toc_files():
        if not (ROOT / f"{name}.ipynb").exists() or name.startswith("exercises/"):
            continue
        html = (book_build.html / f"{name}.html").read_text()
        assert "cell_output" in html, f"{name}: the built page shows no executed output"
        # MyST-NB renders an error output as a block of class "output traceback".
        assert not re.search(r'class="output traceback', html), f"{name} shows an error output"


def test_colab_button_opens_each_notebook_of_the_colab_edition(book_build):
    """Every notebook page's Colab link opens that very notebook in the Colab edition (the
    branch in _config.yml, colab, which the website's workflow writes); the notebooks' own
    "Open in Colab" badge, an image on another host, is not on the site (its cell is
    tagged remove-cell)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    owner_repo = config["repository"]["url"].removeprefix("https://github.com/")
    branch = config["repository"]["branch"]
    assert branch == "colab"
    pages = [n for n in _toc_files() if (ROOT / f"{n}.ipynb").exists()]
    assert any(n.startswith("notebooks/") for n in pages) and any(
        n.startswith("exercises/") for n in pages
    )
    for name in pages:
        html = (book_build.html / f"{name}.html").read_text()
        links = set(re.findall(r'href="(https://colab\.research\.google\.com[^"]*)"', html))
        base = f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/"
        expected = f"{base}{name}.ipynb"
        # a chapter's closing cell also opens each of its exercises in Colab
        chapter = name.removeprefix("notebooks/")[:5] if name.startswith("notebooks/") else None
        exercises = (
            {f"{base}exercises/{p.name}" for p in (ROOT / "exercises").glob(f"{chapter}*.ipynb")}
            if chapter
            else set()
        )
        assert links == {expected} | exercises, (
            f"{name}: Colab links {sorted(links)}, expected {sorted({expected} | exercises)}"
        )
        assert "colab-badge.svg" not in html, f"{name} shows the Colab badge image"


# Maths that MyST did not parse as maths: a display block ($$ on its own line) that
# follows a line of text inside a list item is read as inline maths between two
# stray dollars, and a continuation line that starts with "+" becomes a nested list
# (Chapter 10 showed both, found by the PDF handouts' raw-TeX check).
STRAY_MATH = re.compile(r'\$<span class="math|</span>\$|\$\$')


def untypeset_maths(html: str) -> list[str]:
    """Text around each dollar sign left in the page's prose (not in code blocks)."""
    prose = re.sub(r"<pre.*?</pre>|<script.*?</script>", "", html, flags=re.S)
    return [prose[max(0, m.start() - 60) : m.end() + 20] for m in STRAY_MATH.finditer(prose)]


def test_no_page_shows_untypeset_maths(book_build):
    """Every page's maths is typeset: no `$` left beside or outside a maths span."""
    found = {}
    for page in sorted(book_build.html.rglob("*.html")):
        rel = page.relative_to(book_build.html).as_posix()
        if rel.startswith(("_", "reports/")) or "slides/" in rel:
            continue
        if hits := untypeset_maths(page.read_text(encoding="utf-8")):
            found[rel] = hits[:2]
    assert not found, f"maths shown as raw TeX (blank line around the $$ block?): {found}"


def test_the_untypeset_maths_check_sees_a_stray_dollar():
    """Control: the HTML MyST wrote for Chapter 10's list-item equation before its fix."""
    bad = '<p>learned,\n$<span class="math notranslate nohighlight">\\(x\\)</span>$</p>'
    assert untypeset_maths(bad) and not untypeset_maths(bad.replace("$", ""))


def test_site_loads_nothing_from_a_cdn(book_build):
    """The site must render offline: no script, stylesheet or font from another host."""
    remote = re.compile(r"^(https?:)?//")
    offenders = []
    for page in book_build.html.rglob("*.html"):
        html = page.read_text(errors="replace")
        for tag, url in re.findall(r'(<script\b[^>]*\bsrc="([^"]*)")', html) + re.findall(
            r'(<link\b[^>]*\bhref="([^"]*)")', html
        ):
            is_asset = tag.startswith("<script") or re.search(r'rel="(stylesheet|preload)"', tag)
            if is_asset and remote.match(url):
                offenders.append(f"{page.relative_to(book_build.html)}: {url}")
    assert not offenders, "pages load assets from other hosts:\n" + "\n".join(offenders[:20])


def test_status_page_lists_every_notebook(book_build):
    html = (book_build.html / "book" / "status.html").read_text()
    assert "course-hardware" in html, "the hardware line is missing from the status page"
    assert "Hardware of the build" in html
    # the "Heavy notebooks" section alone (the rest of the page has lists of its own):
    # either the sentence that none is heavy, or one "name: N s" item per heavy notebook
    section = re.search(r'<section id="heavy-notebooks">(.*?)</section>', html, re.S)
    assert section, "the Heavy notebooks section is missing from the status page"
    heavy = section.group(1)
    items = re.findall(r"<li>(.*?)</li>", heavy, re.S)
    assert ("every notebook ran within" in heavy) != bool(items), "heavy list not filled in"
    for item in items:
        assert re.fullmatch(r"<p>\S+: \d+ s</p>", item.strip()), f"heavy list item {item!r}"
    for name in _toc_files():
        if (ROOT / f"{name}.ipynb").exists() and not name.startswith("exercises/"):
            assert name.split("/")[-1] in html, f"{name} missing from the execution table"
    # the last seed/thread sweep (book/sweep.json), rendered by the course-sweep directive
    assert 'class="table course-sweep"' in html, "the sweep table is missing from the status page"
    sweep = html[html.index('class="table course-sweep"') :]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"notebooks/{nb.name}" in sweep, f"{nb.name} missing from the sweep table"
    # the last side-by-side benchmarks (book/benchmarks.json), by the course-benchmarks directive
    assert 'class="table course-benchmarks"' in html, "the benchmark table is missing"
    rows = json.loads((ROOT / "book" / "benchmarks.json").read_text())["rows"]
    assert html.count('<tr class="bench-') == len(rows), "a benchmark row is missing"


# ---------------------------------------------------------------------------
# The Portuguese edition (pt/, issue 31), built by the same command into html/pt/
# ---------------------------------------------------------------------------

SWITCH = re.compile(r'<a href="([^"]+)"[^>]*?class="btn btn-sm btn-language-switch"', re.S)


def _switch_target(page, html_dir):
    """The page the language button of ``page`` (a path under html_dir) opens."""
    links = SWITCH.findall(page.read_text())
    assert len(links) == 1, f"{page.relative_to(html_dir)}: {len(links)} language switches"
    return (page.parent / links[0]).resolve()


def test_edition_pages_are_built_and_switch_to_their_counterparts(book_build):
    """Every page has its pt counterpart, in Portuguese (html lang, the theme's words),
    and the language button of each opens the other."""
    html = book_build.html
    for name in _toc_files():
        en, pt = html / f"{name}.html", html / "pt" / f"{name}.html"
        assert pt.is_file(), f"{name} has no Portuguese page {pt}"
        assert _switch_target(en, html) == pt.resolve(), f"{name}: the switch misses pt/"
        assert _switch_target(pt, html) == en.resolve(), f"pt/{name}: the switch misses {en}"
        text = pt.read_text()
        assert '<html lang="pt-BR"' in text, f"pt/{name} is not marked Portuguese"
        assert 'aria-label="Buscar"' in text, f"pt/{name}: the theme's words are not Portuguese"
        assert 'placeholder="Buscar neste livro..."' in text, f"pt/{name}: the search box"


def test_edition_notebooks_come_from_the_english_execution_cache(book_build):
    """No notebook executes twice: the pt build's log (_build/pt/build.log) executed none,
    each pt chapter matches a notebook of the execution cache (so MyST-NB takes its
    outputs from there whenever it reads the page), and shows those outputs."""
    from jupyter_cache import get_cache

    log = (ROOT / "_build" / "pt" / "build.log").read_text()
    assert "Executing notebook" not in log, "a pt notebook was executed a second time"
    cache = get_cache(str(ROOT / "_build" / ".jupyter_cache"))
    for name in (n for n in _toc_files() if n.startswith("notebooks/")):
        notebook = nbformat.read(ROOT / "pt" / f"{name}.ipynb", as_version=4)
        english = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
        assert cache.match_cache_notebook(notebook).pk == cache.match_cache_notebook(english).pk
        page = (book_build.html / "pt" / f"{name}.html").read_text()
        assert "cell_output" in page, f"pt/{name}: no executed output"
        assert not re.search(r'class="output traceback', page), f"pt/{name} shows an error"


def test_edition_colab_buttons_open_the_edition(book_build):
    """A pt notebook page opens pt/<notebook> on the Colab edition's branch (and its
    closing cell the pt exercises)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    base = (
        "https://colab.research.google.com/github/"
        f"{config['repository']['url'].removeprefix('https://github.com/')}"
        f"/blob/{config['repository']['branch']}/pt/"
    )
    for name in (n for n in _toc_files() if (ROOT / f"{n}.ipynb").exists()):
        html = (book_build.html / "pt" / f"{name}.html").read_text()
        links = set(re.findall(r'href="(https://colab\.research\.google\.com[^"]*)"', html))
        assert f"{base}{name}.ipynb" in links, f"pt/{name}: {sorted(links)}"
        assert all(
            link.startswith(f"{base}exercises/") or link == f"{base}{name}.ipynb" for link in links
        )


def test_edition_numbers_figures_in_portuguese(book_build):
    html = (book_build.html / "pt" / "notebooks" / "ch01_rnn_bottleneck.html").read_text()
    assert '<span class="caption-number">Figura 1.1 </span>' in html
    assert 'href="../slides/ch01_rnn_bottleneck.html">Slides da aula' in html
    assert (book_build.html / "pt" / "slides" / "ch01_rnn_bottleneck.html").is_file()
