"""Contracts between the book and the library (issue "course_lib: one concept per module").

Each contract is a small pure function over texts or syntax trees that returns the
list of violations, one readable line each.  One test runs it on the repository;
a second test feeds it a planted violation (a synthetic input written here) and
checks that it is reported, and that a clean input is not, so a passing suite
also proves that every checker can fail.

Everything is static: no notebook is executed and ``course_lib`` is not imported,
so the tests take about two seconds together (pytest's own start-up, which imports
torch through ``tests/conftest.py``, comes on top).  The files are read when a test runs, so
modules that appear while the library is reorganised (``masks.py``, ``lm.py``,
...) are checked as soon as they exist.

Decisions worth knowing
-----------------------
* Equation citations are read from the comments and string literals (docstrings)
  of ``course_lib/*.py`` only, never from code.  A citation is ``(N.M)``, a range
  ``(N.M)-(N.K)`` (also ``--``, en dash, ``to``), or a bare number after
  ``eq.``/``eqs.``/``equation(s)`` (``eq. 9.3``).  Chapter and number start at 1,
  so values such as ``(0.05)`` or ``(1.0)`` are not citations; in the library's
  prose ``(N.M)`` is reserved for equation numbers.  A parenthesised number right
  after ``Section``, ``Sec.``, ``§``, ``Table``, ``Figure``, ``Fig.``, ``Exercise``,
  ``Listing``, ``Algorithm``, ``Appendix`` or ``version`` is clearly not an
  equation and is skipped (sections are otherwise written ``Section 3.2``,
  without parentheses, which is never read as a citation).
* A range in the library stands for every equation in it: ``(1.2)-(1.7)`` needs
  (1.2), (1.3), ..., (1.7) in Chapter 1.
* A chapter numbers equation N.M when one of its markdown cells holds
  ``\\tag{N.M}``, a combined tag that contains it (``\\tag{13.2-13.3}``,
  ``\\tag{13.2--13.4}``, ``\\tag{9.4, 9.5}``), or the text ``(N.M)`` (an equation
  numbered inline, after inline math).
* "Top-level" definitions of a notebook are those bound in the notebook's global
  namespace: module-level ``def``/``class`` statements, including those inside a
  module-level ``for``/``while``/``if``/``with``/``try`` block (ch01 and ch02 define
  ``next_batch`` inside a loop), but not those nested in a function or class.
* A notebook helper counts as written twice when two notebooks hold the same
  normalised definition (``ast.dump`` with the name and docstring removed) of at
  least 2 statements: one-statement closures such as ``next_batch`` (a
  ``make_batch`` call over the notebook's own data) are glue, not helpers.  Or
  when two notebooks define the same name with 4+ statements each *and* the two
  bodies have the same structure (similarity of their AST node sequences at
  least 0.8): two unrelated widget callbacks that happen to share a name
  (ch06's and ch07's ``explore``, similarity 0.30) are not a duplicated helper.
"""

from __future__ import annotations

import ast
import copy
import difflib
import io
import json
import re
import tokenize
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "course_lib"


