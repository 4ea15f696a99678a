"""The Colab edition (tools/colab_edition.py): Markdown that Colab renders, no MyST left.

Colab renders Markdown, not MyST. The edition every "Open in Colab" link
opens is generated from the notebooks; these tests convert every chapter and
exercise and check what a student sees there: no MyST role or directive,
citations as author-year text with a reference list, figures as images on
the published site with their alt text and website number, theorems as
headed blocks, and computed numbers in place of glue roles. A last test opens
a converted chapter, rendered by nbconvert, in the real browser.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from tests.conftest import ROOT
from tests.test_browser import browser  # noqa: F401 (the fixture)

spec = importlib.util.spec_from_file_location("colab_edition", ROOT / "tools/colab_edition.py")
edition = importlib.util.module_from_spec(spec)
spec.loader.exec_module(edition)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Every notebook converted once, with the values of this session's execution cache."""
    out = tmp_path_factory.mktemp("colab")
    written = edition.build(out, ROOT / "_build" / ".jupyter_cache", strict=False)
    return {p.relative_to(out).as_posix(): json.loads(p.read_text()) for p in written}


def _markdown(nb: dict) -> str:
    return "\n\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def _code(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_every_chapter_and_exercise_is_converted(converted):
    """Those of the English edition and of every edition in another language (pt/)."""
    assert edition.editions() == ["pt"]
    sources = sorted(
        p.relative_to(ROOT).as_posix()
        for folder in ("notebooks", "exercises", "pt/notebooks", "pt/exercises")
        for p in (ROOT / folder).glob("*.ipynb")
    )
    assert len(sources) == 2 * 42 and sorted(converted) == sources


def test_no_myst_is_left(converted):
    for name, nb in converted.items():
        left = edition.LEFTOVER.search(_markdown(nb))
        assert not left, f"{name}: Colab would show raw MyST: {left.group(0)!r}"


def test_code_cells_are_unchanged(converted):
    for name, nb in converted.items():
        original = json.loads((ROOT / name).read_text())
        assert _code(nb) == _code(original), f"{name}: the edition changed a code cell"


def test_figures_become_images_with_alt_text_and_the_website_number(converted):
    numbers = edition.figure_numbers()
    seen = 0
    for name, nb in converted.items():
        source = _markdown(json.loads((ROOT / name).read_text()))
        for match in edition.FENCE.finditer(source):
            if match.group("name") != "figure":
                continue
            seen += 1
            image = f"{edition.SITE}/_images/{match.group('arg').strip().split('/')[-1]}"
            label = re.search(r"^:name:\s*(\S+)", match.group("body"), re.M).group(1)
            assert f"]({image})" in _markdown(nb), f"{name}: {image} is not shown"
            word = "Figura" if name.startswith("pt/") else "Figure"
            assert f"*{word} {numbers[label]}. " in _markdown(nb), f"{name}: {label} unnumbered"
    assert seen >= 12


def test_citations_are_author_year_with_a_reference_list(converted):
    ch03 = converted["notebooks/ch03_self_attention.ipynb"]
    assert "(Vaswani et al., 2017)" in _markdown(ch03)
    last = "".join(ch03["cells"][-1]["source"])
    assert last.startswith("## References") and "Attention Is All You Need" in last
    # the Portuguese edition's: its own heading, the English notebook's computed numbers
    ch03_pt = converted["pt/notebooks/ch03_self_attention.ipynb"]
    assert "(Vaswani et al., 2017)" in _markdown(ch03_pt)
    last = "".join(ch03_pt["cells"][-1]["source"])
    assert last.startswith("## Referências") and "Attention Is All You Need" in last
    if "(a number this notebook computes below)" not in _markdown(ch03):  # values cached
        assert "(um número que este notebook calcula abaixo)" not in _markdown(ch03_pt)


def test_theorems_numbers_and_glue_are_converted():
    conv = edition.Converter(
        {"vaswani2017": {"short": "Vaswani et al.", "year": "2017", "full": "V."}},
        {"fig-x": "3.2"},
        {"notebooks/ch03_self_attention": {"acc": "0.98765"}},
    )
    conv.doc, conv.cited = "notebooks/ch07_absolute_positions", []
    text = conv.markdown(
        "```{prf:theorem} Shift\n:label: thm-x\n\nBody.\n```\n\n"
        "See {numref}`Figure %s <fig-x>` and {cite:t}`vaswani2017`; "
        "accuracy {glue:text}`/notebooks/ch03_self_attention::acc:.2f`, "
        "page {doc}`the exercise <../exercises/ch05_bpe>`."
    )
    assert text.startswith("**Theorem (Shift).** Body.")
    assert "See Figure 3.2 and Vaswani et al. (2017); accuracy 0.99," in text
    assert f"[the exercise]({edition.SITE}/exercises/ch05_bpe.html)" in text
    with pytest.raises(edition.ConversionError, match="no Colab form for the directive"):
        conv.markdown("```{mermaid}\ngraph\n```")
    with pytest.raises(edition.ConversionError, match="unknown citation"):
        conv.markdown("{cite:p}`nobody1999`")
    conv.strict = True
    with pytest.raises(edition.ConversionError, match="no computed value"):
        conv.markdown("{glue:text}`missing`")


def test_a_converted_chapter_renders_a_figure_and_a_citation(browser, converted, tmp_path):  # noqa: F811
    """nbconvert's HTML of the converted chapter 3, opened in Chromium (no network: the
    image's address is checked, not its pixels)."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.reads(json.dumps(converted["notebooks/ch03_self_attention.ipynb"]), 4)
    html, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    page = tmp_path / "ch03.html"
    page.write_text(html)
    browser.get(page.as_uri())
    images = browser.execute_script(
        "return [...document.querySelectorAll('.text_cell_render img')]"
        ".map(i => [i.getAttribute('src'), i.getAttribute('alt')])"
    )
    assert any(
        src.startswith(f"{edition.SITE}/_images/") and alt and len(alt) > 40 for src, alt in images
    ), images
    text = browser.execute_script("return document.body.innerText")
    assert "(Vaswani et al., 2017)" in text and "{cite" not in text
    assert "Figure 3.1" in text
