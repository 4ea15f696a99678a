"""Written alt text for the plots that notebook widgets draw (issue 30, section 3).

A plot drawn by a function given to ``widgets.interact`` is not an image output of its
cell: MyST-NB embeds the widget state, and in the browser the widget renderer draws the
plot as an ``<img>`` with no alt text inside the cell's output. The cell's
``mystnb.image.alt`` cannot reach it. Such a cell carries the text in its metadata,
``"course": {"widget_alt": "..."}`` (tests/test_alt_text.py requires it on every widget
cell). This extension writes it into the page as a hidden marker inside the cell's output,

    <div class="course-widget-alt" hidden data-alt="..."></div>

and book/_static/a11y.js sets it as the ``alt`` of every image inside that output, as the
widget draws them (tests/test_browser.py checks the result in Chromium).

MyST-NB 1.4 represents a code cell as a ``container`` node with ``nb_element ==
"cell_code"`` and the cell's metadata in ``cell_metadata``; its output is the child
container with ``nb_element == "cell_code_output"`` (myst_nb/core/render.py,
``render_nb_cell_code``).
"""

from __future__ import annotations

import html

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

MARKER_CLASS = "course-widget-alt"


def widget_alt(cell: nodes.Element) -> str | None:
    """The widget alt text of a MyST-NB code cell node, or None."""
    if not isinstance(cell, nodes.container) or cell.get("nb_element") != "cell_code":
        return None
    metadata = cell.get("cell_metadata") or {}
    course = metadata.get("course") if isinstance(metadata, dict) else None
    alt = course.get("widget_alt") if isinstance(course, dict) else None
    return alt.strip() if isinstance(alt, str) and alt.strip() else None


def marker_html(alt: str) -> str:
    """The hidden element that carries ``alt`` to book/_static/a11y.js."""
    return f'<div class="{MARKER_CLASS}" hidden data-alt="{html.escape(alt, quote=True)}"></div>'


def add_widget_alt_markers(document: nodes.Node) -> int:
    """Append the marker to the output of every code cell that has a widget alt text.

    A cell without an output container (not executed, or its output removed) gets none:
    there is no widget image to describe. Returns the number of markers added."""
    added = 0
    for cell in list(document.findall(nodes.container)):
        alt = widget_alt(cell)
        if alt is None:
            continue
        outputs = [c for c in cell.children if c.get("nb_element") == "cell_code_output"]
        if outputs:
            outputs[0] += nodes.raw("", marker_html(alt), format="html")
            added += 1
    return added


class WidgetAltMarkers(SphinxPostTransform):
    """Runs :func:`add_widget_alt_markers` on every HTML page."""

    default_priority = 400
    formats = ("html",)

    def run(self, **kwargs) -> None:
        add_widget_alt_markers(self.document)


def setup(app: Sphinx) -> dict:
    app.add_post_transform(WidgetAltMarkers)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
