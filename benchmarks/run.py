"""Run the benchmarks side by side, print the table, write ``book/benchmarks.json``.

::

    python -m benchmarks                  # everything, about 4 minutes on 2 cores
    python -m benchmarks --only attention gpt
    python -m benchmarks --quick          # tiny sizes, one call each: checks the command works

A full run writes ``book/benchmarks.json`` (the status page shows it); a run
with ``--quick`` or ``--only`` writes nothing unless ``--out`` is given.
PyTorch runs on one thread unless ``--threads`` says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import traceback
from pathlib import Path

import torch

from benchmarks import bench_attention, bench_gat, bench_gpt, bench_grading, bench_rnn
from benchmarks.harness import Config, goal_met

ROOT = Path(__file__).resolve().parents[1]
BOOK_FILE = ROOT / "book" / "benchmarks.json"
GROUPS = {
    "gat": bench_gat,
    "attention": bench_attention,
    "gpt": bench_gpt,
    "rnn": bench_rnn,
    "grading": bench_grading,
}


def goal_text(row: dict) -> str:
    if row.get("goal_ratio") is not None:
        return f"<= {row['goal_ratio']:g}x"
    if row.get("goal_value") is not None:
        return f"<= {row['goal_value']:g} {row['unit']}"
    return "report"


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def format_table(rows: list[dict]) -> str:
    """The rows as a plain-text table (what the command prints)."""
    head = ("benchmark", "size", "versus", "ours", "peer", "ratio [range]", "goal", "met")
    lines = []
    for r in rows:
        if r.get("skipped"):
            lines.append((r["what"], r["size"], r["peer"], "skipped", "", r["skipped"], "", ""))
            continue
        unit = r["unit"]
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        if r.get("ratio_min") is not None:
            ratio += f" [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]"
        met = {True: "yes", False: "NO", None: "-"}[r.get("met")]
        lines.append(
            (
                r["what"],
                r["size"],
                r["peer"],
                f"{_num(r['ours_value'])} {unit}",
                "-" if r["peer_value"] is None else f"{_num(r['peer_value'])} {unit}",
                ratio,
                goal_text(r),
                met,
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=True)]
    out = [
        "  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
        for line in [head, tuple("-" * w for w in widths), *lines]
    ]
    return "\n".join(out)


def run_groups(names: list[str], cfg: Config) -> tuple[list[dict], bool]:
    """Every row of the named groups, and whether all of them ran without an error.

    With ``cfg.quick`` no goal is judged (``met`` is None): the sizes are too small.
    """
    rows, ok = [], True
    for name in names:
        print(f"[benchmarks] {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            group_rows = GROUPS[name].run(cfg)
        except ImportError as err:  # a peer library that is not installed: say so
            group_rows = [_skipped(name, f"not installed: {err}")]
        except Exception as err:  # report it in the table, then fail the command
            traceback.print_exc()
            group_rows, ok = [_skipped(name, f"error: {type(err).__name__}: {err}")], False
        for row in group_rows:
            row["met"] = None if cfg.quick else goal_met(row)
        rows.extend(group_rows)
        print(f"[benchmarks] {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return rows, ok


def _skipped(group: str, reason: str) -> dict:
    return {"group": group, "what": group, "size": "-", "ours": "-", "peer": "-", "skipped": reason}


def rounded(value):
    """``value`` with every float rounded to 5 significant digits (for a readable JSON)."""
    if isinstance(value, float):
        return float(f"{value:.5g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one call each")
    parser.add_argument("--only", nargs="+", choices=list(GROUPS), help="run these groups only")
    parser.add_argument("--out", type=Path, help=f"write the JSON here (default: {BOOK_FILE})")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of interleaved calls")
    parser.add_argument("--repeats", type=int, default=25, help="calls per side per round, at most")
    parser.add_argument(
        "--budget", type=float, default=30.0, help="seconds of timed calls per case, about"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.quick:
        cfg = Config.quick_config(device)
    else:
        cfg = Config(rounds=args.rounds, repeats=args.repeats, budget_s=args.budget, device=device)
    names = args.only or list(GROUPS)
    started = datetime.datetime.now(datetime.timezone.utc)
    rows, ok = run_groups(names, cfg)

    from course_lib.runtime import describe_hardware

    record = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "hardware": describe_hardware(),
        "device": str(device),
        "threads": args.threads,
        "quick": args.quick,
        "rounds": cfg.rounds,
        "command": "python -m benchmarks" + (" " + " ".join(argv) if argv else ""),
        "rows": rows,
    }
    print(f"{record['date']}; {record['hardware']}; {args.threads} thread(s), {device}")
    print(format_table(rows))
    out = args.out
    if out is None and not (args.quick or args.only):
        out = BOOK_FILE
    if out is not None:
        out.write_text(json.dumps(rounded(record), indent=1) + "\n")
        print(f"written to {out}")
    return 0 if ok else 1
