"""The book's own Sphinx extension.

- The ``course-hardware`` directive writes one paragraph naming the machine
  that built the book (CPU, cores, GPU, Python and PyTorch versions), so the
  execution times on the status page always come with their hardware.
- The ``course-heavy-notebooks`` directive lists the notebooks whose last
  execution took longer than the 60 s budget (from the same execution data
  as MyST-NB's ``nb-exec-table``), so the status page names them itself.
- The ``course-sweep`` directive renders the last seed/thread sweep
  (``book/sweep.json``, written by ``python tools/sweep.py``): which
  notebook passed under which seed and thread count, in how many seconds, and
  the spread of every number the notebooks ``record``.
- The ``course-benchmarks`` directive renders the last side-by-side benchmark
  table (``book/benchmarks.json``, written by ``python -m benchmarks``): for
  each row the median of ours and of the trusted peer, their ratio with its
  spread over rounds, the goal and whether it is met, with the date and the
  hardware line of the run.
- The ``course-gpu-run`` directive renders the last GPU pass
  (``book/gpu_run.json``, written by ``tools/gpu_check.sh`` through
  ``tools/gpu_summary.py``): the GPU, each notebook's seconds and verdict with
  the reason of every failing cell, and the library tests' counts.
- The ``course-colab-run`` directive renders each chapter's seconds in the
  Colab-like environment of ``tests/test_colab.py`` (``book/colab_run.json``,
  written with ``COLAB_ALL_CHAPTERS=1 COLAB_TIMES=...``), with the machine and
  the environment, against the 60 s budget.
- The ``course-mutation`` directive renders the last mutation run
  (``book/mutation.json``, written by ``tools/mutation_report.py`` from
  ``mutmut run``'s results): per model module, the mutants killed, surviving,
  equivalent (with their reasons), reached by no test and not run, and the
  score.
- A display equation with a ``\\tag`` and a line break inside an environment
  (``cases``, ``pmatrix``, ``aligned``) gets its tag moved after the ``split``
  that Sphinx wraps it in, where MathJax accepts it (:func:`tag_outside_split`);
  otherwise the website shows it as a MathJax error.


- Lecture slides (``tools/slides.py``): at the end of every HTML build, one
  reveal.js deck per chapter is written under ``slides/`` from the executed
  notebooks of MyST-NB's execution cache (nothing is executed again); each
  chapter page links its deck below its title, and the ``course-slides``
  directive (the instructor guide) lists every deck.
- The plots that widgets draw get the written alt text of their cell's
  ``course.widget_alt`` metadata (``course_widget_alt.py``, with ``a11y.js``).
- PDF handouts (``tools/handouts.py``, run after the build): each chapter page
  also links its handout and its deck's PDF under ``handouts/``, and
  ``course-slides`` lists them with the whole book's PDF; the pages' print
  stylesheet ``print.css`` (``book/_static``) is what Chromium prints them with.
  The handouts are printed from the English pages; an edition's pages link those
  (``pdf:`` references), and say so.
- Each page's scripts are de-duplicated: sphinx-thebe (loaded by Jupyter
  Book) registers its inline configuration script twice, and the second copy
  raises "Identifier 'THEBE_JS_URL' has already been declared" in the browser.
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.osutil import relative_uri

BUDGET_SECONDS = 60.0
SWEEP_FILE = Path(__file__).resolve().parents[1] / "sweep.json"
BENCHMARKS_FILE = Path(__file__).resolve().parents[1] / "benchmarks.json"
GPU_RUN_FILE = Path(__file__).resolve().parents[1] / "gpu_run.json"
COLAB_RUN_FILE = Path(__file__).resolve().parents[1] / "colab_run.json"
MUTATION_FILE = Path(__file__).resolve().parents[1] / "mutation.json"
ROOT = Path(__file__).resolve().parents[2]
CHAPTER_DOC = re.compile(r"^notebooks/ch\d\d_\w+$")
logger = logging.getLogger(__name__)


class CourseHardware(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from course_lib.runtime import describe_hardware

        text = f"Hardware of the build that executed the notebooks: {describe_hardware()}."
        return [nodes.paragraph(text=text, classes=["course-hardware"])]


class _HeavyNotebooks(nodes.General, nodes.Element):
    """Placeholder, replaced once every notebook's execution data is known."""


