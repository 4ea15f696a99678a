"""The Portuguese edition cannot drift from the English (issue 31).

Translations are data (``i18n/pt/``, one file per source, a marker per unit with the
hash of the English it translates; ``tools/i18n.py``), and the edition ``pt/`` is
generated from them and the English sources. These tests fail:

- naming every stale unit (its English changed since it was translated), every English
  unit without a translation and every translated unit the English no longer has, in
  every translation file, with the command that shows the English diff;
- for every source the issue asks to translate (the chapters, the exercises, the
  introduction, notation, glossary, errata and instructor guide) that has no
  translation file, unless it is listed in ``UNTRANSLATED`` (the translations still
  being written; a listed source that is translated fails until it leaves the list);
- when a translated unit lacks, or adds, any of the English unit's maths, glue keys and
  formats, labels, cross-reference targets, citation keys, directive names, code blocks
  or link targets (a dropped ``$`` breaks the page);
- when a translation uses a form the glossary (``book/glossary.md``) rules out;
- when ``pt/`` is not what ``python tools/i18n.py build --lang pt`` writes, or its
  notebooks' code cells are not the English ones byte for byte (then they would miss the
  English execution cache and run a second time).

The controls run the checks on a temporary copy of the sources with an English cell
edited, and show that each check fails on it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from fnmatch import fnmatchcase
from pathlib import Path

import nbformat
import pytest
import yaml

from tests.conftest import ROOT, load_tool

i18n = load_tool("i18n")
LANG = "pt"

# Sources the edition must translate that are not translated yet (a new chapter or page
# while its translation is being written; empty since every page is translated). A
# ``*`` stands for any characters, ``/`` included; test_untranslated_sources_are_untranslated
# fails as soon as a listed source is translated.
UNTRANSLATED: set[str] = set()


def _name(source: Path) -> str:
    return source.relative_to(ROOT).with_suffix("").as_posix()


def _listed(source: Path) -> bool:
    return any(fnmatchcase(_name(source), entry) for entry in UNTRANSLATED)


TRANSLATED = i18n.translated_sources(LANG)
REQUIRED = i18n.required()
STALE_HELP = "python tools/i18n.py stale --lang pt {}"


def test_the_lists_name_real_sources():
    names = [_name(s) for s in REQUIRED]
    assert len([n for n in names if n.startswith("notebooks/")]) == 14
    assert len([n for n in names if n.startswith("exercises/")]) == 28
    for page in ("intro", "notation", "glossary", "errata", "instructor_guide"):
        assert f"book/{page}" in names
    assert "book/errata/ch01" in names, "the errata's included pages are sources too"
    for entry in UNTRANSLATED:
        assert any(fnmatchcase(n, entry) for n in names), (
            f"UNTRANSLATED lists {entry}: no such source"
        )


@pytest.mark.parametrize("source", TRANSLATED, ids=_name)
def test_translation_is_up_to_date(source):
    """Every unit of the translation translates the English unit as it is now."""
    problems = i18n.problems(source, LANG)
    assert not problems, (
        "\n".join(str(p) for p in problems)
        + f"\n\nSee the English diff: {STALE_HELP.format(source.relative_to(ROOT))}; "
        "translate, then `python tools/i18n.py done FILE UNIT...` (README, Translations)."
    )


@pytest.mark.parametrize("source", [s for s in REQUIRED if not _listed(s)], ids=_name)
def test_every_required_source_is_translated(source):
    path = i18n.translation_path(source, LANG)
    assert path.exists(), (
        f"{_name(source)} has no Portuguese translation: "
        f"`python tools/i18n.py extract {source.relative_to(ROOT)} --lang pt` writes its "
        "skeleton (or list it in UNTRANSLATED while it is being translated)"
    )


def test_untranslated_sources_are_untranslated():
    """A source that has a translation leaves UNTRANSLATED (and is then checked above)."""
    translated = [
        _name(s) for s in REQUIRED if _listed(s) and i18n.translation_path(s, LANG).exists()
    ]
    assert not translated, (
        f"{translated} are translated now: remove them from UNTRANSLATED in {__file__} "
        "(replace a `*` entry by the names still untranslated)"
    )


def _current_units(source: Path):
    """(unit id, English text, translated text) of every up-to-date translated unit."""
    english = dict(i18n.units(source))
    done = i18n.read_translation(i18n.translation_path(source, LANG))
    for uid, (h, text) in done.items():
        if uid in english and h == i18n.en_hash(english[uid]):
            yield uid, english[uid], text


@pytest.mark.parametrize("source", TRANSLATED, ids=_name)
def test_translation_keeps_the_structure(source):
    """Maths, glue keys, labels, references, citations, directives, code, links: as in English."""
    broken = [
        f"{uid}: {'; '.join(found)}"
        for uid, english, text in _current_units(source)
        if (found := i18n.structure_problems(english, text))
    ]
    assert not broken, f"{i18n.translation_path(source, LANG).relative_to(ROOT)}:\n" + "\n".join(
        broken
    )


@pytest.mark.parametrize("source", TRANSLATED, ids=_name)
def test_translation_uses_the_glossary_terms(source):
    terms = i18n.ruled_out_terms()
    wrong = [
        f"{uid}: {', '.join(found)}"
        for uid, english, text in _current_units(source)
        if (found := i18n.term_problems(english, text, terms))
    ]
    assert not wrong, (
        f"{i18n.translation_path(source, LANG).relative_to(ROOT)} uses forms that "
        "book/glossary.md rules out (section 'Forms the edition does not use'):\n"
        + "\n".join(wrong)
    )


def test_glossary_rules_out_the_forms_it_names():
    terms = {form for form, _, _ in i18n.ruled_out_terms()}
    assert {"incorporação", "ficheiro", "ecrã", "treino", "a embedding"} <= terms


def test_edition_is_generated_and_committed_in_sync():
    changed, extra = i18n.build(LANG, check=True)
    names = [p.relative_to(ROOT).as_posix() for p in [*changed, *extra]]
    assert not names, (
        f"pt/ is not what the English sources and i18n/pt/ generate ({names[:8]}): run "
        "`python tools/i18n.py build --lang pt` and commit pt/"
    )


def test_toc_captions_are_translated():
    assert not i18n.untranslated_captions(LANG), "add them to i18n/pt/edition.yml, captions"
    toc = yaml.safe_load((ROOT / LANG / "_toc.yml").read_text())
    english = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [[c["file"] for c in part["chapters"]] for part in toc["parts"]]
    assert files == [[c["file"] for c in part["chapters"]] for part in english["parts"]]


ENGLISH_NOTEBOOKS = [s for s in i18n.sources() if s.suffix == ".ipynb"]


@pytest.mark.parametrize("source", ENGLISH_NOTEBOOKS, ids=_name)
def test_edition_notebook_shares_the_code_and_the_execution_cache(source):
    """The code cells, their metadata and the notebook's metadata are the English ones, so
    jupyter-cache (which hashes code cells with their metadata and the kernelspec) gives
    both notebooks one key: the pt notebook takes the English outputs and never runs."""
    from jupyter_cache.cache.main import JupyterCacheBase

    edition = ROOT / LANG / source.relative_to(ROOT)
    en, pt = (json.loads(p.read_text(encoding="utf-8")) for p in (source, edition))
    assert pt["metadata"] == en["metadata"]
    assert [c["id"] for c in pt["cells"]] == [c["id"] for c in en["cells"]]
    for a, b in zip(en["cells"], pt["cells"], strict=True):
        if a["cell_type"] == "code":
            assert a == b, f"code cell {a['id']} differs"
        else:
            assert {**a, "source": None} == {**b, "source": None}, f"cell {a['id']}'s metadata"
    cache = JupyterCacheBase(str(ROOT / "_build" / "unused-cache"))
    key = [
        cache.create_hashed_notebook(nbformat.read(p, as_version=4))[1] for p in (source, edition)
    ]
    assert key[0] == key[1]
    # byte for byte: each code cell's JSON text is the English text
    en_text, pt_text = source.read_text(encoding="utf-8"), edition.read_text(encoding="utf-8")
    for cell in (c for c in en["cells"] if c["cell_type"] == "code"):
        assert json.dumps(cell, indent=1, ensure_ascii=False).replace("\n", "\n  ") in pt_text
        assert json.dumps(cell, indent=1, ensure_ascii=False).replace("\n", "\n  ") in en_text


@pytest.mark.parametrize("source", ENGLISH_NOTEBOOKS, ids=_name)
def test_edition_notebook_opens_itself_in_colab(source):
    """Its badge and every Colab link of its text open the edition's notebooks (the colab
    branch, tools/colab_edition.py, converts pt/ too)."""
    edition = ROOT / LANG / source.relative_to(ROOT)
    nb = json.loads(edition.read_text(encoding="utf-8"))
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    branch = config["repository"]["branch"]
    rel = source.relative_to(ROOT).as_posix()
    badge = "".join(nb["cells"][0]["source"])
    target = f"https://colab.research.google.com/github/{repo}/blob/{branch}/{LANG}/{rel}"
    assert badge == f"[![Abrir no Colab]({i18n.BADGE})]({target})"
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    links = re.findall(
        rf"https://colab\.research\.google\.com/github/{repo}/blob/{branch}/(\S+?)\)", text
    )
    assert links and all(link.startswith(f"{LANG}/") for link in links), links


@pytest.mark.parametrize("source", [s for s in i18n.sources() if s.suffix == ".md"], ids=_name)
def test_pages_cut_into_units_and_back(source):
    """A page is the join of its units (up to the trailing blank line), so a page
    published untranslated is the English page; unit ids are unique."""
    units = i18n.units(source)
    assert len({uid for uid, _ in units}) == len(units)
    assert i18n.join_page([t for _, t in units]) == source.read_text().rstrip("\n") + "\n"


# ---------------------------------------------------------------------------
# Controls: each check fails where it should
# ---------------------------------------------------------------------------


@pytest.fixture
def copy(tmp_path, monkeypatch):
    """A git repository holding a copy of chapter 1, the introduction and the glossary, with
    a translation of each (chapter 1's: its English text, as ``extract`` writes it), and
    the tool pointed at it."""
    for rel in (
        "_toc.yml",
        "notebooks/ch01_rnn_bottleneck.ipynb",
        "book/intro.md",
        "book/glossary.md",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    for rel in ("i18n/pt/book/intro.md", "i18n/pt/book/glossary.md", "i18n/pt/edition.yml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    monkeypatch.setattr(i18n, "ROOT", tmp_path)
    i18n.extract(tmp_path / "notebooks/ch01_rnn_bottleneck.ipynb", LANG)

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "sources")
    return tmp_path


def test_control_an_edited_english_cell_makes_its_translation_stale(copy):
    notebook = copy / "notebooks/ch01_rnn_bottleneck.ipynb"
    assert i18n.problems(notebook, LANG) == []
    nb = json.loads(notebook.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown" and c["id"] != "colab-badge")
    old = "".join(cell["source"])
    cell["source"] = old.replace("Before attention", "Before attention was invented", 1)
    assert cell["source"] != old
    new = {"cell_type": "markdown", "id": "new-cell", "metadata": {}, "source": ["A new cell."]}
    nb["cells"].insert(3, new)
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    found = {(p.unit, p.kind) for p in i18n.problems(notebook, LANG)}
    assert found == {(cell["id"], "stale"), ("new-cell", "missing")}
    # the report shows the English diff, the old text found in git history
    report = i18n.stale_report(LANG, [notebook])
    assert f"{cell['id']} is stale" in report and "new-cell has no translation" in report
    assert re.search(r"^-Before attention, ", report, re.M), report
    assert re.search(r"^\+Before attention was invented, ", report, re.M), report
    # the published notebook says the English now, not the stale translation
    nb_pt = json.loads(i18n.render_notebook(notebook, LANG))
    published = "".join(next(c for c in nb_pt["cells"] if c["id"] == cell["id"])["source"])
    assert published == i18n.localize(cell["source"], LANG)
    # `update` adds the new cell as stale, `done` marks it translated
    i18n.update(notebook, LANG)
    assert ("new-cell", "stale") in {(p.unit, p.kind) for p in i18n.problems(notebook, LANG)}
    i18n.done(i18n.translation_path(notebook, LANG), LANG, ["new-cell", cell["id"]])
    assert i18n.problems(notebook, LANG) == []


def test_control_an_edited_page_section_is_stale_and_published_in_english(copy):
    page = copy / "book/intro.md"
    assert i18n.problems(page, LANG) == []
    assert "Pré-requisitos" in i18n.render_page(page, LANG)
    page.write_text(page.read_text().replace("Basic probability", "Elementary probability"))
    assert [(p.unit, p.kind) for p in i18n.problems(page, LANG)] == [("prerequisites", "stale")]
    published = i18n.render_page(page, LANG)
    assert "Elementary probability" in published and "Pré-requisitos" not in published
    assert "## Como usar o curso como estudante" in published  # the others stay translated
    # a renamed heading: its translation is orphaned and the new section missing
    page.write_text(page.read_text().replace("## Conventions", "## Notation and shapes"))
    kinds = {(p.unit, p.kind) for p in i18n.problems(page, LANG)}
    assert {("conventions", "orphan"), ("notation-and-shapes", "missing")} <= kinds


def test_control_structure_check_finds_a_dropped_dollar_and_changed_keys():
    english = dict(i18n.units(ROOT / "book/glossary.md"))["glossary"]
    translated = i18n.read_translation(ROOT / "i18n/pt/book/glossary.md")["glossary"][1]
    assert i18n.structure_problems(english, translated) == []
    broken = translated.replace("$h_t$", "h_t$", 1)
    assert any("math" in p for p in i18n.structure_problems(english, broken))
    en = (
        "See {numref}`Figure %s <fig-a>`, {cite:p}`vaswani2017`, {glue:text}`acc:.2f`.\n\n"
        "(sec-a)=\n```{figure} ../book/figures/a.svg\n:name: fig-a\n:alt: An A.\n\nA.\n```\n"
    )
    good = (
        "Veja a {numref}`Figura %s <fig-a>`, {cite:p}`vaswani2017`, {glue:text}`acc:.2f`.\n\n"
        "(sec-a)=\n```{figure} ../book/figures/a.svg\n:name: fig-a\n:alt: Um A.\n\nUm A.\n```\n"
    )
    assert i18n.structure_problems(en, good) == []
    for wrong in (
        good.replace("acc:.2f", "acc:.3f"),
        good.replace("<fig-a>", "<fig-b>"),
        good.replace("vaswani2017", "vaswani2018"),
        good.replace("(sec-a)=", "(sec-b)="),
        good.replace("{figure}", "{image}"),
        good.replace(":name: fig-a", ":name: fig-z"),
    ):
        assert i18n.structure_problems(en, wrong), wrong


def test_control_a_ruled_out_term_is_found():
    terms = i18n.ruled_out_terms()
    assert i18n.term_problems("Save the file.", "Salve o ficheiro.", terms)
    assert i18n.term_problems("the embedding", "a embedding de cada token", terms)
    assert not i18n.term_problems("the embedding", "o embedding de cada token", terms)
    # code, maths and an English unit that quotes the form (as the glossary does) are exempt
    assert not i18n.term_problems("x", "`ficheiro = 1` e $treino$", terms)
    assert not i18n.term_problems("avoid: treino", "evitar: treino", terms)