# ---------------------------------------------------------------------------
# Reading the repository (every call reads the files as they are now)
# ---------------------------------------------------------------------------


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _cells(path: Path) -> list[tuple[str, str]]:
    """``(cell_type, source)`` of every cell of a notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def _library_modules() -> dict[str, str]:
    """``course_lib/*.py`` (not ``course_lib/grading/``): path -> source."""
    return {_rel(p): p.read_text(encoding="utf-8") for p in sorted(LIB.glob("*.py"))}


def _notebooks(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.ipynb"))


def _notebook_code(folder: str = "notebooks") -> dict[str, list[str]]:
    """Path -> source of every cell as code (markdown cells empty, so that list indices
    are the notebook's cell indices), for every notebook of ``folder``."""
    return {
        _rel(p): [src if kind == "code" else "" for kind, src in _cells(p)]
        for p in _notebooks(folder)
    }


def _chapter_markdown() -> dict[int, dict[str, list[str]]]:
    """Chapter number -> {notebook path -> markdown cells} for ``notebooks/chNN_*.ipynb``."""
    chapters: dict[int, dict[str, list[str]]] = defaultdict(dict)
    for p in _notebooks("notebooks"):
        m = re.match(r"ch(\d+)_", p.name)
        if m:
            chapters[int(m.group(1))][_rel(p)] = [s for k, s in _cells(p) if k == "markdown"]
    return dict(chapters)


# ---------------------------------------------------------------------------
# 1. Equation numbers cited in course_lib exist in their chapter
# ---------------------------------------------------------------------------

_NUM = r"[1-9]\d?\.[1-9]\d?"
_DASH = r"\s*(?:--?|–|—|to)\s*"
_PAREN_CITATION = re.compile(rf"\((?P<a>{_NUM})\)(?:{_DASH}\((?P<b>{_NUM})\))?")
_BARE_CITATION = re.compile(
    rf"\b(?:[Ee]qs?\.|[Ee]quations?)\s+(?P<a>{_NUM})(?:{_DASH}(?P<b>{_NUM}))?(?![\d.]*\d)"
)
_NOT_AN_EQUATION = re.compile(
    r"(?:\bSection|\bSec\.|§|\bTable|\bFigure|\bFig\.|\bExercise|\bListing|\bAlgorithm"
    r"|\bAppendix|\bversion)\s*$",
    re.IGNORECASE,
)
_TAG = re.compile(r"\\tag\*?\{([^}]*)\}")
_TAG_ITEM = re.compile(r"^(\d+)\.(\d+)(?:\s*(?:--?|–|—|to)\s*(?:(\d+)\.)?(\d+))?$")
_INLINE_NUMBER = re.compile(r"\((\d+)\.(\d+)\)")

Equation = tuple[int, int]


def _parse(number: str) -> Equation:
    chapter, eq = number.split(".")
    return int(chapter), int(eq)


def _expand(first: Equation, last: Equation | None) -> list[Equation]:
    """A range stands for every equation in it (endpoints only across chapters)."""
    if last is None:
        return [first]
    if first[0] == last[0] and first[1] <= last[1]:
        return [(first[0], n) for n in range(first[1], last[1] + 1)]
    return [first, last]


def python_prose(source: str) -> list[tuple[int, str]]:
    """``(first line, text)`` of every comment and string literal of a Python source.

    Comments on consecutive lines form one text (one line each), so that a
    ``# Chapter 8: ...`` comment covers the comment on the next line."""
    prose: list[tuple[int, str]] = []
    last_comment_line = -1
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        line = tok.start[0]
        if tok.type == tokenize.COMMENT:
            if prose and last_comment_line == line - 1:
                prose[-1] = (prose[-1][0], prose[-1][1] + "\n" + tok.string)
            else:
                prose.append((line, tok.string))
            last_comment_line = line
        elif tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            prose.append((line, tok.string))
    return prose


def citations_in_text(text: str) -> list[tuple[int, Equation]]:
    """``(line offset within text, equation)`` of every equation cited in ``text``."""
    found: list[tuple[int, Equation]] = []
    for pattern in (_PAREN_CITATION, _BARE_CITATION):
        for m in pattern.finditer(text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            if pattern is _PAREN_CITATION and _NOT_AN_EQUATION.search(text[line_start : m.start()]):
                continue
            last = _parse(m.group("b")) if m.group("b") else None
            offset = text.count("\n", 0, m.start())
            found += [(offset, eq) for eq in _expand(_parse(m.group("a")), last)]
    return found


def equation_citations(source: str) -> list[tuple[int, Equation]]:
    """``(line, equation)`` of every equation a module cites in its comments and docstrings."""
    return [
        (line + offset, eq)
        for line, text in python_prose(source)
        for offset, eq in citations_in_text(text)
    ]


def numbered_equations(markdown: Iterable[str]) -> set[Equation]:
    """Equation numbers a chapter's markdown defines: tags, tag ranges, inline ``(N.M)``."""
    numbers: set[Equation] = set()
    for text in markdown:
        for tag in _TAG.findall(text):
            for item in re.split(r"\s*(?:,|;|\band\b)\s*", tag.strip()):
                m = _TAG_ITEM.match(item)
                if not m:
                    continue
                first = (int(m.group(1)), int(m.group(2)))
                last = None
                if m.group(4):
                    last = (int(m.group(3) or m.group(1)), int(m.group(4)))
                numbers.update(_expand(first, last))
        numbers.update((int(c), int(n)) for c, n in _INLINE_NUMBER.findall(text))
    return numbers


def missing_equations(
    modules: Mapping[str, str], chapters: Mapping[int, Mapping[str, list[str]]]
) -> list[str]:
    """Citations in ``modules`` whose chapter notebook does not number the equation."""
    numbered = {
        ch: numbered_equations(c for cells in nbs.values() for c in cells)
        for ch, nbs in chapters.items()
    }
    problems = []
    for path, source in modules.items():
        lines: dict[Equation, list[int]] = defaultdict(list)
        for line, eq in equation_citations(source):
            if eq not in numbered.get(eq[0], set()):
                lines[eq].append(line)
        for (ch, n), where in sorted(lines.items()):
            at = ", ".join(str(x) for x in sorted(set(where)))
            if ch not in chapters:
                problems.append(
                    f"{path} (lines {at}) cites ({ch}.{n}), but there is no "
                    f"notebooks/ch{ch:02d}_*.ipynb"
                )
            else:
                book = " / ".join(chapters[ch])
                problems.append(
                    f"{path} (lines {at}) cites ({ch}.{n}), which {book} does not number "
                    f"(no \\tag{{{ch}.{n}}}, no tag range holding it, no inline ({ch}.{n}))"
                )
    return problems


def test_every_equation_cited_in_course_lib_is_numbered_in_its_chapter():
    """Convention: an equation number in a course_lib comment or docstring points at an
    equation the reader can find, numbered in that chapter's notebook."""
    problems = missing_equations(_library_modules(), _chapter_markdown())
    assert not problems, "equations cited by course_lib but not numbered in the book:\n" + (
        "\n".join(problems)
    )


def test_the_chapter_parser_reads_every_form_of_equation_tag():
    """Guards the equation checker itself: every way the chapters number equations
    (single tags, starred tags, ranges with -, -- or an en dash, lists, inline numbers)."""
    markdown = [
        "$$a \\tag{13.1}$$ and $$b \\tag{13.2-13.3}$$",
        "$$c \\tag{9.4, 9.5}$$ $$d \\tag*{7.2--7.4}$$ $$e \\tag{8.1–8.2}$$",
        "the head, $y = W h$ (13.7). Not a tag: \\tag{*}",
    ]
    assert numbered_equations(markdown) == {
        (13, 1),
        (13, 2),
        (13, 3),
        (13, 7),
        (9, 4),
        (9, 5),
        (7, 2),
        (7, 3),
        (7, 4),
        (8, 1),
        (8, 2),
    }


def test_the_equation_checker_reports_a_number_its_chapter_lacks():
    """Guards the equation checker itself: a planted citation of an unnumbered equation,
    a range reaching past the last equation and a citation of a missing chapter fail;
    values, code and section numbers are not read as citations."""
    module = (
        '"""Planted (Chapter 4).\n'
        "\n"
        "The block, eqs. (4.1)-(4.3); the norm, eq. 4.9; BERT is (12.1).\n"
        "See Section (4.7) and Table (4.8); dropout (0.1), scale (1.0).\n"
        '"""\n'
        "\n"
        "x = f(4.5)  # (4.2) is fine; the call on the left is code, not a citation\n"
    )
    chapters = {4: {"notebooks/ch04_x.ipynb": ["$$y \\tag{4.1-4.2}$$ and (4.6)"]}}
    problems = missing_equations({"course_lib/planted.py": module}, chapters)
    assert len(problems) == 3, problems
    assert "cites (4.3)" in problems[0] and "(lines 3)" in problems[0]
    assert "cites (4.9)" in problems[1]
    assert "cites (12.1)" in problems[2] and "no notebooks/ch12_*.ipynb" in problems[2]
    clean = '"""Chapter 4, eqs. (4.1)-(4.2), (4.6)."""\n'
    assert missing_equations({"course_lib/clean.py": clean}, chapters) == []


# ---------------------------------------------------------------------------
# 2. No notebook redefines a name that course_lib exports
# ---------------------------------------------------------------------------


def _without_magics(source: str) -> str:
    """IPython magics (``%...``) and shell lines (``!...``) become ``pass``."""
    return re.sub(r"(?m)^([ \t]*)[%!].*$", r"\1pass", source)


def parse_cells(cells: Iterable[str], where: str = "") -> list[tuple[int, ast.Module]]:
    """``(cell index, tree)`` of each cell; a cell that does not parse raises, saying which."""
    trees = []
    for i, src in enumerate(cells):
        try:
            trees.append((i, ast.parse(_without_magics(src))))
        except SyntaxError as exc:
            raise SyntaxError(f"{where} cell {i} does not parse: {exc}") from None
    return trees


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def notebook_definitions(tree: ast.Module) -> list[Definition]:
    """Functions and classes bound in the notebook's namespace (see the module docstring)."""
    found: list[Definition] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.append(node)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.If)):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                visit(node.body)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)

    visit(tree.body)
    return found


def public_names(source: str) -> list[str]:
    """A module's ``__all__`` (literal lists and ``+=``); its public top-level names if none."""
    tree = ast.parse(source)
    names: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = list(ast.literal_eval(node.value))
        elif isinstance(node, ast.AugAssign) and getattr(node.target, "id", "") == "__all__":
            names = (names or []) + list(ast.literal_eval(node.value))
    if names is not None:
        return names
    return [
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and not n.name.startswith("_")
    ]


def exported_names(modules: Mapping[str, str]) -> dict[str, list[str]]:
    """Public name -> the modules that export it."""
    exported: dict[str, list[str]] = defaultdict(list)
    for path, source in modules.items():
        for name in public_names(source):
            exported[name].append(path)
    return dict(exported)


def redefined_library_names(
    notebooks: Mapping[str, list[str]], exported: Mapping[str, list[str]]
) -> list[str]:
    """Notebook definitions whose name a course_lib module exports."""
    problems = []
    for path, cells in notebooks.items():
        for index, tree in parse_cells(cells, path):
            for node in notebook_definitions(tree):
                if node.name in exported:
                    kind = "class" if isinstance(node, ast.ClassDef) else "def"
                    problems.append(
                        f"{path}, cell {index}: {kind} {node.name} redefines the name "
                        f"exported by {', '.join(exported[node.name])}"
                    )
    return problems


def test_no_notebook_defines_a_name_that_course_lib_exports():
    """Convention: a notebook never redefines a library function; it imports it and shows
    it with show_source, and a teaching variant gets another name (attention_loop)."""
    problems = redefined_library_names(
        _notebook_code("notebooks"), exported_names(_library_modules())
    )
    assert not problems, "rename these notebook definitions:\n" + "\n".join(problems)


def test_the_redefinition_checker_reports_a_notebook_def_of_an_exported_name():
    """Guards the redefinition checker itself: a planted ``def causal_mask`` (also one
    inside a loop, and a class) is reported; a teaching variant with its own name is not."""
    modules = {"course_lib/masks.py": '__all__ = ["causal_mask", "Mask"]\n'}
    cells = [
        "%pip install -q x\nif True:\n    !echo hi\n",
        "def causal_mask(t):\n    return t\n",
        "for t in range(3):\n    def causal_mask(t=t):\n        return t\n",
        "class Mask:\n    pass\n",
        "def causal_mask_loop(t):\n    def causal_mask():\n        pass\n",
    ]
    problems = redefined_library_names({"notebooks/ch99_x.ipynb": cells}, exported_names(modules))
    assert [p.split(":")[0] for p in problems] == [
        "notebooks/ch99_x.ipynb, cell 1",
        "notebooks/ch99_x.ipynb, cell 2",
        "notebooks/ch99_x.ipynb, cell 3",
    ], problems
    assert "course_lib/masks.py" in problems[0]
    assert exported_names({"course_lib/m.py": "def f():\n    pass\n\n\ndef _g():\n    pass\n"}) == {
        "f": ["course_lib/m.py"]
    }


# ---------------------------------------------------------------------------
# 3. Every public name is used by the course (or allow-listed as test-only)
# ---------------------------------------------------------------------------

#: Exported names used only by the test suite, each with the reason it stays public.
#: Keyed by name, not module, so that an entry survives a move between modules.
TEST_ONLY = {
    "DataError": "the exception every data loader raises: callers catch it, tests check it",
    "FILES": "the data file table (URL, sha256) that test_data checks against the data README",
    "fetch": "the checksummed downloader behind the loaders; test_data exercises its error paths",
    "load_hf_bert": "copies Hugging Face BERT weights in, to cross-check the blocks in tests",
    "load_gpt2_weights": "copies Hugging Face GPT-2 weights in, to cross-check the blocks in tests",
    "from_torch_state_dict": "loads torch.nn.Transformer weights, to cross-check it in tests",
    "cooccurrence_matrix": "the first step of ppmi_svd_embeddings, tested against its definition",
    "ppmi": "the second step of ppmi_svd_embeddings, tested against its formula",
    "GCNLayer": "the layer of gat.GCN, cross-checked against PyG's GCNConv",
    "FitResult": "the type fit_node_classifier returns (its fields are read in Chapter 14)",
    "PaperEarlyStopping": "the callback fit_node_classifier trains with; tested on its own",
    "from_torch_mask": "the inverse of masks.to_torch_mask; the round trip is tested",
    "describe_hardware": "names the machine in the status tables (tools/sweep.py, the book)",
    "LONG_RUNS": "what tools/long_run.py records (a maintainer tool); test_long_runs checks it",
    "cells_hash": "the experiment's fingerprint tools/long_run.py stores; test_long_runs checks it",
    "code_digest": "what the status page's Colab times were measured on (the book, test_colab)",
    "moving_average_decomposition": "the decomposition DLinear runs (10.6); tested against pandas",
    "T5Bias": "the hook position_hook('t5') builds; tested against relative.t5_bias",
    "notebook_seed": "the seed setup_notebook chose (COURSE_SEED); tested with the sweep",
    "Seq2SeqBatch": "the type seq2seq.make_batch returns",
    "BPETokenizer": "the type tokenization.train_bpe returns; tested against HF tokenizers",
}


def _course_texts() -> dict[str, str]:
    """Where a public name may be used: the cells of notebooks, exercises and solutions,
    the grading assignments, every course_lib module (grading included) and the
    instructor's grader (course_grader)."""
    texts = {}
    for folder in ("notebooks", "exercises", "solutions"):
        for p in _notebooks(folder):
            texts[_rel(p)] = "\n".join(src for _, src in _cells(p))
    for p in [*sorted(LIB.rglob("*.py")), *sorted((ROOT / "course_grader").rglob("*.py"))]:
        texts[_rel(p)] = p.read_text(encoding="utf-8")
    return texts


def _words(text: str) -> set[str]:
    """The words of a text (maximal runs of letters, digits and ``_``): a name is "used"
    where it is one of them, so ``attention.causal_mask`` uses ``causal_mask`` and
    ``ppmi_svd`` does not use ``ppmi`` (a word-boundary search, done once per text)."""
    return set(re.findall(r"\w+", text))


def unused_public_names(
    modules: Mapping[str, str], texts: Mapping[str, str], allowed: Iterable[str] = ()
) -> list[str]:
    """Exported names that no text other than their own module mentions as a word."""
    allowed = set(allowed)
    words = {where: _words(text) for where, text in texts.items()}
    problems = []
    for path, source in modules.items():
        for name in public_names(source):
            if name in allowed:
                continue
            if not any(name in w for where, w in words.items() if where != path):
                problems.append(f"{path}: {name}")
    return problems


def test_every_public_name_of_course_lib_is_used_by_the_course():
    """Convention: course_lib holds what the course uses; a public name that no notebook,
    exercise, solution, assignment or other module uses is dead (or goes in TEST_ONLY)."""
    problems = unused_public_names(_library_modules(), _course_texts(), TEST_ONLY)
    assert not problems, (
        "exported but used by no notebook, exercise, solution, assignment or other module "
        "(delete it, or add it to TEST_ONLY with a reason):\n" + "\n".join(problems)
    )


def stale_allow_list(
    allowed: Iterable[str], exported: Mapping[str, list[str]], tests: Mapping[str, str]
) -> list[str]:
    """Allow-listed names that no module exports any more, or that no test uses."""
    problems = []
    for name in sorted(allowed):
        if name not in exported:
            problems.append(f"{name}: no course_lib module exports it")
        elif not any(name in _words(text) for text in tests.values()):
            problems.append(f"{name}: no test uses it")
    return problems


def test_every_test_only_name_is_exported_and_tested():
    """Convention: the TEST_ONLY allow-list stays true; each entry is still exported and
    really used by a test, so the list cannot hide dead code once its test is gone."""
    tests = {
        _rel(p): p.read_text(encoding="utf-8")
        for p in sorted((ROOT / "tests").glob("*.py"))
        if p.name != Path(__file__).name
    }
    problems = stale_allow_list(TEST_ONLY, exported_names(_library_modules()), tests)
    assert not problems, "update TEST_ONLY:\n" + "\n".join(problems)


def test_the_unused_name_checker_reports_a_name_nobody_uses():
    """Guards the unused-name checker itself: a planted unused export is reported; uses by
    attribute, by import, by another module, and allow-listed names are not; a name used
    only inside a longer word does not count; the allow-list check reports stale entries."""
    modules = {
        "course_lib/lm.py": '__all__ = ["lm_loss", "batches", "dead", "loader", "ppmi"]\n'
        "def dead():\n    return lm_loss\n",
        "course_lib/gpt.py": "from course_lib.lm import batches\n",
    }
    texts = {
        **modules,
        "notebooks/ch11_x.ipynb": "loss = lm.lm_loss(model, batch)\nppmi_svd = 1",
    }
    problems = unused_public_names(modules, texts, allowed={"loader"})
    assert problems == ["course_lib/lm.py: dead", "course_lib/lm.py: ppmi"]
    assert unused_public_names(modules, texts, allowed={"loader", "dead", "ppmi"}) == []
    stale = stale_allow_list(
        {"loader", "gone", "untested"},
        {"loader": ["course_lib/lm.py"], "untested": ["course_lib/lm.py"]},
        {"tests/test_lm.py": "lm.loader()"},
    )
    assert stale == ["gone: no course_lib module exports it", "untested: no test uses it"]


# ---------------------------------------------------------------------------
# 4. Every exercise is in the table of contents; every solution has an exercise
# ---------------------------------------------------------------------------


def toc_files(toc: object) -> set[str]:
    """Every ``file`` (and ``root``) entry of a Jupyter Book ``_toc.yml``, at any depth."""
    found: set[str] = set()
    if isinstance(toc, dict):
        for key, value in toc.items():
            if key in ("file", "root") and isinstance(value, str):
                found.add(value.removesuffix(".ipynb").removesuffix(".md"))
            else:
                found |= toc_files(value)
    elif isinstance(toc, list):
        for item in toc:
            found |= toc_files(item)
    return found


def toc_problems(toc: object, exercises: Iterable[str], solutions: Iterable[str]) -> list[str]:
    """Exercises missing from the toc, toc entries with no exercise, orphan solutions."""
    listed = toc_files(toc)
    exercises, solutions = set(exercises), set(solutions)
    problems = [
        f"exercises/{s}.ipynb is not in _toc.yml"
        for s in sorted(exercises)
        if f"exercises/{s}" not in listed
    ]
    problems += [
        f"_toc.yml lists {f}, which does not exist"
        for f in sorted(listed)
        if f.startswith("exercises/") and f.removeprefix("exercises/") not in exercises
    ]
    problems += [
        f"solutions/{s}.ipynb has no exercises/{s}.ipynb"
        for s in sorted(solutions)
        if s not in exercises
    ]
    return problems


def test_every_exercise_is_in_the_toc_and_every_solution_has_an_exercise():
    """Convention: every exercise is a page of the book (listed in _toc.yml), and a solution
    exists only for an exercise, under the same file name."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    problems = toc_problems(
        toc,
        [p.stem for p in _notebooks("exercises")],
        [p.stem for p in _notebooks("solutions")],
    )
    assert not problems, "\n".join(problems)


def test_the_toc_checker_reports_a_missing_exercise_and_an_orphan_solution():
    """Guards the toc checker itself: a planted unlisted exercise, a toc entry with no
    file and a solution without its exercise are reported; a complete set is not."""
    toc = {
        "root": "book/intro",
        "parts": [{"chapters": [{"file": "exercises/ch01_a"}, {"file": "exercises/ch01_gone"}]}],
    }
    problems = toc_problems(toc, ["ch01_a", "ch01_b"], ["ch01_a", "ch02_c"])
    assert problems == [
        "exercises/ch01_b.ipynb is not in _toc.yml",
        "_toc.yml lists exercises/ch01_gone, which does not exist",
        "solutions/ch02_c.ipynb has no exercises/ch02_c.ipynb",
    ]
    assert toc_problems({"chapters": [{"file": "exercises/ch01_a.ipynb"}]}, ["ch01_a"], []) == []


# ---------------------------------------------------------------------------
# 5. No helper is written in two notebooks
# ---------------------------------------------------------------------------

#: A copied definition is reported from this many statements (one-line closures are glue).
MIN_COPIED_STATEMENTS = 2
#: Same name in two notebooks: reported from this many statements in each ...
MIN_SAME_NAME_STATEMENTS = 4
#: ... when their bodies have at least this structural similarity.
SAME_NAME_SIMILARITY = 0.8


def _statements(node: Definition) -> int:
    """Statements in a definition's body, nested ones included (docstring excluded)."""
    return sum(isinstance(n, ast.stmt) for n in ast.walk(_normalised(node))) - 1


def _normalised(node: Definition) -> Definition:
    """The definition without its name and docstring."""
    node = copy.deepcopy(node)
    node.name = "_"
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return node


def _shape(node: Definition) -> list[str]:
    """The AST node types of a definition, in walk order: its structure without names."""
    return [type(n).__name__ for n in ast.walk(_normalised(node))]


def similarity(a: Definition, b: Definition) -> float:
    return difflib.SequenceMatcher(None, _shape(a), _shape(b), autojunk=False).ratio()


def duplicated_helpers(notebooks: Mapping[str, list[str]]) -> list[str]:
    """Definitions copied between notebooks (see the thresholds above)."""
    defs: list[tuple[str, int, Definition]] = [
        (path, index, node)
        for path, cells in notebooks.items()
        for index, tree in parse_cells(cells, path)
        for node in notebook_definitions(tree)
    ]
    problems = []
    by_body: dict[str, list[tuple[str, int, Definition]]] = defaultdict(list)
    for entry in defs:
        if _statements(entry[2]) >= MIN_COPIED_STATEMENTS:
            by_body[ast.dump(_normalised(entry[2]))].append(entry)
    for group in by_body.values():
        if len({path for path, _, _ in group}) > 1:
            where = "; ".join(f"{p} cell {i} ({n.name})" for p, i, n in group)
            problems.append(f"the same definition in several notebooks: {where}")
    by_name: dict[str, list[tuple[str, int, Definition]]] = defaultdict(list)
    for entry in defs:
        if _statements(entry[2]) >= MIN_SAME_NAME_STATEMENTS:
            by_name[entry[2].name].append(entry)
    for name, group in sorted(by_name.items()):
        for k, (p1, i1, n1) in enumerate(group):
            for p2, i2, n2 in group[k + 1 :]:
                if p1 != p2 and ast.dump(_normalised(n1)) != ast.dump(_normalised(n2)):
                    score = similarity(n1, n2)
                    if score >= SAME_NAME_SIMILARITY:
                        problems.append(
                            f"{name} written twice, similarity {score:.2f}: "
                            f"{p1} cell {i1} and {p2} cell {i2}"
                        )
    return problems


def test_no_helper_is_written_in_two_notebooks():
    """Convention: a helper that two chapters need lives in course_lib (or one chapter
    imports the other's result); it is not copied from notebook to notebook."""
    problems = duplicated_helpers(_notebook_code("notebooks"))
    assert not problems, "move these helpers into course_lib:\n" + "\n".join(problems)


_HELPER = '''
def evaluate(model, data, k=5):
    """Top-k accuracy."""
    model.eval()
    with torch.no_grad():
        logits = model(data.x)
    hits = logits.topk(k).indices == data.y[:, None]
    return hits.any(-1).float().mean().item()
'''


def test_the_duplicate_checker_reports_a_copied_helper_but_not_a_short_closure():
    """Guards the duplicate checker itself: a helper copied under another name, and one
    copied and edited under the same name, are reported; one-line closures over each
    notebook's data and unrelated functions that share a name are not."""
    edited = _HELPER.replace("k=5", "k=1").replace("mean()", "sum()")
    renamed = _HELPER.replace("def evaluate", "def top_k_accuracy")
    explore_a = (
        "def explore(a=1.0):\n    x = f(a)\n    draw(x)\n    plt.tight_layout()\n    plt.show()\n"
    )
    explore_b = (
        "def explore(p=10, d=32):\n    tab = table(p, d)\n    fig, axes = plt.subplots(1, 2)\n"
        "    for i in range(d):\n        axes[0].plot(tab[:, i], label=f'{i}')\n"
        "    axes[1].bar(range(d), tab[p])\n    axes[1].set(title=f'PE({p})')\n    plt.show()\n"
    )
    closure = "def next_batch(g=gen):\n    return make_batch(BATCH, T, generator=g)\n"
    notebooks = {
        "notebooks/ch01.ipynb": [_HELPER, closure, explore_a],
        "notebooks/ch02.ipynb": [renamed, closure],
        "notebooks/ch03.ipynb": ["x = 1", edited, explore_b],
    }
    problems = duplicated_helpers(notebooks)
    assert len(problems) == 2, problems
    assert "ch01.ipynb cell 0 (evaluate)" in problems[0]
    assert "ch02.ipynb cell 0 (top_k_accuracy)" in problems[0]
    assert problems[1].startswith("evaluate written twice")
    assert "ch01.ipynb cell 0 and notebooks/ch03.ipynb cell 1" in problems[1]
    clean = {k: [c for c in v if c not in (renamed, edited)] for k, v in notebooks.items()}
    assert duplicated_helpers(clean) == []


# ---------------------------------------------------------------------------
# 6. Equation citations name their chapter when it is not the module's own
# ---------------------------------------------------------------------------

_CHAPTER_MENTION = re.compile(r"\b[Cc]hapters?\s+(\d+(?:\s*(?:,|and|&|-|–)\s*\d+)*)")


def _chapters_named(text: str) -> set[int]:
    chapters: set[int] = set()
    for m in _CHAPTER_MENTION.finditer(text):
        numbers = [int(x) for x in re.findall(r"\d+", m.group(1))]
        if re.search(r"\d\s*[-–]\s*\d", m.group(1)) and len(numbers) == 2:
            numbers = list(range(numbers[0], numbers[1] + 1))
        chapters.update(numbers)
    return chapters


def declared_chapters(source: str) -> set[int]:
    """The chapters a module declares: those named in the first two paragraphs of its
    docstring (``(Chapter 12)``, ``(Chapters 7 and 8)``, ``Chapter 2 (...) and Chapter 3``)."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return _chapters_named("\n\n".join(re.split(r"\n\s*\n", doc)[:2]))


def foreign_chapter_citations(modules: Mapping[str, str]) -> list[str]:
    """Citations of a chapter the module does not declare, with no ``Chapter N`` before
    them in the same paragraph of the same comment or docstring."""
    problems = []
    for path, source in modules.items():
        declared = declared_chapters(source)
        for line, text in python_prose(source):
            for offset, (ch, n) in citations_in_text(text):
                if ch in declared:
                    continue
                lines = text.split("\n")
                before = lines[: offset + 1]
                start = max((i for i, x in enumerate(before) if not x.strip()), default=-1) + 1
                if ch not in _chapters_named("\n".join(before[start:])):
                    where = f"declares {sorted(declared)}" if declared else "declares no chapter"
                    problems.append(
                        f"{path}:{line + offset}: ({ch}.{n}) cites Chapter {ch}, but the "
                        f"module {where} and the text does not say 'Chapter {ch}'"
                    )
    return problems


def test_equation_citations_name_a_chapter_the_module_declares():
    """Convention: a module's equation numbers refer to the chapter(s) its docstring
    declares; a number from another chapter says so (``Chapter 4, eq. (4.2)``)."""
    problems = foreign_chapter_citations(_library_modules())
    assert not problems, "\n".join(problems)


def test_the_chapter_checker_reports_a_citation_of_an_undeclared_chapter():
    """Guards the chapter checker itself: a planted citation of another chapter without
    naming it is reported; the module's own chapters and a named chapter are not."""
    module = (
        '"""GPT (Chapter 11).\n'
        "\n"
        "Pre-norm blocks with the causal mask (3.4).\n"
        '"""\n'
        "\n"
        "# (11.1) the loss; Chapter 4, eq. (4.2) post-norm; Chapters 7-8: (8.3)\n"
        "x = 1\n"
        "# as in (4.2)\n"
        "y = 2  # Chapter 8: relative positions\n"
        "z = 3  # RoPE (8.7)\n"
    )
    problems = foreign_chapter_citations({"course_lib/gpt.py": module})
    assert [p.split(": ")[0] for p in problems] == ["course_lib/gpt.py:3", "course_lib/gpt.py:8"]
    assert declared_chapters('"""A (Chapters 7 and 8).\n\nChapter 9 too.\n\nNot 10."""') == {
        7,
        8,
        9,
    }


def test_the_package_docstring_maps_every_module():
    """``course_lib/__init__.py`` lists every module in the book's order, so a student
    sees the whole library on one page (``help(course_lib)``); a new module must be added."""
    import course_lib

    doc = course_lib.__doc__ or ""
    modules = sorted(p.stem for p in LIB.glob("*.py") if not p.stem.startswith("_"))
    missing = [m for m in modules if f"``{m}``" not in doc]
    assert not missing, f"add to the module map in course_lib/__init__.py: {missing}"
