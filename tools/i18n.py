"""Translations of the course, kept as data beside the English source (issue 31).

One file per translated source, ``i18n/<lang>/<path of the source>.md``, holds the
translation of each of its units, each under a marker naming the unit and the English
text it translates:

    <!-- cell: ch01-intro en: 3f2a9c1b7d04 -->
    # O gargalo de uma RNN
    ...

``en`` is the first 12 hex digits of the SHA-256 of the English unit (:func:`en_hash`).
When the English unit changes its hash changes, and the translation is stale until
someone updates it (and its marker). The units of a source:

- a notebook (``notebooks/``, ``exercises/``): its Markdown cells, keyed by cell id (the
  Colab badge excepted: it is generated for each edition). Code cells are never
  translated: the translated notebook takes them, and their metadata, verbatim.
  ``exercises/`` is generated from ``solutions/`` by ``course_grader sync``, which keeps
  the cell ids and drops the model answers; the translation is of what the student
  reads, the exercise's cells.
- a Markdown page (``book/*.md`` and the pages they include): cut at every heading
  outside code and directives; a unit runs from its heading to the next one, and its id
  is the MyST label right above the heading if there is one, else the heading's slug
  (the section's HTML anchor). A heading's anchor is what links point at, so it is the
  most stable name a section has; renaming a heading shows as a removed unit and a new
  one, and ``stale`` shows the old text beside the new.

The edition (``<lang>/`` at the repository root, e.g. ``pt/``) is generated from the
English sources and these files by ``build`` and committed (Colab opens notebooks from
the repository); a unit whose translation is missing or stale is written in English, so
the edition always says what the English says now. ``tests/test_i18n.py`` fails naming
every stale or missing unit.

    python tools/i18n.py extract notebooks/ch01_rnn_bottleneck.ipynb --lang pt  # a new file
    python tools/i18n.py stale --lang pt          # stale and missing units, with the English diff
    python tools/i18n.py done i18n/pt/notebooks/ch01_rnn_bottleneck.md CELL...  # re-hash
    python tools/i18n.py update --lang pt         # add new English units, drop removed ones
    python tools/i18n.py build --lang pt [--check]  # write (or compare) the edition pt/
    python tools/i18n.py site --lang pt --out _build/html/pt  # build its website
"""

from __future__ import annotations

import argparse
import copy
import difflib
import hashlib
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: Markdown cells that tools write (the Colab badge): generated for each edition, never
#: translated by hand.
GENERATED_CELLS = {"colab-badge"}
MARKER = re.compile(r"^<!-- cell: (?P<id>\S+) en: (?P<en>[0-9a-f]{12}) -->$", re.M)
#: The hash ``update`` gives a unit it adds: never an English text's, so stale until done.
PLACEHOLDER = "0" * 12
COLAB = "https://colab.research.google.com/github/"
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


def en_hash(source: str) -> str:
    """The first 12 hex digits of the SHA-256 of an English unit's text."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


# ---------------------------------------------------------------------------
# Units: what is translated, and its id
# ---------------------------------------------------------------------------


def _cells(nb: dict) -> list[tuple[str, str]]:
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and cell.get("id") not in GENERATED_CELLS:
            source = cell["source"]
            cells.append((cell["id"], "".join(source) if isinstance(source, list) else source))
    return cells


def markdown_cells(notebook: Path) -> list[tuple[str, str]]:
    """(cell id, source) of every Markdown cell of ``notebook`` that is translated."""
    return _cells(json.loads(notebook.read_text(encoding="utf-8")))


FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,}|:{3,})")
HEADING = re.compile(r"^#{1,6}[ \t]+(?P<text>.+?)[ \t]*$")
LABEL = re.compile(r"^\((?P<label>[^()\s]+)\)=[ \t]*$")


def _slug(text: str) -> str:
    from docutils.nodes import make_id

    return make_id(text) or "section"


def page_units(text: str) -> list[tuple[str, str]]:
    """(id, text) of each unit of a Markdown page: cut at headings outside fences."""
    lines = text.splitlines()
    starts: list[tuple[int, str]] = []
    fence = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if fence:
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = None
            continue
        opened = FENCE_OPEN.match(line)
        if opened:
            fence = opened["fence"]
            continue
        heading = HEADING.match(line)
        if heading and not line.startswith("#!"):
            start, uid = i, _slug(heading["text"])
            above = i - 1
            while above >= 0 and not lines[above].strip():
                above -= 1
            label = LABEL.match(lines[above]) if above >= 0 else None
            if label and (not starts or starts[-1][0] < above):
                start, uid = above, label["label"]
            starts.append((start, uid))
    if not starts or any(line.strip() for line in lines[: starts[0][0]]):
        starts.insert(0, (0, "preamble"))
    units, seen = [], Counter()
    for k, (start, uid) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        seen[uid] += 1
        name = uid if seen[uid] == 1 else f"{uid}-{seen[uid]}"
        units.append((name, "\n".join(lines[start:end]).strip("\n")))
    return units


def join_page(units: list[str]) -> str:
    """A page from its units' texts (the inverse of :func:`page_units`)."""
    return "\n\n".join(u.strip("\n") for u in units) + "\n"


