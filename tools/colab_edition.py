"""The Colab edition: the chapter and exercise notebooks with MyST turned into Markdown.

Colab renders Markdown, not MyST, so a chapter opened from GitHub would show
``{cite:p}`vaswani2017``` where the website shows "(Vaswani et al., 2017)".
This script writes a copy of every chapter and exercise notebook whose
Markdown cells use only what Colab renders; code cells are unchanged:

- citations (``{cite:p}``, ``{cite:t}``) become author-year text, and a
  "References" cell at the end lists the works cited;
- ``{numref}`` becomes "Figure 3.2", numbered as the website numbers it;
- ``{figure}`` directives become Markdown images with absolute URLs on the
  published site (the alt text kept) and the caption below;
- theorems and proofs become headed paragraphs, admonitions block quotes;
- ``{doc}`` links point to the website;
- ``{glue:text}`` numbers become the values the book's build computed (read
  from the execution cache), or, when none is there and ``--strict`` is off,
  a note that the notebook computes it below.

    python tools/colab_edition.py --out _build/colab [--cache _build/.jupyter_cache] [--strict]

The website's workflow publishes the result on the ``colab`` branch, which
every "Open in Colab" link opens. Nothing there is edited by hand.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = "https://attention-models-course.github.io/attention-models"
COLAB_BRANCH = "colab"

ROLE = re.compile(r"\{([a-zA-Z][\w:+-]*)\}`([^`]*)`")
FENCE = re.compile(
    r"^(?P<fence>```+|:::+)\s*\{(?P<name>[\w:+-]+)\}[ \t]*(?P<arg>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.M | re.S,
)
OPTION = re.compile(r"^:(\w[\w-]*):[ \t]*(.*)$")
#: What no Colab notebook may contain: a MyST role or directive, a target, an option line.
LEFTOVER = re.compile(r"\{[a-zA-Z][\w:+-]*\}`|^\s*(?:```+|:::+)\s*\{|^\s*\([\w-]+\)=\s*$", re.M)


class ConversionError(ValueError):
    """A construct the converter does not know, or a value it cannot find."""


# ---------------------------------------------------------------------------
# What the conversion needs to know: citations, figure numbers, glued values
# ---------------------------------------------------------------------------


def load_bibliography(path: Path) -> dict[str, dict[str, str]]:
    """key -> {"short": "Vaswani et al.", "year": "2017", "full": one reference line}."""
    from pybtex.database import parse_file

    entries = {}
    for key, entry in parse_file(str(path)).entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [" ".join(p.last_names) for p in people]
        if len(last) == 1:
            short = last[0]
        elif len(last) == 2:
            short = f"{last[0]} and {last[1]}"
        else:
            short = f"{last[0]} et al." if last else entry.fields.get("title", key)
        year = entry.fields.get("year", "n.d.")
        venue = entry.fields.get("journal") or entry.fields.get("booktitle") or ""
        title = re.sub(r"[{}]", "", entry.fields.get("title", ""))
        names = ", ".join(last) if last else ""
        full = f"{names} ({year}). {title}." + (
            f" *{re.sub(r'[{}]', '', venue)}*." if venue else ""
        )
        entries[key] = {"short": re.sub(r"[{}]", "", short), "year": year, "full": full}
    return entries


def toc_notebooks(root: Path = ROOT) -> list[tuple[str, int | None]]:
    """(path without suffix, chapter number or None) for every notebook in the TOC."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    out, number = [], 0
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            numbered = part.get("numbered", False)
            if numbered:
                number += 1
            out.append((chapter["file"], number if numbered else None))
    return out


def figure_numbers(root: Path = ROOT) -> dict[str, str]:
    """Figure label -> "3.2", numbered per chapter in TOC order, as the website does."""
    numbers = {}
    for doc, chapter in toc_notebooks(root):
        path = root / f"{doc}.ipynb"
        if chapter is None or not path.exists():
            continue
        count = 0
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for match in FENCE.finditer("".join(cell["source"])):
                if match.group("name") == "figure":
                    count += 1
                    for line in match.group("body").splitlines():
                        option = OPTION.match(line.strip())
                        if option and option.group(1) == "name":
                            numbers[option.group(2).strip()] = f"{chapter}.{count}"
    return numbers


def glued_values(cache_dir: Path | None) -> dict[str, dict[str, str]]:
    """Notebook path (relative, no suffix) -> glue key -> text/plain, from the cache."""
    if cache_dir is None or not cache_dir.exists():
        return {}
    from jupyter_cache import get_cache

    cache = get_cache(str(cache_dir))
    values: dict[str, dict[str, str]] = {}
    for record in cache.list_cache_records():
        try:
            doc = Path(record.uri).resolve().relative_to(ROOT).with_suffix("").as_posix()
        except ValueError:
            continue
        nb = cache.get_cache_bundle(record.pk).nb
        found = values.setdefault(doc, {})
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                meta = output.get("metadata", {}).get("scrapbook")
                if meta:
                    prefix = meta.get("mime_prefix", "")
                    text = output.get("data", {}).get(prefix + "text/plain")
                    if text is not None:
                        found[meta["name"]] = text
    return values


# ---------------------------------------------------------------------------
# Converting one Markdown cell
# ---------------------------------------------------------------------------