class CourseHeavyNotebooks(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from myst_nb.ext.execution_tables import METADATA_KEY
        from myst_nb.sphinx_ import NbMetadataCollector

        # Marks this page as holding an execution table, so MyST-NB rewrites
        # it whenever a notebook is executed again.
        NbMetadataCollector.set_doc_data(self.env, self.env.docname, METADATA_KEY, True)
        return [_HeavyNotebooks()]


class _FillHeavyNotebooks(SphinxPostTransform):
    default_priority = 8  # like MyST-NB's table: before references are resolved

    def run(self, **kwargs) -> None:
        from myst_nb.sphinx_ import NbMetadataCollector

        data = NbMetadataCollector.get_doc_data(self.env)
        heavy = []
        for docname in sorted(data):
            runtime = (data[docname].get("exec_data") or {}).get("runtime")
            if runtime is not None and runtime > BUDGET_SECONDS:
                heavy.append(f"{docname}: {runtime:.0f} s")
        for node in self.document.findall(_HeavyNotebooks):
            if heavy:
                items = nodes.bullet_list()
                for line in heavy:
                    items += nodes.list_item("", nodes.paragraph(text=line))
                node.replace_self(items)
            else:
                text = f"None: every notebook ran within {BUDGET_SECONDS:.0f} s."
                node.replace_self(nodes.paragraph(text=text))


_TAG = re.compile(r"\\tag\*?\{[^{}]*\}")


def tag_outside_split(latex: str) -> str | None:
    r"""A display equation whose ``\tag`` MathJax would reject on the website, rewritten.

    Sphinx's MathJax writer wraps any display equation containing ``\\`` in
    ``\begin{split}``, even when every ``\\`` sits inside an environment of its own
    (``cases``, ``pmatrix``, ``aligned``); MathJax forbids ``\tag`` inside ``split``
    and shows the equation as an error.  Returns the equation with its tag moved
    after the ``split`` (where MathJax allows it), or ``None`` when it needs no change.
    """
    tags = _TAG.findall(latex)
    if "\\\\" not in latex or len(tags) != 1 or "\n\n" in latex.strip():
        return None
    return "\\begin{split}" + _TAG.sub("", latex).strip() + "\\end{split}" + tags[0]


class _TagOutsideSplit(SphinxPostTransform):
    """Rewrites every display equation :func:`tag_outside_split` applies to, for MathJax."""

    default_priority = 400
    formats = ("html",)

    def run(self, **kwargs) -> None:
        start, end = self.config.mathjax_display
        for node in self.document.findall(nodes.math_block):
            if node.get("nowrap") or node.get("number"):
                continue
            fixed = tag_outside_split(node.astext())
            if fixed is not None:
                node["nowrap"] = True  # written as is, between MathJax's delimiters
                node.clear()
                node += nodes.Text(start + fixed + end)


def _sweep_tables(data: dict) -> str:
    """HTML for the sweep: notebook x (seed, threads) -> pass/fail and seconds; recorded numbers."""
    runs = data.get("runs", [])
    if not runs:
        return "<p>No sweep has been recorded yet.</p>"
    settings = sorted({(r["threads"], r["seed"]) for r in runs})
    cells = {(r["notebook"], r["threads"], r["seed"]): r for r in runs}
    notebooks = sorted({r["notebook"] for r in runs})
    head = "".join(f"<th>seed {s}<br>{t} thread{'s' * (t > 1)}</th>" for t, s in settings)
    rows = []
    for nb in notebooks:
        tds = []
        for t, s in settings:
            r = cells.get((nb, t, s))
            if r is None:
                tds.append("<td>-</td>")
            elif r["ok"]:
                tds.append(f'<td class="sweep-pass">pass {r["seconds"]:.0f} s</td>')
            else:
                why = html.escape(r.get("error") or "failed")
                tds.append(f'<td class="sweep-fail" title="{why}"><b>FAIL</b></td>')
        rows.append(f"<tr><td>{html.escape(nb)}</td>{''.join(tds)}</tr>")
    failed = [r for r in runs if not r["ok"]]
    dates = sorted({r.get("date", "?") for r in runs})
    hardware = sorted({r.get("hardware", "?") for r in runs})
    parts = [
        f"<p>{len(runs) - len(failed)} of {len(runs)} runs passed. "
        f"Run {html.escape(dates[0])} to {html.escape(dates[-1])} on "
        f"{html.escape('; '.join(hardware))}.</p>",
        '<table class="table course-sweep"><thead><tr><th>notebook</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>",
    ]
    if failed:
        items = "".join(
            f"<li>{html.escape(r['notebook'])}, seed {r['seed']}, {r['threads']} threads: "
            f"{html.escape(r.get('error') or '')}</li>"
            for r in failed
        )
        parts.append(f"<p>Failures:</p><ul>{items}</ul>")
    results = data.get("results", {})
    if results:
        body = []
        for nb in sorted(results):
            for name, st in sorted(results[nb].items()):
                body.append(
                    f"<tr><td>{html.escape(nb)}</td><td><code>{html.escape(name)}</code></td>"
                    f"<td>{st['n']}</td><td>{st['mean']:.4g} &plusmn; {st['std']:.2g}</td>"
                    f"<td>{st['min']:.4g} to {st['max']:.4g}</td></tr>"
                )
        parts.append(
            '<table class="table course-sweep-results"><thead><tr><th>notebook</th>'
            "<th>recorded number</th><th>runs</th><th>mean &plusmn; std</th><th>range</th>"
            f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
        )
    return "\n".join(parts)


class CourseSweep(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(SWEEP_FILE))
        data = json.loads(SWEEP_FILE.read_text()) if SWEEP_FILE.exists() else {}
        return [nodes.raw("", _sweep_tables(data), format="html")]


def _fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"


def _benchmark_table(data: dict) -> str:
    """HTML for the benchmarks: one row per comparison, ours vs the peer, ratio, goal, met."""
    rows = data.get("rows", [])
    if not rows:
        return "<p>No benchmark has been recorded yet.</p>"
    body = []
    for r in rows:
        esc = {k: html.escape(str(r.get(k, ""))) for k in ("what", "size", "ours", "peer")}
        head = (
            f"<td>{esc['what']}</td><td>{esc['size']}</td>"
            f"<td>{esc['ours']}</td><td>{esc['peer']}</td>"
        )
        if r.get("skipped"):
            why = html.escape(r["skipped"])
            body.append(f'<tr class="bench-skipped">{head}<td colspan="5">skipped: {why}</td></tr>')
            continue
        unit = html.escape(r.get("unit", ""))
        ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.2f}&times;"
        if r.get("ratio_min") is not None:
            ratio += f" ({r['ratio_min']:.2f} to {r['ratio_max']:.2f})"
        if r.get("goal_ratio") is not None:
            goal = f"&le; {r['goal_ratio']:g}&times;"
        elif r.get("goal_value") is not None:
            goal = f"&le; {r['goal_value']:g} {unit}"
        else:
            goal = "report only"
        met = {True: "yes", False: "<b>no</b>"}.get(r.get("met"), "-")
        css = {True: "bench-met", False: "bench-missed"}.get(r.get("met"), "bench-report")
        body.append(
            f'<tr class="{css}">{head}<td>{_fmt_value(r.get("ours_value"), unit)}</td>'
            f"<td>{_fmt_value(r.get('peer_value'), unit)}</td><td>{ratio}</td>"
            f"<td>{goal}</td><td>{met}</td></tr>"
        )
    judged = [r for r in rows if r.get("met") is not None]
    met = sum(1 for r in judged if r["met"])
    threads = data.get("threads", "?")
    intro = (
        f"<p>{met} of {len(judged)} goals met. Run {html.escape(str(data.get('date', '?')))} "
        f"with <code>{html.escape(str(data.get('command', 'python -m benchmarks')))}</code> on "
        f"{html.escape(str(data.get('hardware', '?')))}, {html.escape(str(threads))} thread(s), "
        f"device {html.escape(str(data.get('device', 'cpu')))}.</p>"
    )
    table = (
        '<table class="table course-benchmarks"><thead><tr><th>benchmark</th><th>size</th>'
        "<th>ours</th><th>peer</th><th>ours (median)</th><th>peer (median)</th>"
        "<th>ratio ours / peer (range over rounds)</th><th>goal</th><th>met</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )
    return intro + "\n" + table


class CourseBenchmarks(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(BENCHMARKS_FILE))
        data = json.loads(BENCHMARKS_FILE.read_text()) if BENCHMARKS_FILE.exists() else {}
        return [nodes.raw("", _benchmark_table(data), format="html")]


def _gpu_run_table(data: dict) -> str:
    """The last GPU pass: one row per notebook, its seconds and verdict."""
    if not data:
        return "<p>No GPU pass has been recorded yet.</p>"
    esc = html.escape
    nb, unit = data["notebook_counts"], data["unit_counts"]
    intro = (
        f"<p>GPU pass of {esc(data['date'])} on {esc(data['gpu'])} "
        f"({esc(data.get('python_torch', ''))}; commit {esc(data.get('commit', '?'))}), "
        f"{data['workers']} notebooks at a time: notebook cells {nb['passed']} passed, "
        f"{nb['failed']} failed; library tests {unit['passed']} passed, {unit['failed']} failed."
        " Seconds are summed cell times while the notebooks shared the machine.</p>"
    )
    body = []
    for row in data["notebooks"]:
        verdict = "passed" if row["ok"] else "<br>".join(esc(f) for f in row["failures"])
        body.append(
            f"<tr><td>{esc(row['notebook'])}</td><td>{row['seconds']:.1f}</td>"
            f"<td>{verdict}</td></tr>"
        )
    unit_rows = "".join(f"<li>{esc(name)}</li>" for name in data.get("unit_failures", []))
    return (
        intro
        + "<table class='course-gpu-run'><thead><tr><th>notebook</th><th>seconds</th>"
        + f"<th>result</th></tr></thead><tbody>{''.join(body)}</tbody></table>"
        + (f"<p>Failed library tests:</p><ul>{unit_rows}</ul>" if unit_rows else "")
    )


class CourseGpuRun(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(GPU_RUN_FILE))
        data = json.loads(GPU_RUN_FILE.read_text()) if GPU_RUN_FILE.exists() else {}
        return [nodes.raw("", _gpu_run_table(data), format="html")]


def _colab_run_table(data: dict, digest: Callable[[str], str] | None = None) -> str:
    """Each chapter's seconds in the Colab-like environment, against the budget.

    A time whose notebook's code has changed since it was measured (its recorded
    ``code`` digest differs from ``digest(path)``, by default
    ``course_lib.long_runs.code_digest``) is marked as such.
    """
    if not data.get("notebooks"):
        return "<p>No run in the Colab-like environment has been recorded yet.</p>"
    if digest is None:
        from course_lib.long_runs import code_digest as digest
    esc = html.escape
    rows = sorted(data["notebooks"].items())
    times = sorted(seconds for _, seconds in rows)
    median = times[len(times) // 2] if len(times) % 2 else sum(times[len(times) // 2 - 1 :][:2]) / 2
    over = [name for name, seconds in rows if seconds > BUDGET_SECONDS]
    recorded = data.get("code", {})
    stale = {name for name, _ in rows if name in recorded and recorded[name] != digest(name)}
    intro = (
        f"<p>Run of {esc(data['date'])} in {esc(data['environment'])}, on "
        f"{esc(data['hardware'])}. Median {median:.0f} s over {len(rows)} notebooks; "
        + (
            f"over the {BUDGET_SECONDS:.0f} s budget: {esc(', '.join(over))}."
            if over
            else f"every one within the {BUDGET_SECONDS:.0f} s budget."
        )
        + (
            f" The code of {len(stale)} of them has changed since: their times are "
            "marked <em>code changed since</em> and wait for the next run."
            if stale
            else ""
        )
        + "</p>"
    )

    def verdict(name: str, seconds: float) -> str:
        budget = "over budget" if seconds > BUDGET_SECONDS else "ok"
        return budget + ("; code changed since" if name in stale else "")

    body = "".join(
        f"<tr><td>{esc(name)}</td><td>{seconds:.1f}</td><td>{verdict(name, seconds)}</td></tr>"
        for name, seconds in rows
    )
    return (
        intro
        + "<table class='course-colab-run'><thead><tr><th>notebook</th><th>seconds</th>"
        + f"<th>budget</th></tr></thead><tbody>{body}</tbody></table>"
    )


class CourseColabRun(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(COLAB_RUN_FILE))
        data = json.loads(COLAB_RUN_FILE.read_text()) if COLAB_RUN_FILE.exists() else {}
        return [nodes.raw("", _colab_run_table(data), format="html")]


def _mutation_table(data: dict) -> str:
    """The last mutation run: one row per model module, its counts and score."""
    if not data.get("modules"):
        return "<p>No mutation run recorded.</p>"
    esc = html.escape
    modules = data["modules"]
    not_run = data.get("not_run", [])
    intro = (
        f"<p>Mutation run of {esc(data['date'])} (mutmut {esc(data.get('mutmut', '?'))}, "
        f"commit {esc(data.get('commit', '?'))}). Score = (killed + timeout) / (mutants run "
        "&minus; equivalent); a mutant that no test reaches counts as surviving."
        + (f" Not run yet: {esc(', '.join(not_run))}." if not_run else "")
        + "".join(
            f" {esc(name)}: from the run at commit {esc(commit)} (its code unchanged since)."
            for name, commit in sorted(data.get("carried", {}).items())
        )
        + "</p>"
    )
    cols = ("killed", "survived", "equivalent", "timeout", "no_tests", "not_run", "total")
    head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in ("module", *cols, "score"))
    body = []
    for name, c in sorted(modules.items()):
        score = "not run" if c.get("score") is None else f"{c['score']:.1f}%"
        cells = "".join(f"<td>{c.get(k, 0)}</td>" for k in cols)
        body.append(f"<tr><td>{esc(name)}</td>{cells}<td>{score}</td></tr>")
    survivors = "".join(
        f"<li>{esc(module)}: {esc(', '.join(names))}</li>"
        for module, names in sorted(data.get("survivors", {}).items())
    )
    equivalent = "".join(
        f"<li><code>{esc(e['mutant'])}</code>: {esc(e['reason'])}</li>"
        for e in data.get("equivalent", [])
    )
    return (
        intro
        + f"<table class='course-mutation'><thead><tr>{head}</tr></thead>"
        + f"<tbody>{''.join(body)}</tbody></table>"
        + (
            f"<p>Surviving mutants (no test fails on them):</p><ul>{survivors}</ul>"
            if survivors
            else ""
        )
        + (
            f"<p>Equivalent mutants (they compute the same thing; not scored):</p><ul>{equivalent}</ul>"
            if equivalent
            else ""
        )
    )


class CourseMutation(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(MUTATION_FILE))
        data = json.loads(MUTATION_FILE.read_text()) if MUTATION_FILE.exists() else {}
        return [nodes.raw("", _mutation_table(data), format="html")]


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


@functools.cache
def _tool(name: str):
    """A maintainer tool of tools/ as a module (tools/slides.py: the lecture plans and
    decks; tools/handouts.py: the PDFs)."""
    spec = importlib.util.spec_from_file_location(f"course_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _slides_tool():
    return _tool("slides")


def _site_files(chapter: str) -> dict[str, str]:
    """A chapter's deck and its two PDFs, as paths under the site's root."""
    handouts = _tool("handouts")
    return {
        "deck": f"slides/{_slides_tool().deck_name(chapter)}",
        "slides PDF": f"{handouts.HANDOUTS}/{handouts.deck_pdf_name(chapter)}",
        "handout": f"{handouts.HANDOUTS}/{handouts.handout_name(chapter)}",
    }


def _site_uri(app: Sphinx, docname: str, target: str) -> str:
    """The relative address of ``target`` (a path under the site's root) from ``docname``."""
    return relative_uri(app.builder.get_target_uri(docname), target)


def _pdf_uri(app: Sphinx, docname: str, target: str) -> str:
    """The relative address of a PDF under the English site's root: the handouts are
    printed from the English pages, and an edition (under ``<lang>/``) links those."""
    uri = _site_uri(app, docname, target)
    return f"../{uri}" if getattr(app.config, "course_edition", "") else uri


def _words(app: Sphinx) -> dict[str, str]:
    """This build's words: English, or those of the edition it builds (course_i18n)."""
    lang = getattr(app.config, "course_edition", "")
    if not lang:
        return {
            "lecture_slides": "Lecture slides",
            "lecture_slides_note": " (reveal.js; press S for the speaker notes)",
            "pdf": "; PDF: ",
            "slides_pdf": "slides",
            "chapter_handout": "chapter handout",
            "book_pdf": "The whole book in one PDF: ",
            "book_pdf_note": " (every page of the contents in order, one bookmark per page).",
        }
    from course_i18n import words

    return words(lang)


def _link_chapter_deck(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Below a chapter's title: links to its lecture slides, their PDF and its handout."""
    if app.builder.format != "html" or not CHAPTER_DOC.match(docname):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None or not isinstance(section[0], nodes.title):
        return
    said, files = _words(app), _site_files(docname)
    deck = _site_uri(app, docname, files["deck"])
    link = nodes.reference("", said["lecture_slides"], refuri=deck)
    para = nodes.paragraph("", "", link, classes=["course-slides-link"])
    para += nodes.Text(said["lecture_slides_note"] + said["pdf"])
    para += nodes.reference(
        "", said["slides_pdf"], refuri=_pdf_uri(app, docname, files["slides PDF"])
    )
    para += nodes.Text(", ")
    para += nodes.reference(
        "", said["chapter_handout"], refuri=_pdf_uri(app, docname, files["handout"])
    )
    section.insert(1, para)


class CourseSlides(SphinxDirective):
    """Every chapter's lecture deck, its PDF and the chapter's handout, then the whole
    book's PDF (the instructor guide)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        said = _words(self.env.app)
        items = nodes.bullet_list(classes=["course-slides-list"])
        for notebook in _slides_tool().chapters():
            doc = notebook.relative_to(ROOT).with_suffix("").as_posix()
            files = _site_files(doc)
            para = nodes.paragraph()
            para += nodes.reference("", notebook.stem, refuri=f"site:{files['deck']}")
            para += nodes.Text(f" ({said['pdf'].removeprefix('; ')}")
            para += nodes.reference("", said["slides_pdf"], refuri=f"pdf:{files['slides PDF']}")
            para += nodes.Text(", ")
            para += nodes.reference("", said["chapter_handout"], refuri=f"pdf:{files['handout']}")
            para += nodes.Text(")")
            items += nodes.list_item("", para)
        handouts = _tool("handouts")
        book = nodes.paragraph(classes=["course-book-pdf"])
        book += nodes.Text(said["book_pdf"])
        book += nodes.reference(
            "", handouts.BOOK_PDF, refuri=f"pdf:{handouts.HANDOUTS}/{handouts.BOOK_PDF}"
        )
        book += nodes.Text(said["book_pdf_note"])
        return [items, book]


def _resolve_deck_links(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """``site:PATH`` references (a path under the site's root) made relative to the page."""
    for ref in doctree.findall(nodes.reference):
        uri = ref.get("refuri", "")
        if uri.startswith("site:"):
            ref["refuri"] = _site_uri(app, docname, uri.removeprefix("site:"))
        elif uri.startswith("pdf:"):
            ref["refuri"] = _pdf_uri(app, docname, uri.removeprefix("pdf:"))


def _write_decks(app: Sphinx, exception: Exception | None) -> None:
    """One reveal.js deck per chapter under slides/, from the execution cache."""
    if exception is not None or app.builder.format != "html":
        return
    cache = app.env.mystnb_config.execution_cache_path
    cache = Path(cache) if cache else Path(app.outdir).parent / ".jupyter_cache"
    slides = _slides_tool()
    lang = getattr(app.config, "course_edition", "") or None
    try:
        written = slides.export(Path(app.outdir) / "slides", cache.resolve(), lang=lang)
    except slides.PlanError as exc:
        logger.warning(f"lecture slides not written: {exc}")
        return
    logger.info(f"lecture slides: {len(written)} decks written to {Path(app.outdir) / 'slides'}")


def assets_digest(book: Path = ROOT / "book") -> str:
    """A digest of the book's own extensions (``_ext/*.py``), scripts and stylesheets
    (``_static/*.js``, ``*.css``). It is a config value that rebuilds HTML, so changing any
    of them makes Sphinx write every page again: an incremental build otherwise keeps the
    pages written before, which link the old set of files (no print.css, say)."""
    files = [*book.glob("_ext/*.py"), *book.glob("_static/*.js"), *book.glob("_static/*.css")]
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(book).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def setup(app: Sphinx) -> dict:
    app.add_config_value("course_assets_digest", assets_digest(), "html")
    app.add_directive("course-hardware", CourseHardware)
    app.add_directive("course-heavy-notebooks", CourseHeavyNotebooks)
    app.add_directive("course-sweep", CourseSweep)
    app.add_directive("course-benchmarks", CourseBenchmarks)
    app.add_directive("course-gpu-run", CourseGpuRun)
    app.add_directive("course-colab-run", CourseColabRun)
    app.add_directive("course-mutation", CourseMutation)
    app.add_directive("course-slides", CourseSlides)
    app.connect("doctree-resolved", _link_chapter_deck)
    app.connect("doctree-resolved", _resolve_deck_links)
    app.connect("build-finished", _write_decks)
    app.add_node(_HeavyNotebooks)
    app.add_post_transform(_FillHeavyNotebooks)
    app.add_post_transform(_TagOutsideSplit)
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    app.add_js_file("a11y.js")  # book/_static: names the theme's buttons and the sliders
    app.setup_extension("course_widget_alt")  # the widget plots' alt text, for a11y.js
    app.add_css_file("print.css", media="print")  # book/_static: the pages on paper
    app.add_js_file("print.js")  # book/_static: printed in the light theme
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