def units(source: Path, text: str | None = None) -> list[tuple[str, str]]:
    """(id, English text) of every translated unit of a source (notebook or page)."""
    text = source.read_text(encoding="utf-8") if text is None else text
    if source.suffix == ".ipynb":
        return _cells(json.loads(text))
    return page_units(text)


def _included(page: Path) -> list[Path]:
    """The pages a page includes (``{include}`` directives), recursively."""
    out = []
    for m in re.finditer(r"^```+\{include\}[ \t]+(\S+)", page.read_text(), re.M):
        path = (page.parent / m.group(1)).resolve()
        out += [path, *_included(path)]
    return out


def toc_files(root: Path | None = None) -> list[str]:
    """Every page of the English book's table of contents (paths without suffix)."""
    root = root or ROOT
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            files.append(chapter["file"])
            files.extend(s["file"] for s in chapter.get("sections", []))
    return files


def sources(root: Path | None = None) -> list[Path]:
    """Every English source of an edition: the book's pages, what they include."""
    root = root or ROOT
    out = []
    for name in toc_files(root):
        for suffix in (".ipynb", ".md"):
            path = root / f"{name}{suffix}"
            if path.exists():
                out.append(path)
                if suffix == ".md":
                    out += [p for p in _included(path) if p not in out]
    return out


#: The sources the issue asks to translate (issue 31): every chapter and exercise, and
#: these pages with what they include. The status page (generated tables and the
#: project's machinery) and the reference list are built in the edition, untranslated.
REQUIRED_PAGES = ("book/intro", "book/notation", "book/glossary", "book/errata")
REQUIRED_PAGES += ("book/instructor_guide",)


def required(root: Path | None = None) -> list[Path]:
    """The sources every edition must translate (see REQUIRED_PAGES)."""
    root = root or ROOT
    pages = []
    for name in REQUIRED_PAGES:
        pages += [root / f"{name}.md", *_included(root / f"{name}.md")]
    notebooks = [p for p in sources(root) if p.suffix == ".ipynb"]
    return notebooks + pages


def translation_path(source: Path, lang: str) -> Path:
    """Where the translation of ``source`` (a path inside the repository) lives."""
    rel = source.resolve().relative_to(ROOT)
    return ROOT / "i18n" / lang / rel.with_suffix(".md")


def source_of(translation: Path, lang: str) -> Path:
    """The English source a translation file translates (notebook or page)."""
    rel = translation.resolve().relative_to(ROOT / "i18n" / lang).with_suffix("")
    for suffix in (".ipynb", ".md"):
        if (ROOT / rel).with_suffix(suffix).exists():
            return (ROOT / rel).with_suffix(suffix)
    raise FileNotFoundError(f"{translation}: no English source {rel}.ipynb or {rel}.md")


