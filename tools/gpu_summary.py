"""Summarise a GPU pass (tools/gpu_check.sh) as JSON for the status page.

    python tools/gpu_summary.py OUT_DIR [--workers N] [--text]

Reads OUT_DIR/notebooks.log and OUT_DIR/unit.log (pytest run with
``--durations=0 -rfE``) and OUT_DIR/gpu.txt (nvidia-smi's name, driver,
memory), and prints one JSON object: the date, the GPU, every notebook with
its summed cell seconds and its failing cells (with pytest's one-line reason),
and the unit tests' counts and failures. ``book/gpu_run.json`` is this output
for the last pass; the status page renders it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from collections import defaultdict
from pathlib import Path

DURATION = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+\.ipynb)::Cell (\d+)")
FAILED = re.compile(r"^FAILED (\S+?)(?:::(\S*))?(?: - .*)?$")
COUNTS = re.compile(r"(\d+) (passed|failed|error|errors|skipped)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _counts(text: str) -> dict[str, int]:
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    found = {k: int(n) for n, k in COUNTS.findall(lines[-1])} if lines else {}
    return {k: found.get(k, 0) for k in ("passed", "failed", "skipped")}


SECTION = re.compile(r"^_{3,} (\S+\.ipynb)::Cell (\d+) _{3,}$")
ERROR_LINE = re.compile(r"^(\w*(?:Error|Exception)\b.*)$")


def _sections(log: str) -> dict[tuple[str, str], list[str]]:
    """pytest's failure sections of the notebook log: (notebook, cell) -> its lines."""
    sections: dict[tuple[str, str], list[str]] = {}
    current = None
    for line in log.splitlines():
        m = SECTION.match(line)
        if m:
            current = sections.setdefault((m.group(1), m.group(2)), [])
        elif line.startswith(("=====", "-- Docs")):
            current = None
        elif current is not None:
            current.append(line)
    return sections


def _reason(body: list[str]) -> str:
    """One line saying why a cell failed: the GPU check's verdict or the exception."""
    text = "\n".join(body)
    if "allocated no CUDA memory" in text:
        return "allocated no CUDA memory (ran on the CPU)"
    errors = [m.group(1).strip() for m in map(ERROR_LINE.match, body) if m]
    reason = errors[-1] if errors else "failed"
    if reason.endswith(":"):  # a bare assert: name the line that failed
        failed_at = [ln.split("-->", 1)[1].strip() for ln in body if "-->" in ln]
        if failed_at:
            reason += " " + re.sub(r"^\d+\s+", "", failed_at[-1])
    return reason


def summarize(out: Path, workers: int) -> dict:
    nb_log = ANSI.sub("", (out / "notebooks.log").read_text())
    seconds: dict[str, float] = defaultdict(float)
    for line in nb_log.splitlines():
        m = DURATION.match(line)
        if m:
            seconds[m.group(2)] += float(m.group(1))
    failures: dict[str, list[str]] = defaultdict(list)
    for (nb, cell), body in _sections(nb_log).items():
        failures[nb].append(f"Cell {cell}: {_reason(body)}")
    unit_log = ANSI.sub("", (out / "unit.log").read_text()) if (out / "unit.log").exists() else ""
    cases: dict[str, int] = defaultdict(int)  # a parametrised test: its name, how many cases
    for m in map(FAILED.match, unit_log.splitlines()):
        if m:
            name = m.group(1) + (f"::{m.group(2)}" if m.group(2) else "")
            cases[re.sub(r"\[.*\]$", "", name)] += 1
    unit_failed = [name + (f" ({n} cases)" if n > 1 else "") for name, n in sorted(cases.items())]
    gpu = (out / "gpu.txt").read_text().strip() if (out / "gpu.txt").exists() else "unknown"
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": gpu,
        "workers": workers,
        "notebooks": [
            {
                "notebook": nb,
                "seconds": round(seconds[nb], 1),
                "ok": nb not in failures,
                "failures": failures.get(nb, []),
            }
            for nb in sorted(set(seconds) | set(failures))
        ],
        "notebook_counts": _counts(nb_log),
        "unit_counts": _counts(unit_log),
        "unit_failures": unit_failed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--text", action="store_true", help="a table for the terminal")
    args = parser.parse_args(argv)
    data = summarize(args.out, args.workers)
    if not args.text:
        print(json.dumps(data, indent=1))
        return 0
    print(f"{data['date']}  {data['gpu']}")
    for row in data["notebooks"]:
        print(f"{row['seconds']:7.1f} s  {'ok  ' if row['ok'] else 'FAIL'}  {row['notebook']}")
        for failure in row["failures"]:
            print(f"           {failure}")
    print("notebook cells:", data["notebook_counts"], " unit tests:", data["unit_counts"])
    for name in data["unit_failures"]:
        print("  unit FAILED", name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
