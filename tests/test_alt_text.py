"""Every plot a chapter draws has written alt text (issue 30, section 3).

MyST-NB renders a code cell's image outputs with the image options of the cell's
metadata, ``"mystnb": {"image": {"alt": ...}}`` (myst_nb.core.config,
``render_image_options``, cell key ``image``); without it the alt text of a plot is the
PNG's file path. Every image a cell outputs gets the same alt, so a cell that draws
several panels describes each of them.

Which cells draw: the rule reads each cell's code (``ast``), not its outputs (the
notebooks are stored stripped). A cell draws into its outputs when, outside any function
definition, it calls ``plt.show()``, ``plt.subplots``, ``plt.figure``, ``.imshow(`` or
``display(fig)``, or calls by name a function of the notebook that does (a helper
defined in an earlier cell, such as chapter 6's ``draw``).

Widget plots: a function handed to ``widgets.interact``/``interactive`` draws inside the
widget; its plot comes from the embedded widget state, not from the cell's image outputs, so
the cell's ``mystnb.image.alt`` never reaches it. Such a cell carries its plot's alt text in
``metadata.course.widget_alt`` instead: the book extension (book/_ext/course_widget_alt.py)
writes it next to the cell's output and book/_static/a11y.js sets it as the alt of every
image the widget draws there (tests/test_browser.py checks it in the browser). It describes
the plot the widget opens with, the one the website shows.
"""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("ch*.ipynb"))

MIN_LENGTH = 40  # one sentence that says what is plotted, at least
PATH_LIKE = re.compile(r"(^|/)_images/|\.(png|svg|jpe?g)\b|^\.\./", re.IGNORECASE)
WIDGET_CALLS = {"interact", "interactive"}


def _is_drawing_call(node: ast.AST) -> bool:
    """plt.show(), plt.subplots(...), plt.figure(...), <anything>.imshow(...), display(fig)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        if func.attr == "imshow":
            return True
        if isinstance(func.value, ast.Name) and func.value.id == "plt":
            return func.attr in {"show", "subplots", "figure"}
    if isinstance(func, ast.Name) and func.id == "display":
        return any(isinstance(a, ast.Name) and a.id == "fig" for a in node.args)
    return False


def _called_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id
    return None


def _walk_outside_defs(tree: ast.AST):
    """Every node of the cell's own code, not inside a function, lambda or class body."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                if not isinstance(child, ast.ClassDef):
                    stack.append(child)


def _parse(source: str, where: str) -> ast.Module:
    # IPython magics and shell escapes are not Python: a `pass` at the same indentation
    lines = [
        line[: len(line) - len(line.lstrip())] + "pass"
        if line.lstrip().startswith(("%", "!"))
        else line
        for line in source.split("\n")
    ]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError as err:  # pragma: no cover - a broken cell fails other tests too
        pytest.fail(f"{where}: cannot parse the cell ({err}); fix the cell")