def read_translation(path: Path) -> dict[str, tuple[str, str]]:
    """cell id -> (English hash, translated text) of a translation file."""
    text = path.read_text(encoding="utf-8")
    marks = list(MARKER.finditer(text))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[m["id"]] = (m["en"], text[m.end() : end].strip("\n"))
    return out


def write_translation(path: Path, entries: list[tuple[str, str, str]]) -> None:
    """Write (id, English hash, text) entries as a translation file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"<!-- cell: {uid} en: {h} -->\n{text.strip()}\n" for uid, h, text in entries]
    path.write_text("\n".join(parts), encoding="utf-8")


def extract(source: Path, lang: str) -> Path:
    """Write the skeleton translation file of ``source``: each marker, then its English."""
    if source.resolve() not in sources():
        hint = ""
        if source.parent.name == "solutions":
            hint = (
                f": translate exercises/{source.name}, what the student reads (`course_grader "
                "sync` writes it from the solution, with the same cell ids)"
            )
        sys.exit(f"{source} is not a page of the book{hint}")
    path = translation_path(source, lang)
    if path.exists():
        sys.exit(f"{path} exists already: edit it (or delete it to start again)")
    write_translation(path, [(uid, en_hash(src), src) for uid, src in units(source)])
    return path


def update(source: Path, lang: str) -> list[str]:
    """Bring a translation file to the English units: add each new unit (its English text
    under a placeholder hash, so it counts as stale until translated), drop the units the
    English no longer has, follow the English order. Returns what it changed."""
    path = translation_path(source, lang)
    old = read_translation(path)
    english = units(source)
    entries, changes = [], []
    for uid, text in english:
        if uid in old:
            entries.append((uid, *old[uid]))
        else:
            entries.append((uid, PLACEHOLDER, text))
            changes.append(f"added {uid} (English text, to translate)")
    ids = {uid for uid, _ in english}
    changes += [f"dropped {uid} (no such English unit)" for uid in old if uid not in ids]
    if changes or list(old) != [uid for uid, _ in english]:
        write_translation(path, entries)
    return changes


def done(path: Path, lang: str, ids: list[str]) -> None:
    """Mark units of a translation file as up to date with the English they translate."""
    english = dict(units(source_of(path, lang)))
    entries = read_translation(path)
    unknown = [i for i in ids if i not in entries or i not in english]
    if unknown:
        sys.exit(f"{path}: no unit {unknown} in the translation and its English source")
    write_translation(
        path,
        [(uid, en_hash(english[uid]) if uid in ids else h, t) for uid, (h, t) in entries.items()],
    )


# ---------------------------------------------------------------------------
# Checks: stale units, structure, terminology
# ---------------------------------------------------------------------------


class Problem(NamedTuple):
    """A unit of a translation that does not match the English now."""

    source: Path
    unit: str
    kind: str  # "stale", "missing", "orphan", "no file"
    recorded: str = ""  # the English hash the translation records

    def __str__(self) -> str:
        rel = self.source.relative_to(ROOT)
        return {
            "stale": f"{rel}: {self.unit} is stale (the English changed since it was translated)",
            "missing": f"{rel}: {self.unit} has no translation (a new English unit)",
            "orphan": f"{rel}: {self.unit} is translated but the English has no such unit",
            "no file": f"{rel}: not translated (no translation file)",
        }[self.kind]


def problems(source: Path, lang: str) -> list[Problem]:
    """Every stale, missing or orphan unit of one source's translation."""
    path = translation_path(source, lang)
    if not path.exists():
        return [Problem(source, "-", "no file")]
    done_ = read_translation(path)
    english = units(source)
    out = []
    for uid, text in english:
        if uid not in done_:
            out.append(Problem(source, uid, "missing"))
        elif done_[uid][0] != en_hash(text):
            out.append(Problem(source, uid, "stale", done_[uid][0]))
    ids = {uid for uid, _ in english}
    out += [Problem(source, uid, "orphan", h) for uid, (h, _) in done_.items() if uid not in ids]
    return out


