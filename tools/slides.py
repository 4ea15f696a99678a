"""Lecture slides from the chapter notebooks: the plan, its metadata, the decks.

Each chapter has a lecture plan, ``book/slides/chNN.yml``: which cells a
50-minute lecture shows and how (``slide``, ``subslide``, ``fragment``,
``-`` to continue the current slide, ``notes`` for the speaker, ``skip``).
The plan is data so that it survives edits to the cells' source; this tool
writes it into the notebooks as Jupyter's standard slide metadata
(``metadata.slideshow.slide_type``), which RISE (``jupyterlab-rise``, the
``lecture`` extra) reads to present the notebook live, and which nbconvert's
slides exporter reads to write the offline decks of the website.

A plan file::

    notebook: notebooks/ch06_attention_geometry.ipynb
    default: skip          # every cell the plan does not list
    cells:
      698ff1cb: slide      # a cell id and its slide type
      060dd74d: {type: subslide, code: show}

Per-cell options, for the offline deck only (live, RISE shows the cell as it
is and scrolls):

- ``code``: ``hide`` (default) shows only the outputs of a code cell,
  ``show`` its source too;
- ``show``: ``condensed`` (default) keeps a Markdown cell's headings,
  displayed equations, figures and short lists on the slide and moves its
  prose paragraphs to the slide's speaker notes; ``all`` keeps everything;
- ``outputs``: ``all`` (default), or ``figures``: only the plots and widgets
  of a code cell (not the library source it shows, its tables or its text),
  for a cell whose outputs together do not fit one slide.

Commands::

    python tools/slides.py apply          # write every plan into its notebook
    python tools/slides.py check          # exit 1 if a notebook and its plan disagree
    python tools/slides.py export --out _build/html/slides [--cache _build/.jupyter_cache]
    python tools/slides.py draft NOTEBOOK # print a first plan (headings, figures, plots)

``export`` never executes a notebook: it reads the executed copy from the
book's execution cache (jupyter-cache, filled by ``jupyter-book build`` or by
the test suite) and fails, naming the notebook, if the cache has none that
matches the notebook's code. The book's Sphinx extension calls it at the end
of every HTML build, so ``jupyter-book build .`` writes ``slides/`` beside the
pages.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
PLAN_DIR = ROOT / "book" / "slides"
TEMPLATE_DIR = ROOT / "book" / "_ext" / "slides_template"
DEFAULT_CACHE = ROOT / "_build" / ".jupyter_cache"
SLIDE_TYPES = ("slide", "subslide", "fragment", "-", "notes", "skip")
#: Slides per deck (top-level slides and their vertical sub-slides together)
#: that fit a 50-minute lecture: at least one every 6 minutes, at most ~one a minute.
MIN_SLIDES, MAX_SLIDES = 8, 50
#: A list longer than this (characters) goes to the notes of a condensed slide.
LIST_CHARS = 600


class PlanError(ValueError):
    """A plan that does not match its notebook, or a notebook with no plan."""


def _load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"_course_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------


class CellPlan(NamedTuple):
    type: str
    code: str = "hide"
    show: str = "condensed"
    outputs: str = "all"


def chapters(root: Path = ROOT) -> list[Path]:
    """Every chapter notebook (notebooks/chNN_*.ipynb), in order."""
    return sorted((root / "notebooks").glob("ch[0-9][0-9]_*.ipynb"))


def english(notebook: Path) -> str:
    """The English chapter a notebook is (itself, or the one an edition such as
    ``pt/notebooks/...`` translates), as a repository path."""
    rel = notebook.relative_to(ROOT).as_posix()
    return rel.split("/", 1)[1] if not rel.startswith("notebooks/") else rel


def plan_path(notebook: Path) -> Path:
    return PLAN_DIR / f"{notebook.name[:4]}.yml"


def load_plan(notebook: Path) -> tuple[str, dict[str, CellPlan]]:
    """(default type, cell id -> CellPlan) of a chapter; PlanError if malformed."""
    path = plan_path(notebook)
    if not path.exists():
        raise PlanError(
            f"{notebook.name} has no lecture plan: write {path.relative_to(ROOT)} "
            f"(start from `python tools/slides.py draft {notebook.relative_to(ROOT)}`)"
        )
    data = yaml.safe_load(path.read_text()) or {}
    where = path.relative_to(ROOT)
    if data.get("notebook") != english(notebook):
        raise PlanError(f"{where}: `notebook:` must be {english(notebook)}")
    default = data.get("default", "skip")
    if default not in SLIDE_TYPES:
        raise PlanError(f"{where}: default {default!r} is not one of {SLIDE_TYPES}")
    cells = {}
    for cell_id, spec in (data.get("cells") or {}).items():
        if not isinstance(cell_id, str):
            raise PlanError(
                f"{where}: cell id {cell_id!r} was read as a number: quote it (YAML reads "
                "an id such as 03533647 as an octal integer)"
            )
        if isinstance(spec, str):
            spec = {"type": spec}
        if not isinstance(spec, dict) or spec.get("type") not in SLIDE_TYPES:
            raise PlanError(f"{where}: cell {cell_id}: type must be one of {SLIDE_TYPES}")
        unknown = set(spec) - {"type", "code", "show", "outputs"}
        if unknown or spec.get("code", "hide") not in ("hide", "show"):
            raise PlanError(
                f"{where}: cell {cell_id}: options are code: hide|show, "
                "show: condensed|all, outputs: all|figures"
            )
        if spec.get("outputs", "all") not in ("all", "figures"):
            raise PlanError(f"{where}: cell {cell_id}: outputs must be all or figures")
        if spec.get("show", "condensed") not in ("condensed", "all"):
            raise PlanError(f"{where}: cell {cell_id}: show must be condensed or all")
        cells[str(cell_id)] = CellPlan(**spec)
    return default, cells


def _read(notebook: Path) -> dict:
    return json.loads(notebook.read_text())


def _write(notebook: Path, nb: dict) -> None:
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def planned_types(notebook: Path, nb: dict | None = None) -> dict[str, str]:
    """Cell id -> the slide type the plan gives it (unlisted cells: the plan's default)."""
    nb = nb or _read(notebook)
    default, cells = load_plan(notebook)
    ids = [c["id"] for c in nb["cells"]]
    missing = sorted(set(cells) - set(ids))
    if missing:
        raise PlanError(
            f"{plan_path(notebook).relative_to(ROOT)} names cells that {notebook.name} "
            f"no longer has: {missing}; re-plan them (the cell ids of the notebook are kept "
            "across edits, so a missing id is a deleted or replaced cell)"
        )
    return {i: (cells[i].type if i in cells else default) for i in ids}


def problems(notebook: Path) -> list[str]:
    """What is wrong between a notebook's slide metadata and its plan (empty: nothing)."""
    nb = _read(notebook)
    try:
        types = planned_types(notebook, nb)
    except PlanError as exc:
        return [str(exc)]
    out = []
    for cell in nb["cells"]:
        have = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
        if have != types[cell["id"]]:
            out.append(
                f"{notebook.name}: cell {cell['id']} has slide_type {have!r}, the plan says "
                f"{types[cell['id']]!r}: run `python tools/slides.py apply`"
            )
    shown = [t for t in types.values() if t not in ("skip", "notes")]
    if shown and shown[0] != "slide":
        out.append(f"{notebook.name}: the first cell shown must be a `slide`, not {shown[0]!r}")
    return out


def apply(notebook: Path) -> bool:
    """Write the plan's slide types into the notebook; True if the file changed."""
    nb = _read(notebook)
    types = planned_types(notebook, nb)
    before = json.dumps(nb)
    for cell in nb["cells"]:
        meta = cell.setdefault("metadata", {})
        meta["slideshow"] = {**meta.get("slideshow", {}), "slide_type": types[cell["id"]]}
    if json.dumps(nb) == before:
        return False
    _write(notebook, nb)
    return True


# ---------------------------------------------------------------------------
# A first plan for a chapter (edited by hand afterwards)
# ---------------------------------------------------------------------------


def _summary(cell: dict) -> str:
    text = "".join(cell["source"]).strip()
    first = text.splitlines()[0] if text else ""
    return re.sub(r"\s+", " ", first)[:70]


def draft(notebook: Path) -> str:
    """A plan in YAML: headings and figures on slides, plots and widgets after them, prose to notes."""
    nb = _read(notebook)
    lines = [
        f"# Lecture plan for {notebook.name} (python tools/slides.py; see its docstring).",
        f"notebook: {notebook.relative_to(ROOT).as_posix()}",
        "default: skip  # cells not listed: setup, library source, long checks, exercises",
        "cells:",
    ]
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        kind = None
        if "remove-cell" in cell.get("metadata", {}).get("tags", []):
            kind = None
        elif cell["cell_type"] == "markdown":
            if text.startswith("# "):
                kind = "slide"
            elif text.startswith("## Exercises"):
                kind = None
            elif text.startswith("## "):
                kind = "slide"
            elif text.startswith("### ") or re.search(r"\{figure\}|\{prf:|\$\$", text):
                kind = "subslide"
            else:
                kind = "notes"
        elif re.search(r"widgets\.(interact|interactive)\b|plt\.|\.plot\(|imshow", text):
            kind = "subslide"
        if kind:
            lines.append(f'  "{cell["id"]}": {kind}  # {_summary(cell)}')
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Offline decks
# ---------------------------------------------------------------------------

_FENCE_OPEN = re.compile(r"^(```+|:::+)")


def _blocks(text: str) -> list[str]:
    """Markdown split into blocks at blank lines, keeping fences and $$ ... $$ whole."""
    blocks, current, fence, in_math = [], [], None, False
    for line in text.splitlines():
        stripped = line.strip()
        if fence:
            current.append(line)
            if stripped.startswith(fence) and stripped.strip("`:") == "":
                fence = None
            continue
        if in_math:
            current.append(line)
            if stripped.endswith("$$"):
                in_math = False
            continue
        match = _FENCE_OPEN.match(stripped)
        if match:
            fence = match.group(1)
            current.append(line)
            continue
        if stripped.startswith("$$") and not (len(stripped) > 2 and stripped.endswith("$$")):
            in_math = True
            current.append(line)
            continue
        if not stripped:
            if current:
                blocks.append("\n".join(current))
            current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _on_slide(block: str) -> bool:
    """Whether a block of a condensed slide stays on the slide (else: the speaker notes)."""
    first = block.lstrip()
    if first.startswith("#") or first.startswith("$$") or first.startswith("\\begin"):
        return True
    if re.match(r"^(```+|:::+)\s*\{figure\}", first):
        return True
    if re.match(r"^(```+|:::+)\s*\{prf:(theorem|proposition|lemma|corollary|definition)\}", first):
        return len(block) <= LIST_CHARS
    if re.match(r"^([-*+]|\d+\.)\s", first):
        return len(block) <= LIST_CHARS
    if re.match(r"^\([\w-]+\)=$", first):  # a MyST target, kept with what follows
        return True
    return False


def condense(text: str) -> tuple[str, str]:
    """(what a slide shows, what goes to its speaker notes) of a Markdown cell's source.

    Kept on the slide: headings, displayed equations, figures, short lists and
    theorems, and the first paragraph of a chapter's title cell (its motivating
    question). Everything else, the prose, becomes the slide's speaker notes.
    """
    shown, notes = [], []
    blocks = _blocks(text)
    # A chapter's title cell opens with its motivating question: it stays.
    opening = 1 if blocks and blocks[0].startswith("# ") else None
    for index, block in enumerate(blocks):
        (shown if index == opening or _on_slide(block) else notes).append(block)
    return "\n\n".join(shown), "\n\n".join(notes)


def _figure_without_caption(markdown: str) -> tuple[str, str]:
    """A converted figure ``![alt](src)\\n\\n*caption*``: the image stays, the caption goes to notes."""
    caption = []

    def keep_image(match: re.Match) -> str:
        caption.append(match.group(2))
        return match.group(1)

    text = re.sub(r"(!\[[^\]]*\]\([^)]*\))\n\n\*(.*?)\*\n", keep_image, markdown + "\n", flags=re.S)
    return text.rstrip("\n"), "\n\n".join(caption)


def _is_figure(output: dict) -> bool:
    """A plot or a widget (what a slide of ``outputs: figures`` keeps)."""
    kinds = output.get("data", {})
    return any(k.startswith("image/") for k in kinds) or (
        "application/vnd.jupyter.widget-view+json" in kinds
    )


def _local_links(markdown: str, site: str) -> str:
    """Links into the website made relative to slides/ (one folder down, as notebooks/ is)."""
    markdown = markdown.replace(site + "/", "../")
    return re.sub(r"\]\((?!https?:)([^)#\s]+)\.(?:md|ipynb)(#[^)]*)?\)", r"](\1.html\2)", markdown)


def _glue_values(nb: dict) -> dict[str, str]:
    values = {}
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("scrapbook")
            if meta:
                text = output.get("data", {}).get(meta.get("mime_prefix", "") + "text/plain")
                if text is not None:
                    values[meta["name"]] = text
    return values


def executed(notebook: Path, cache_dir: Path):
    """The notebook as stored (its slide metadata included) with outputs from the cache."""
    import nbformat
    from jupyter_cache import get_cache

    if not (cache_dir / "global.db").exists():
        raise PlanError(
            f"no execution cache at {cache_dir}: build the book (`jupyter-book build .`) "
            "or run the notebook's tests first"
        )
    nb = nbformat.read(notebook, as_version=4)
    cache = get_cache(str(cache_dir))
    # jupyter-cache hashes code cells' source and metadata, so applying a plan changes
    # the key; a copy executed before the plan was applied has the same outputs.
    bare = copy.deepcopy(nb)
    for cell in bare.cells:
        cell.metadata.pop("slideshow", None)
    try:
        try:
            pk = cache.match_cache_notebook(nb).pk
        except KeyError:
            pk = cache.match_cache_notebook(bare).pk
    except KeyError:
        raise PlanError(
            f"{notebook.relative_to(ROOT)} is not in the execution cache {cache_dir} (its "
            "code changed since it was executed): build the book again, which executes it"
        ) from None
    cached = cache.get_cache_bundle(pk).nb
    if "widgets" in cached.metadata:
        nb.metadata["widgets"] = cached.metadata["widgets"]
    code = [c for c in cached.cells if c.cell_type == "code"]
    for cell in nb.cells:
        if cell.cell_type == "code":
            done = code.pop(0)
            cell.outputs, cell.execution_count = done.outputs, done.execution_count
    return nb


def deck_notebook(notebook: Path, cache_dir: Path, converter=None, lang: str | None = None):
    """The executed notebook prepared for the slides exporter (nbformat node); ``lang``
    names the edition a notebook of ``<lang>/notebooks/`` belongs to."""
    import nbformat

    colab = _load_tool("colab_edition")
    nb = executed(notebook, cache_dir)
    _, plans = load_plan(notebook)
    doc = notebook.relative_to(ROOT).with_suffix("").as_posix()
    site = f"{colab.SITE}/{lang}" if lang else colab.SITE
    if converter is None:
        converter = colab.Converter(
            colab.load_bibliography(ROOT / "book" / "references.bib"),
            colab.figure_numbers(),
            {},
            lang=lang,
        )
    converter.values = {
        doc: _glue_values(nb),
        english(notebook).removesuffix(".ipynb"): _glue_values(nb),
    }
    converter.doc, converter.cited = doc, []
    cells = []
    for cell in nb.cells:
        plan = plans.get(
            cell.get("id"), CellPlan(cell.metadata.get("slideshow", {}).get("slide_type", "skip"))
        )
        kind = cell.metadata.get("slideshow", {}).get("slide_type", "skip")
        if kind == "skip":
            continue
        if cell.cell_type == "code":
            if plan.code == "hide":
                cell.metadata["transient"] = {"remove_source": True}
            # glue outputs are hidden on the pages; keep them off the slides too
            cell.outputs = [o for o in cell.outputs if "scrapbook" not in o.get("metadata", {})]
            if plan.outputs == "figures":
                cell.outputs = [o for o in cell.outputs if _is_figure(o)]
            cells.append(cell)
            continue
        if cell.cell_type != "markdown":
            continue
        text = _local_links(converter.markdown(cell.source), site)
        notes = ""
        if kind != "notes" and plan.show == "condensed":
            shown, notes = condense(cell.source)
            text = _local_links(converter.markdown(shown), site)
            text, caption = _figure_without_caption(text)
            notes = "\n\n".join(p for p in (caption, converter.markdown(notes)) if p)
        cell.source = text
        cells.append(cell)
        if notes:
            cells.append(
                nbformat.v4.new_markdown_cell(
                    notes, metadata={"slideshow": {"slide_type": "notes"}}
                )
            )
    nb.cells = cells
    return nb


def _exporter():
    from nbconvert import SlidesExporter

    exporter = SlidesExporter(
        extra_template_basedirs=[str(TEMPLATE_DIR)],
        template_name="course_reveal",
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )
    exporter.reveal_url_prefix = "../_static/vendor/reveal.js"
    exporter.reveal_theme = "white-contrast"
    exporter.reveal_transition = "none"
    exporter.reveal_number = "c/t"
    exporter.reveal_width = "1280"
    exporter.reveal_height = "720"
    return exporter


def export(
    out: Path,
    cache_dir: Path = DEFAULT_CACHE,
    notebooks: list[Path] | None = None,
    lang: str | None = None,
) -> list[Path]:
    """Write one reveal.js deck per chapter into ``out`` (``slides/`` of the site); with
    ``lang``, the decks of that edition's chapters (``<lang>/notebooks/``)."""
    out.mkdir(parents=True, exist_ok=True)
    exporter = _exporter()
    written = []
    if notebooks is None and lang:
        notebooks = [ROOT / lang / p.relative_to(ROOT) for p in chapters()]
    for notebook in notebooks or chapters():
        nb = deck_notebook(notebook, cache_dir, lang=lang)
        body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": notebook.stem}})
        target = out / f"{notebook.stem}.html"
        target.write_text(body)
        written.append(target)
    return written


def deck_name(notebook: str | Path) -> str:
    """The deck's file name under slides/ for a chapter (path or docname)."""
    return f"{Path(notebook).name.removesuffix('.ipynb')}.html"


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("apply", help="write every plan's slide types into its notebook")
    sub.add_parser("check", help="exit 1 if a notebook's slide metadata and its plan disagree")
    exp = sub.add_parser("export", help="write the offline decks from the execution cache")
    exp.add_argument("--out", type=Path, default=ROOT / "_build" / "html" / "slides")
    exp.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    exp.add_argument("notebooks", nargs="*", type=Path)
    dr = sub.add_parser("draft", help="print a first plan for a notebook")
    dr.add_argument("notebook", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "apply":
            changed = [nb.name for nb in chapters() if apply(nb)]
            print(f"slide metadata written into {len(changed)} notebooks: {', '.join(changed)}")
        elif args.command == "check":
            found = [p for nb in chapters() for p in problems(nb)]
            print("\n".join(found) or "every chapter's slide metadata matches its plan")
            return 1 if found else 0
        elif args.command == "export":
            targets = [p.resolve() for p in args.notebooks] or None
            written = export(args.out, args.cache.resolve(), targets)
            print(f"wrote {len(written)} decks to {args.out}")
        elif args.command == "draft":
            print(draft(args.notebook.resolve()), end="")
    except PlanError as exc:
        print(f"slides: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