class Converter:
    def __init__(self, bib, figures, values, strict: bool = False) -> None:
        self.bib, self.figures, self.values, self.strict = bib, figures, values, strict

    def notebook(self, nb: dict, doc: str) -> dict:
        """A converted copy of ``nb`` (the notebook at ``doc``, path without suffix)."""
        out = copy.deepcopy(nb)
        self.doc, self.cited = doc, []
        for cell in out["cells"]:
            if cell["cell_type"] == "markdown":
                text = self.markdown("".join(cell["source"]))
                cell["source"] = text.splitlines(keepends=True)
        if self.cited:
            refs = "\n".join(f"- {self.bib[k]['full']}" for k in sorted(set(self.cited)))
            out["cells"].append(
                {
                    "cell_type": "markdown",
                    "id": "colab-references",
                    "metadata": {},
                    "source": ["## References\n", "\n", *refs.splitlines(keepends=True)],
                }
            )
        out["metadata"].setdefault("course", {})["edition"] = "colab"
        return out

    def markdown(self, text: str) -> str:
        text = FENCE.sub(self._directive, text)
        text = re.sub(r"^\s*\([\w-]+\)=\s*\n", "", text, flags=re.M)  # targets
        text = ROLE.sub(self._role, text)
        left = LEFTOVER.search(text)
        if left:
            raise ConversionError(f"{self.doc}: MyST left after conversion: {left.group(0)!r}")
        return text

    # Directives -------------------------------------------------------------

    def _directive(self, match: re.Match) -> str:
        name, arg = match.group("name"), match.group("arg").strip()
        options, body = {}, []
        lines = match.group("body").splitlines()
        while lines and OPTION.match(lines[0].strip()):
            key, value = OPTION.match(lines[0].strip()).groups()
            options[key] = value
            lines.pop(0)
        body = "\n".join(lines).strip("\n")
        body = FENCE.sub(self._directive, body + "\n").rstrip("\n")
        if name == "figure":
            url = f"{SITE}/_images/{Path(arg).name}"
            label = options.get("name")
            number = f"Figure {self.figures[label]}. " if label in self.figures else ""
            alt = options.get("alt", "").replace("]", ")").replace("[", "(")
            return f"![{alt}]({url})\n\n*{number}{body.strip()}*\n"
        if name.startswith("prf:"):
            kind = name.split(":", 1)[1].capitalize()
            if kind == "Proof":
                return f"*Proof.* {body.strip()} $\\blacksquare$\n"
            title = f" ({arg})" if arg else ""
            return f"**{kind}{title}.** {body.strip()}\n"
        if name in ("admonition", "note", "tip", "warning", "important", "dropdown"):
            title = arg or name.capitalize()
            quoted = "\n".join("> " + line if line else ">" for line in body.splitlines())
            return f"> **{title}**\n>\n{quoted}\n"
        raise ConversionError(f"{self.doc}: no Colab form for the directive {{{name}}}")

    # Roles ------------------------------------------------------------------

    def _role(self, match: re.Match) -> str:
        role, content = match.group(1), match.group(2)
        if role in ("cite:p", "cite:t", "cite"):
            keys = [k.strip() for k in content.split(",") if k.strip()]
            missing = [k for k in keys if k not in self.bib]
            if missing:
                raise ConversionError(f"{self.doc}: unknown citation keys {missing}")
            self.cited += keys
            if role == "cite:t":
                return "; ".join(f"{self.bib[k]['short']} ({self.bib[k]['year']})" for k in keys)
            return (
                "("
                + "; ".join(f"{self.bib[k]['short']}, {self.bib[k]['year']}" for k in keys)
                + ")"
            )
        if role == "numref":
            text, label = _explicit(content)
            if label not in self.figures:
                raise ConversionError(f"{self.doc}: unknown figure label {label!r}")
            return (text or "Figure %s").replace("%s", self.figures[label])
        if role == "doc":
            text, target = _explicit(content)
            page = (Path(self.doc).parent / target).as_posix()
            page = re.sub(r"[^/]+/\.\./", "", page)
            return f"[{text or Path(target).name}]({SITE}/{page}.html)"
        if role.startswith("glue"):
            return self._glue(content)
        if role == "math":
            return f"${content}$"
        raise ConversionError(f"{self.doc}: no Colab form for the role {{{role}}}")

    def _glue(self, content: str) -> str:
        doc, spec = self.doc, content
        if "::" in content:
            doc, spec = content.split("::", 1)
            doc = doc.lstrip("/")
        key, _, fmt = spec.partition(":")
        text = self.values.get(doc, {}).get(key)
        if text is None:
            if self.strict:
                raise ConversionError(f"{self.doc}: no computed value for glue key {key!r}")
            return "(a number this notebook computes below)"
        try:
            return format(float(text), fmt) if fmt else text
        except ValueError:
            return text


def _explicit(content: str) -> tuple[str | None, str]:
    """``text <target>`` -> (text, target); ``target`` -> (None, target)."""
    match = re.match(r"^(.*?)\s*<([^<>]+)>$", content, re.S)
    return (match.group(1), match.group(2)) if match else (None, content.strip())


def colab_link(path: str) -> str:
    """The "Open in Colab" address of a notebook (repository-relative path) in the edition."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    return f"https://colab.research.google.com/github/{url.split('github.com/')[1]}/blob/{COLAB_BRANCH}/{path}"


def build(out: Path, cache: Path | None, strict: bool) -> list[Path]:
    conv = Converter(
        load_bibliography(ROOT / "book" / "references.bib"),
        figure_numbers(),
        glued_values(cache),
        strict,
    )
    written = []
    for folder in ("notebooks", "exercises"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            nb = json.loads(path.read_text())
            doc = path.relative_to(ROOT).with_suffix("").as_posix()
            target = out / folder / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(
                json.dumps(conv.notebook(nb, doc), indent=1, ensure_ascii=False) + "\n"
            )
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "colab")
    parser.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    parser.add_argument(
        "--strict", action="store_true", help="fail on a glue value not in the cache"
    )
    args = parser.parse_args(argv)
    try:
        written = build(args.out, args.cache, args.strict)
    except ConversionError as exc:
        print(f"colab edition: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} notebooks to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