def translated_sources(lang: str) -> list[Path]:
    """The English source of every translation file of ``lang``."""
    folder = ROOT / "i18n" / lang
    return [source_of(p, lang) for p in sorted(folder.rglob("*.md"))]


ROLE = re.compile(r"\{(?P<role>[a-zA-Z][\w:+-]*)\}(?P<tick>`+)(?P<body>.*?)(?P=tick)", re.S)
DIRECTIVE = re.compile(r"^\s*(?:`{3,}|:{3,})\s*\{(?P<name>[\w:+-]+)\}[ \t]*(?P<arg>.*)$", re.M)
OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$", re.M)
INLINE_CODE = re.compile(r"(?P<tick>`+)(?!`).+?(?<!`)(?P=tick)(?!`)", re.S)
DISPLAY_MATH = re.compile(r"\$\$(?P<math>.+?)\$\$", re.S)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?P<math>[^$]+?)(?<!\\)\$", re.S)
ENVIRONMENT = re.compile(r"\\begin\{(?P<env>[\w*]+)\}.*?\\end\{(?P=env)\}", re.S)
TARGET = re.compile(r"^\((?P<label>[^()\s]+)\)=[ \t]*$", re.M)
LINK = re.compile(r"\]\((?P<url>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
#: Directive arguments that are paths (kept); other arguments are titles (translated).
PATH_ARGUMENTS = {"figure", "image", "include", "literalinclude", "bibliography"}
#: Directive options whose values are prose (translated); the others are kept.
PROSE_OPTIONS = {"alt", "caption", "title"}
#: Roles whose content is a reference with an optional visible text, ``text <target>``.
REF_ROLES = {"ref", "numref", "doc", "eq", "prf:ref", "term", "download", "any"}


def split_code(text: str) -> tuple[str, list[str]]:
    """(the text without its code blocks, the code blocks): a fence whose info string
    is not a ``{directive}`` opens a code block; a directive's fences are kept, and so is
    what is inside them (it is Markdown)."""
    out, code, directives = [], [], []
    block: tuple[str, list[str]] | None = None
    for line in text.splitlines(keepends=True):
        bare = line.strip()
        if block is not None:
            if bare and set(bare) == {block[0][0]} and len(bare) >= len(block[0]):
                code.append("".join(block[1]))
                block = None
            else:
                block[1].append(line)
            continue
        opened = FENCE_OPEN.match(line)
        if opened:
            fence, rest = opened["fence"], line.strip()[len(opened["fence"]) :]
            top = directives[-1] if directives else None
            if not rest.strip() and top and fence[0] == top[0] and len(fence) >= len(top):
                directives.pop()
            elif rest.lstrip().startswith("{") or fence[0] == ":":
                directives.append(fence)
            else:
                block = (fence, [])
                continue
        out.append(line)
    if block is not None:
        code.append("".join(block[1]))
    return "".join(out), code


def _norm(text: str) -> str:
    return " ".join(text.split())


#: Words inside maths that a translation translates: ``\text{if }`` becomes ``\text{se }``.
MATH_TEXT = re.compile(r"\\(?:text|textrm|textit|mbox)\{[^{}]*\}")


def _math(text: str) -> str:
    return _norm(MATH_TEXT.sub(r"\\text{...}", text))


def signature(text: str) -> Counter:
    """What must survive a translation unchanged: maths, roles' targets (glue keys and
    formats, labels referred to, citation keys, documents), labels, directive names
    (with their path arguments and non-prose options), code blocks, link targets."""
    found: Counter = Counter()
    text, code = split_code(text)
    for block in code:
        found["code block", _norm(block)] += 1
    for m in DIRECTIVE.finditer(text):
        found["directive", m["name"]] += 1
        if m["name"] in PATH_ARGUMENTS:
            found[f"{{{m['name']}}} argument", m["arg"].strip()] += 1
    for m in OPTION.finditer(text):
        value = "(translated)" if m["key"] in PROSE_OPTIONS else m["value"].strip()
        found[f":{m['key']}:", value] += 1
    for m in TARGET.finditer(text):
        found["label", m["label"]] += 1
    for m in ROLE.finditer(text):
        role, body = m["role"], m["body"]
        if role.startswith("cite"):
            for key in body.split(","):
                found["citation", key.strip()] += 1
            found["role", role] += 1
        elif role in REF_ROLES:
            target = re.search(r"<([^<>]+)>\s*$", body)
            found[f"{{{role}}}", (target.group(1) if target else body).strip()] += 1
        else:  # glue, math, sub-ref, ...: the whole content
            found[f"{{{role}}}", _norm(body)] += 1
    text = ROLE.sub(" ", text)
    text = INLINE_CODE.sub(" ", text)
    text = text.replace("\\$", "")
    for pattern in (DISPLAY_MATH, INLINE_MATH):
        for m in pattern.finditer(text):
            found["math", _math(m["math"])] += 1
        text = pattern.sub(" ", text)
    for m in ENVIRONMENT.finditer(text):
        found["math", _math(m.group(0))] += 1
    for m in LINK.finditer(text):
        found["link", m["url"]] += 1
    for m in HTML_COMMENT.finditer(text):
        found["comment", _norm(m.group(0))] += 1
    return found


def structure_problems(english: str, translated: str) -> list[str]:
    """What the English unit has and its translation lacks, and the reverse."""
    en, tr = signature(english), signature(translated)
    out = []
    for (kind, value), n in sorted((en - tr).items()):
        out.append(f"missing {kind} {value[:70]!r}" + (f" (x{n})" if n > 1 else ""))
    for (kind, value), n in sorted((tr - en).items()):
        out.append(f"extra {kind} {value[:70]!r}" + (f" (x{n})" if n > 1 else ""))
    return out


def prose(text: str) -> str:
    """The words of a unit a reader reads as prose: no code, maths, link targets,
    comments; a reference role's visible text is kept."""
    text = HTML_COMMENT.sub(" ", split_code(text)[0])

    def visible(m: re.Match) -> str:
        shown = re.match(r"^(.*?)\s*<[^<>]+>\s*$", m["body"], re.S)
        return shown.group(1) if (m["role"] in REF_ROLES and shown) else " "

    text = ROLE.sub(visible, text)
    text = INLINE_CODE.sub(" ", text).replace("\\$", "")
    for pattern in (DISPLAY_MATH, INLINE_MATH, ENVIRONMENT):
        text = pattern.sub(" ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"https?://\S+", " ", text)


GLOSSARY = ROOT / "book" / "glossary.md"
#: The label of the glossary's table of forms the edition does not use.
AVOID_LABEL = "glossary-pt-avoid"


def ruled_out_terms(glossary: Path = GLOSSARY) -> list[tuple[str, str, str]]:
    """(form to avoid, what to write instead, why) from the glossary's table under the
    label ``glossary-pt-avoid``; a cell may list several forms, comma-separated."""
    unit = dict(page_units(glossary.read_text(encoding="utf-8"))).get(AVOID_LABEL)
    if unit is None:
        raise ValueError(f"{glossary} has no section labelled ({AVOID_LABEL})=")
    out = []
    for line in unit.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or set(cells[0]) <= set("-: ") or cells[0] == "avoid":
            continue
        for form in cells[0].split(","):
            out.append((form.strip().strip('*"“”'), cells[1], cells[2]))
    return out


def term_problems(english: str, translated: str, terms) -> list[str]:
    """The ruled-out forms a translated unit uses in its prose (unless the English unit
    itself quotes them, as the glossary does)."""
    text, original = prose(translated), prose(english)
    found = []
    for form, instead, _why in terms:
        pattern = re.compile(rf"(?<!\w){re.escape(form)}(?!\w)", re.I)
        if pattern.search(text) and not pattern.search(original):
            found.append(f"{form!r} (write {instead})")
    return found


# ---------------------------------------------------------------------------
# The old English text of a stale unit, from git history
# ---------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout


def english_at(source: Path, uid: str, recorded: str) -> tuple[str, str] | None:
    """(commit, English text) of the unit whose hash a translation records: the newest
    committed version of ``source`` in which the unit (or, after a heading was renamed,
    any unit) had that text."""
    rel = source.relative_to(ROOT).as_posix()
    for commit in _git("log", "--format=%H", "--", rel).split():
        try:
            old = units(source, _git("show", f"{commit}:{rel}"))
        except (ValueError, KeyError):
            continue
        by_id = dict(old)
        if uid in by_id and en_hash(by_id[uid]) == recorded:
            return commit, by_id[uid]
        for _, text in old:
            if en_hash(text) == recorded:
                return commit, text
    return None


def stale_report(lang: str, only: list[Path] | None = None) -> str:
    """Every stale, missing or orphan unit of the translated sources, with the English
    diff (the text translated, found in git history, against the text now)."""
    out = []
    for source in only or translated_sources(lang):
        english = dict(units(source))
        for p in problems(source, lang):
            out.append(f"== {p}")
            if p.kind == "missing":
                out.append(english[p.unit])
            elif p.kind == "stale":
                old = english_at(source, p.unit, p.recorded)
                if old is None:
                    out.append(f"(no committed English version hashes to {p.recorded}; now:)")
                    out.append(english[p.unit])
                    continue
                rel = source.relative_to(ROOT)
                out += difflib.unified_diff(
                    old[1].splitlines(),
                    english[p.unit].splitlines(),
                    f"{rel} {p.unit} at {old[0][:10]} (translated)",
                    f"{rel} {p.unit} now",
                    lineterm="",
                )
    return "\n".join(out)


# ---------------------------------------------------------------------------
# The edition: notebooks, pages, configuration, table of contents
# ---------------------------------------------------------------------------


def edition(lang: str) -> dict:
    """The edition's settings and words (``i18n/<lang>/edition.yml``)."""
    return yaml.safe_load((ROOT / "i18n" / lang / "edition.yml").read_text(encoding="utf-8"))


FIGURE_PATH = re.compile(
    r"^(?P<head>[ \t]*(?:`{3,}|:{3,})[ \t]*\{(?:figure|image)\}[ \t]+)(?!/|[a-z]+://)", re.M
)
COLAB_LINK = re.compile(
    re.escape(COLAB) + r"(?P<repo>[^/\s()]+/[^/\s()]+)/blob/(?P<branch>[^/\s()]+)/"
)


def localize(text: str, lang: str) -> str:
    """A unit's Markdown as the edition needs it, one folder down (``<lang>/``): paths of
    figures point one level up, Colab links open the edition's notebooks."""
    text = FIGURE_PATH.sub(r"\g<head>../", text)
    edition_link = re.compile(COLAB_LINK.pattern + r"(?=(?:notebooks|exercises)/)")
    return edition_link.sub(lambda m: m.group(0) + f"{lang}/", text)


def _translated(source: Path, lang: str) -> dict[str, str]:
    """unit id -> text to publish: the translation where it is up to date."""
    path = translation_path(source, lang)
    done_ = read_translation(path) if path.exists() else {}
    return {
        uid: done_[uid][1] if uid in done_ and done_[uid][0] == en_hash(text) else text
        for uid, text in units(source)
    }


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def render_notebook(source: Path, lang: str) -> str:
    """The edition's notebook: the English one with its Markdown cells translated and its
    Colab badge opening the edition's copy; code cells and all metadata unchanged."""
    text = source.read_text(encoding="utf-8")
    nb = json.loads(text)
    words = edition(lang)["words"]
    published = _translated(source, lang)
    rel = source.relative_to(ROOT).as_posix()
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        if cell.get("id") in GENERATED_CELLS:
            badge = "".join(cell["source"])
            target = COLAB_LINK.search(badge)
            url = f"{target.group(0)}{lang}/{rel}" if target else badge
            cell["source"] = _lines(f"[![{words['open_in_colab']}]({BADGE})]({url})")
        else:
            cell["source"] = _lines(localize(published[cell["id"]], lang))
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def render_page(source: Path, lang: str) -> str:
    published = _translated(source, lang)
    return join_page([localize(published[uid], lang) for uid, _ in units(source)])


GENERATED_NOTE = (
    "# Generated by `python tools/i18n.py build --lang {lang}` from ../{name}: do not edit.\n"
)


def render_config(lang: str) -> str:
    """The edition's ``_config.yml``: the English one, with the edition's title and
    language, paths from one folder down, and the Colab buttons opening ``<lang>/``."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    words = edition(lang)
    config = copy.deepcopy(config)
    config["title"] = words["title"]
    config["bibtex_bibfiles"] = [f"../{p}" for p in config["bibtex_bibfiles"]]
    config["repository"]["path_to_book"] = lang
    sphinx = config["sphinx"]
    sphinx["local_extensions"] = {k: f"../{v}" for k, v in sphinx["local_extensions"].items()}
    conf = sphinx["config"]
    conf["html_static_path"] = [f"../{p}" for p in conf["html_static_path"]]
    conf["language"] = words["language"]
    conf["numfig_format"] = {**conf.get("numfig_format", {}), **words["numfig_format"]}
    conf["course_edition"] = lang
    body = yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=100)
    return GENERATED_NOTE.format(lang=lang, name="_config.yml") + body


def render_toc(lang: str) -> str:
    """The edition's ``_toc.yml``: the English one with the parts' captions translated."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    captions = edition(lang)["captions"]
    for part in toc.get("parts", []):
        if part.get("caption"):
            part["caption"] = captions.get(part["caption"], part["caption"])
    body = yaml.safe_dump(toc, sort_keys=False, allow_unicode=True, width=100)
    return GENERATED_NOTE.format(lang=lang, name="_toc.yml") + body


def untranslated_captions(lang: str) -> list[str]:
    """The parts' captions of _toc.yml that the edition does not translate."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    captions = edition(lang)["captions"]
    return [p["caption"] for p in toc.get("parts", []) if p.get("caption") not in captions]


def generate(lang: str) -> dict[Path, str]:
    """Every file of the edition ``<lang>/``: path -> text."""
    out = {
        ROOT / lang / "_config.yml": render_config(lang),
        ROOT / lang / "_toc.yml": render_toc(lang),
    }
    for source in sources():
        target = ROOT / lang / source.relative_to(ROOT)
        render = render_notebook if source.suffix == ".ipynb" else render_page
        out[target] = render(source, lang)
    return out


def build(lang: str, check: bool = False) -> tuple[list[Path], list[Path]]:
    """Write the edition (or, with ``check``, only compare): (changed, removed) paths."""
    files = generate(lang)
    changed = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    folder = ROOT / lang
    extra = [
        p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p not in files and p.suffix in {".ipynb", ".md", ".yml"}
    ]
    if not check:
        for path in changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[path], encoding="utf-8")
        for path in extra:
            path.unlink()
    return changed, extra


# ---------------------------------------------------------------------------
# The edition's website
# ---------------------------------------------------------------------------


def uncached(lang: str, cache: Path) -> list[str]:
    """The edition's executed notebooks that the execution cache does not hold (their
    English notebook failed or has not run): the edition's build does not execute them."""
    import nbformat
    from jupyter_cache import get_cache

    config = yaml.safe_load((ROOT / lang / "_config.yml").read_text())
    skip = config.get("execute", {}).get("exclude_patterns", [])
    jc = get_cache(str(cache))
    missing = []
    for path in sorted((ROOT / lang).rglob("*.ipynb")):
        rel = path.relative_to(ROOT / lang).as_posix()
        if any(Path(rel).match(pattern) for pattern in skip):
            continue
        try:
            jc.match_cache_notebook(nbformat.read(path, as_version=4))
        except KeyError:
            missing.append(rel)
    return missing


def site(lang: str, out: Path, cache: Path, strict: bool, keep_going: bool, nitpicky: bool) -> int:
    """Build the edition's website into ``out`` (normally ``_build/html/<lang>``), its
    notebooks' outputs from the English build's execution cache ``cache``; a notebook the
    cache does not hold is built without outputs, never executed (a warning says so).
    Sphinx works in ``_build/<lang>`` (its doctrees and MyST-NB's output folder stay out
    of the published site), then the HTML is copied to ``out``."""
    import shutil

    from jupyter_book.sphinx import build_sphinx

    config = yaml.safe_load((ROOT / lang / "_config.yml").read_text())
    missing = uncached(lang, cache)
    for rel in missing:
        print(
            f"WARNING: {lang}/{rel}: not in the execution cache (its English notebook failed "
            "or did not run): built without outputs rather than executed a second time"
        )
    overrides = {
        "nb_execution_cache_path": str(cache),
        "nb_execution_excludepatterns": [
            *config.get("execute", {}).get("exclude_patterns", []),
            *missing,
        ],
        "latex_individualpages": False,
    }
    if nitpicky:
        overrides["nitpicky"] = True
    work = ROOT / "_build" / lang / "html"
    result = build_sphinx(
        ROOT / lang,
        work,
        noconfig=True,
        path_config=str(ROOT / lang / "_config.yml"),
        confoverrides=overrides,
        doctreedir=ROOT / "_build" / lang / ".doctrees",
        warningiserror=strict,
        keep_going=keep_going,
    )
    if result:
        return int(result) if isinstance(result, int) else 1
    shutil.copytree(work, out, dirs_exist_ok=True)
    return 0


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def _paths(names: list[Path]) -> list[Path]:
    return [(Path.cwd() / n).resolve() for n in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="write the skeleton translation of sources")
    ex.add_argument("sources", nargs="+", type=Path)
    up = sub.add_parser("update", help="add new English units to translation files, drop gone ones")
    up.add_argument("sources", nargs="*", type=Path, help="default: every translated source")
    st = sub.add_parser("stale", help="list stale and missing units, with the English diff")
    st.add_argument("sources", nargs="*", type=Path, help="default: every translated source")
    dn = sub.add_parser("done", help="mark units of a translation file as up to date")
    dn.add_argument("file", type=Path)
    dn.add_argument("units", nargs="+")
    bd = sub.add_parser("build", help="write the edition <lang>/ from the English sources")
    bd.add_argument("--check", action="store_true", help="exit 1 if <lang>/ is out of date")
    si = sub.add_parser("site", help="build the edition's website (the book's build runs it)")
    si.add_argument("--out", type=Path, default=ROOT / "_build" / "html")
    si.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    si.add_argument("-W", dest="strict", action="store_true")
    si.add_argument("--keep-going", action="store_true")
    si.add_argument("-n", dest="nitpicky", action="store_true")
    for p in (ex, up, st, dn, bd, si):
        p.add_argument("--lang", default="pt")
    args = parser.parse_args(argv)
    lang = args.lang
    if args.command == "extract":
        for source in _paths(args.sources):
            print(extract(source, lang).relative_to(ROOT))
    elif args.command == "update":
        for source in _paths(args.sources) or translated_sources(lang):
            for change in update(source, lang):
                print(f"{translation_path(source, lang).relative_to(ROOT)}: {change}")
    elif args.command == "stale":
        report = stale_report(lang, _paths(args.sources) or None)
        print(report or "every translated unit is up to date")
        return 1 if report else 0
    elif args.command == "done":
        done(_paths([args.file])[0], lang, args.units)
    elif args.command == "build":
        changed, extra = build(lang, check=args.check)
        verb = ("out of date", "not generated") if args.check else ("wrote", "removed")
        for path in changed:
            print(f"{verb[0]}: {path.relative_to(ROOT)}")
        for path in extra:
            print(f"{verb[1]}: {path.relative_to(ROOT)}")
        if args.check and (changed or extra):
            print(f"run `python tools/i18n.py build --lang {lang}` and commit {lang}/")
            return 1
    elif args.command == "site":
        out = args.out if args.out.name == lang else args.out / lang
        return site(lang, out, args.cache.resolve(), args.strict, args.keep_going, args.nitpicky)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
