"""The book's own Sphinx extension.

- The ``course-hardware`` directive writes one paragraph naming the machine
  that built the book (CPU, cores, GPU, Python and PyTorch versions), so the
  execution times on the status page always come with their hardware.
- Each page's scripts are de-duplicated: sphinx-thebe (loaded by Jupyter
  Book) registers its inline configuration script twice, and the second copy
  raises "Identifier 'THEBE_JS_URL' has already been declared" in the browser.
"""

from __future__ import annotations

import datetime as _dt

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class CourseHardware(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from course_lib.runtime import describe_hardware

        when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        text = f"Built on {when} on: {describe_hardware()}."
        return [nodes.paragraph(text=text, classes=["course-hardware"])]


def _dedupe_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        # The same inline script is registered once with filename None and
        # once with "" (Sphinx normalises one path but not the other).
        attributes = tuple(sorted(getattr(script, "attributes", {}).items()))
        key = (getattr(script, "filename", script) or "", attributes)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: later handlers (MathJax) append to this list


def setup(app: Sphinx) -> dict:
    app.add_directive("course-hardware", CourseHardware)
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
