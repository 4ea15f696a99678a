"""Summarise a mutation run (``mutmut run``) as JSON for the status page.

    python tools/mutation_report.py [--mutants mutants] [--out book/mutation.json]
                                    [--previous book/mutation.json]

mutmut keeps each mutated file's results next to its copy, in
``mutants/<path>.py.meta`` (JSON: ``exit_code_by_key`` maps every mutant's name
to the exit status of the tests run against it, ``null`` while it has not been
tested). This script counts them per module and writes one JSON object: the
date, mutmut's version, the commit, and for each module the number of mutants
killed, surviving, equivalent, timed out, suspicious, reached by no test and
not yet run, with its score, plus the surviving mutants by name.

A surviving mutant that no test can kill, because the change does not alter
what the code computes, is listed in ``tests/mutation_equivalent.toml`` with a
one-line reason (reviewed like code) and, optionally, a fragment of the
mutated line; it is counted apart and left out of the score. An entry that no
longer names a surviving mutant (the mutant was killed, or a change to the
code renumbered the function's mutants, so its fragment is no longer in that
mutant) is reported as stale, printed, and listed in the JSON: mutmut numbers
the mutants of a function in order, so an entry must be checked again after
its function changes.

Score = (killed + timeout) / (mutants run - equivalent), in per cent: a
mutant reached by no test counts as a survivor; mutants not run yet are left
out (a partial run says so in ``not_run``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]

# mutmut 3.8's meaning of each exit status (mutmut/stats.py: status_by_exit_code);
# any other status is "suspicious" there too.
STATUS = {
    1: "killed",
    3: "killed",  # pytest's internal error: the mutant broke the run
    37: "killed",  # caught by the type checker (not configured here)
    0: "survived",
    5: "no_tests",
    33: "no_tests",
    34: "not_run",  # skipped
    2: "not_run",  # interrupted by the user
    None: "not_run",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
}
COUNTS = ("killed", "survived", "equivalent", "timeout", "suspicious", "no_tests", "not_run")


def status(exit_code: int | None) -> str:
    return STATUS.get(exit_code, "suspicious")


def module_name(meta: Path, mutants: Path) -> str:
    """``mutants/course_lib/masks.py.meta`` -> ``masks``; a subpackage keeps its dots."""
    rel = meta.relative_to(mutants).as_posix().removesuffix(".py.meta")
    return rel.removeprefix("course_lib/").replace("/", ".")


def mutant_source(mutants: Path, meta: Path, name: str) -> str | None:
    """The source of mutant ``name`` in the mutated copy of the file (mutmut writes
    every mutant as its own function, named after the mutant's last dotted part)."""
    source = mutants / meta.relative_to(mutants).as_posix().removesuffix(".meta")
    if not source.exists():
        return None
    func = name.rsplit(".", 1)[-1]
    lines = source.read_text().splitlines()
    for i, line in enumerate(lines):
        match = re.match(rf"(\s*)def {re.escape(func)}\(", line)
        if match:
            indent = len(match.group(1))
            body = [line]
            for nxt in lines[i + 1 :]:
                stripped = nxt.strip()
                if (
                    stripped
                    and len(nxt) - len(nxt.lstrip()) <= indent
                    and not stripped.startswith(")")
                ):
                    break
                body.append(nxt)
            return "\n".join(body)
    return None


def load_equivalent(path: Path) -> dict[str, dict]:
    """``tests/mutation_equivalent.toml``: one table per mutant, ``reason`` (required)
    and ``line`` (a fragment of the mutated code, optional)."""
    if not path.exists():
        return {}
    entries = tomllib.loads(path.read_text())
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not str(entry.get("reason", "")).strip():
            raise SystemExit(
                f"{path}: [{name!r}] needs a reason = '...' saying why it is equivalent"
            )
    return entries


def _version() -> str:
    try:
        return metadata.version("mutmut")
    except metadata.PackageNotFoundError:
        return "unknown"


def _commit(root: Path) -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
    )
    return proc.stdout.strip() or "unknown"


