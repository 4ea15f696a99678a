"""The widget plots' alt text: book/_ext/course_widget_alt.py (issue 30, section 3).

A cell's ``metadata.course.widget_alt`` must reach the page as a hidden marker inside that
cell's output, where book/_static/a11y.js finds it and sets it as the alt of the widget's
images (that last step runs in the browser: tests/test_browser.py). Here: the transform on a
hand-made doctree, and a small Sphinx + MyST-NB build of a two-cell notebook, which checks
the assumption the transform rests on (MyST-NB's cell container keeps the cell's metadata)."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.utils import new_document

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location(
    "course_widget_alt", ROOT / "book/_ext/course_widget_alt.py"
)
widget_alt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(widget_alt)

ALT = 'Two "schedules" against the update s: warmup & decay <fast>'


def _cell(metadata: dict, with_output: bool = True) -> nodes.container:
    cell = nodes.container(nb_element="cell_code", cell_metadata=metadata, classes=["cell"])
    cell += nodes.container(nb_element="cell_code_source", classes=["cell_input"])
    if with_output:
        cell += nodes.container(nb_element="cell_code_output", classes=["cell_output"])
    return cell


def test_the_marker_goes_into_the_output_of_cells_with_a_widget_alt():
    document = new_document("page", get_default_settings())
    with_alt = _cell({"course": {"widget_alt": ALT}, "slideshow": {"slide_type": "subslide"}})
    plain = _cell({"mystnb": {"image": {"alt": "a plot drawn by the cell itself"}}})
    no_output = _cell({"course": {"widget_alt": ALT}}, with_output=False)
    document += [with_alt, plain, no_output]

    assert widget_alt.add_widget_alt_markers(document) == 1
    marker = with_alt[-1][-1]  # the last child of the cell's output container
    assert isinstance(marker, nodes.raw) and marker["format"] == "html"
    assert marker.astext() == widget_alt.marker_html(ALT)
    # the text survives as an attribute value: quotes, ampersands and brackets escaped
    assert "&quot;schedules&quot;" in marker.astext() and "&lt;fast&gt;" in marker.astext()
    assert " hidden " in marker.astext() and 'class="course-widget-alt"' in marker.astext()
    # the cell's own children and order are kept (MyST-NB's hide-cell logic reads them)
    assert [c.get("nb_element") for c in with_alt.children] == [
        "cell_code_source",
        "cell_code_output",
    ]
    assert not list(plain.findall(nodes.raw)) and not list(no_output.findall(nodes.raw))


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"course": {}},
        {"course": {"widget_alt": "  "}},
        {"course": "x"},
        {"course": {"widget_alt": 3}},
    ],
)
def test_no_marker_without_a_written_widget_alt(metadata):
    assert widget_alt.widget_alt(_cell(metadata)) is None


def test_a_myst_nb_build_writes_the_marker_into_the_cell_output(tmp_path):
    """Sphinx with MyST-NB (no execution) on a notebook whose first cell has a widget alt."""
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['myst_nb', 'course_widget_alt']\n"
        "nb_execution_mode = 'off'\n"
        "exclude_patterns = ['_build']\n"
    )
    output = {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/plain": ["interactive(children=(IntSlider(value=1),))"]},
    }
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "cells": [
            {"cell_type": "markdown", "id": "m0", "metadata": {}, "source": ["# Page"]},
            {
                "cell_type": "code",
                "id": "w0",
                "metadata": {"course": {"widget_alt": ALT}},
                "execution_count": 1,
                "outputs": [output],
                "source": ["widgets.interact(show, x=(0, 2))"],
            },
            {
                "cell_type": "code",
                "id": "p0",
                "metadata": {},
                "execution_count": 2,
                "outputs": [output],
                "source": ["print(1)"],
            },
        ],
    }
    (src / "index.ipynb").write_text(json.dumps(nb))
    out = tmp_path / "html"
    app = Sphinx(src, src, out, tmp_path / "doctrees", "html", status=None, warning=None)
    app.build()
    page = (out / "index.html").read_text()
    markers = re.findall(r'<div class="course-widget-alt" hidden data-alt="([^"]*)"></div>', page)
    assert markers == [widget_alt.html.escape(ALT, quote=True)]
    # inside the first cell's output, after what the cell printed
    outputs = re.split(r'<div class="cell_output docutils container">', page)[1:]
    assert len(outputs) == 2 and "course-widget-alt" in outputs[0]
    assert "course-widget-alt" not in outputs[1]