def drawing_cells(path: Path) -> tuple[dict[str, dict], set[str]]:
    """(cells that draw into their outputs: id -> cell, ids of cells whose plot is a widget's)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    trees = {c["id"]: _parse("".join(c["source"]), f"{path.name} cell {c['id']}") for c in code}
    # functions of the notebook that draw, directly or through another such function
    defs = {
        node.name: node
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
    }
    drawers: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, node in defs.items():
            if name not in drawers and any(
                _is_drawing_call(n) or _called_name(n) in drawers for n in ast.walk(node)
            ):
                drawers.add(name)
                changed = True
    direct, widget = {}, set()
    for cell in code:
        for node in _walk_outside_defs(trees[cell["id"]]):
            if _is_drawing_call(node) or _called_name(node) in drawers:
                direct[cell["id"]] = cell
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute | ast.Name)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in WIDGET_CALLS
                and any(isinstance(a, ast.Name) and a.id in drawers for a in node.args)
            ):
                widget.add(cell["id"])
    return direct, widget


def alt_text(cell: dict) -> str | None:
    return cell["metadata"].get("mystnb", {}).get("image", {}).get("alt")


def widget_alt_text(cell: dict) -> str | None:
    return cell["metadata"].get("course", {}).get("widget_alt")


def alt_problem(alt: str | None, key: str = "metadata.mystnb.image.alt") -> str | None:
    """Why an alt text is not a written description, or None."""
    if alt is None:
        return f"no alt text ({key})"
    if not isinstance(alt, str) or len(alt.strip()) < MIN_LENGTH:
        return f"alt text shorter than {MIN_LENGTH} characters: {alt!r}"
    if PATH_LIKE.search(alt):
        return f"alt text is a file path: {alt!r}"
    if alt.strip().lower() in {"figure", "plot", "image", "plot of results"}:
        return f"alt text says nothing: {alt!r}"
    if "{glue" in alt or "{cite" in alt:
        return "alt text holds MyST markup, which an image's alt does not render"
    return None


def _ids(chapters):
    return [p.stem for p in chapters]


HOW = (
    "one to three sentences saying what is plotted and the pattern the chapter draws from it, "
    "true for any seed"
)


def test_the_rule_finds_every_chapter():
    assert len(CHAPTERS) == 14


@pytest.mark.parametrize("path", CHAPTERS, ids=_ids(CHAPTERS))
def test_every_plot_has_written_alt_text(path):
    direct, _ = drawing_cells(path)
    assert direct, f"{path.name}: no cell draws; is the rule still finding the plots?"
    problems = [
        f"cell {cid}: {why}" for cid, c in direct.items() if (why := alt_problem(alt_text(c)))
    ]
    assert not problems, (
        f"{path.name}: plots without written alt text (add metadata.mystnb.image.alt: {HOW}):\n"
        + "\n".join(problems)
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=_ids(CHAPTERS))
def test_every_widget_plot_has_written_alt_text(path):
    """A cell whose plot a widget draws carries the alt text of that plot (as the widget opens)
    in metadata.course.widget_alt, which the website sets on the widget's images."""
    _, widget = drawing_cells(path)
    cells = {c["id"]: c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]}
    problems = [
        f"cell {cid}: {why}"
        for cid in sorted(widget)
        if (why := alt_problem(widget_alt_text(cells[cid]), "metadata.course.widget_alt"))
    ]
    assert not problems, (
        f"{path.name}: widget plots without written alt text (add metadata.course.widget_alt: "
        f"{HOW}, describing the plot the widget opens with):\n" + "\n".join(problems)
    )


def test_the_rule_finds_the_widget_plots():
    """The widget check must not pass vacuously: the chapters' widgets draw plots."""
    widgets = sum(len(drawing_cells(path)[1]) for path in CHAPTERS)
    assert widgets >= 10, f"the rule finds {widgets} widget plots; is it still finding them?"


@pytest.mark.parametrize("path", CHAPTERS, ids=_ids(CHAPTERS))
def test_no_alt_text_where_nothing_is_drawn(path):
    """Alt text on a cell that draws no image of that kind is stale (the plot moved) or
    unreachable: an image alt on a cell with no image output, a widget alt on a cell with no
    widget plot."""
    direct, widget = drawing_cells(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    stray = [c["id"] for c in code if c["id"] not in direct and alt_text(c) is not None]
    stray_widget = [
        c["id"] for c in code if c["id"] not in widget and widget_alt_text(c) is not None
    ]
    assert not stray, f"{path.name}: image alt text on cells that draw no plot: {stray}"
    assert not stray_widget, (
        f"{path.name}: widget alt text on cells whose plot no widget draws: {stray_widget}"
    )


def test_the_rule_finds_plots_and_flags_bad_alt_text(tmp_path):
    """The control: the rule flags what it should, on cells made up here."""
    src = [
        "fig, ax = plt.subplots()\nax.plot([1, 2])\nplt.show()",  # draws
        "def show(x=1):\n    plt.imshow([[x]])\n    plt.show()\n\nshow()",  # through a helper
        "def pick(x=1):\n    plt.imshow([[x]])\n\nwidgets.interact(pick, x=(0, 2))",  # widget
        "print(1)",  # draws nothing
    ]
    nb = {
        "cells": [
            {"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": [s]}
            for i, s in enumerate(src)
        ]
    }
    tmp = tmp_path / "control.ipynb"
    tmp.write_text(json.dumps(nb), encoding="utf-8")
    direct, widget = drawing_cells(tmp)
    assert set(direct) == {"c0", "c1"} and widget == {"c2"}
    assert alt_problem(None) and alt_problem("a plot")
    assert alt_problem("../_images/79a188ab89c646b24ce29d838958f95ffa5e6cc85345b45bf00a.png")
    assert alt_problem("Figure") and alt_problem(
        "Loss against step, as {glue:text}`x` says it falls"
    )
    assert alt_problem("Validation loss against step for the four arms, log scale") is None
    assert "metadata.course.widget_alt" in alt_problem(None, "metadata.course.widget_alt")
    widget_cell = nb["cells"][2]
    assert widget_alt_text(widget_cell) is None and alt_text(widget_cell) is None
    widget_cell["metadata"] = {"course": {"widget_alt": "Two schedules against the update s"}}
    assert widget_alt_text(widget_cell) == "Two schedules against the update s"