def summarise(mutants: Path, equivalent: dict[str, dict]) -> dict:
    """Count the mutants of every ``.py.meta`` file under ``mutants`` per module."""
    modules: dict[str, dict] = {}
    survivors: dict[str, list[str]] = {}
    used, stale = [], []
    seen: set[str] = set()
    for meta in sorted(mutants.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        name = module_name(meta, mutants)
        counts = dict.fromkeys(COUNTS, 0)
        left = []
        for mutant, code in sorted(data.get("exit_code_by_key", {}).items()):
            seen.add(mutant)
            kind = status(code)
            if kind in ("survived", "no_tests") and mutant in equivalent:
                fragment = equivalent[mutant].get("line")
                src = mutant_source(mutants, meta, mutant) if fragment else None
                if fragment and (src is None or fragment not in src):
                    stale.append(
                        {"mutant": mutant, "why": "its line fragment is not in this mutant"}
                    )
                else:
                    kind = "equivalent"
                    used.append({"mutant": mutant, "reason": equivalent[mutant]["reason"]})
            elif mutant in equivalent:
                stale.append({"mutant": mutant, "why": f"it was {kind.replace('_', ' ')}"})
            counts[kind] += 1
            if kind in ("survived", "no_tests", "suspicious"):
                left.append(mutant)
        counts["total"] = sum(counts.values())
        run = counts["total"] - counts["not_run"] - counts["equivalent"]
        counts["score"] = (
            round(100 * (counts["killed"] + counts["timeout"]) / run, 1) if run > 0 else None
        )
        modules[name] = counts
        if left:
            survivors[name] = left
    for mutant in sorted(set(equivalent) - seen):
        if any(mutant.startswith(f"course_lib.{m}.") for m in modules):
            stale.append({"mutant": mutant, "why": "no such mutant in this run"})
    return {
        "modules": modules,
        "survivors": survivors,
        "equivalent": used,
        "stale_equivalent": stale,
        "not_run": sorted(m for m, c in modules.items() if c["not_run"] == c["total"]),
    }


def unchanged_since(commit: str, module: str, root: Path = ROOT) -> bool:
    """True when ``course_lib/<module>.py`` is the same now as at ``commit``."""
    path = f"course_lib/{module.replace('.', '/')}.py"
    proc = subprocess.run(["git", "diff", "--quiet", commit, "--", path], cwd=root)
    return proc.returncode == 0


def carry_over(report: dict, previous: dict, unchanged=unchanged_since) -> dict:
    """Keep ``previous``'s results for the modules this run left unrun.

    A module that this run did not run at all (every mutant ``not_run``) takes its
    counts, survivors and equivalents from the previous report, if it was run there and
    its source has not changed since that report's commit; ``carried`` names each one
    with the commit its numbers belong to.  A changed module stays ``not_run``."""
    since = previous.get("commit", "")
    carried = dict(report.get("carried", {}))
    for name in list(report["not_run"]):
        before = previous.get("modules", {}).get(name)
        if not before or before.get("score") is None or not unchanged(since, name):
            continue
        prefix = f"course_lib.{name}."
        report["modules"][name] = before
        if name in previous.get("survivors", {}):
            report["survivors"][name] = previous["survivors"][name]
        report["equivalent"] += [
            e for e in previous.get("equivalent", []) if e["mutant"].startswith(prefix)
        ]
        report["stale_equivalent"] = [
            e for e in report["stale_equivalent"] if not e["mutant"].startswith(prefix)
        ]
        report["not_run"].remove(name)
        carried[name] = previous.get("carried", {}).get(name, since)
    report["carried"] = carried
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=Path, default=ROOT / "mutants")
    parser.add_argument(
        "--equivalent", type=Path, default=ROOT / "tests" / "mutation_equivalent.toml"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "book" / "mutation.json")
    parser.add_argument(
        "--previous",
        type=Path,
        help="an earlier report (book/mutation.json): its results stand for the modules "
        "this run did not run whose code has not changed since",
    )
    args = parser.parse_args(argv)
    if not any(args.mutants.rglob("*.py.meta")):
        print(f"no mutmut results under {args.mutants}: run `mutmut run` first", file=sys.stderr)
        return 2
    report = {
        "date": dt.date.today().isoformat(),
        "mutmut": _version(),
        "commit": _commit(ROOT),
        **summarise(args.mutants, load_equivalent(args.equivalent)),
    }
    if args.previous:
        carry_over(report, json.loads(args.previous.read_text()))
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    for name, c in report["modules"].items():
        score = "not run" if c["score"] is None else f"{c['score']:.1f}%"
        print(
            f"{name:16} {score:>8}  killed {c['killed']}, survived {c['survived']}, "
            f"equivalent {c['equivalent']}, no tests {c['no_tests']}, not run {c['not_run']}"
        )
    for entry in report["stale_equivalent"]:
        print(f"stale entry in {args.equivalent.name}: {entry['mutant']} ({entry['why']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
