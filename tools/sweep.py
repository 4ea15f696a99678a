"""Run notebooks under several seeds and thread counts: do their claims hold anywhere?

A fixed seed repeats a training run on one machine only; another CPU, thread
count, GPU or PyTorch release rounds floating point differently and the run
takes another path. So every claim a notebook asserts about a trained,
sampled or timed result must hold for *any* seed, and this module checks that:

    python tools/sweep.py --seeds 0 1 2 3 --threads 1 2

runs every chapter and solution notebook once per (seed, thread count), each
in a fresh kernel with ``COURSE_SEED`` and ``COURSE_NUM_THREADS`` set (see
``course_lib.runtime``), and writes a table, notebook x setting -> passed or
failed and seconds, to ``book/sweep.json``; the book's status page shows it.
A run fails when any cell raises, a notebook's own ``assert`` included.

Notebooks also hand the numbers their asserts test to the sweep with
``course_lib.record(name=value)``; the sweep keeps them, and the status page
gives their mean, standard deviation and range over the runs: the spread
that an assert's margin must be taken from.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from course_lib.runtime import RESULTS_ENV, describe_hardware

__all__ = ["run_notebook", "sweep", "summarize_results", "main"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "book" / "sweep.json"
DEFAULT_NOTEBOOKS = ("notebooks/*.ipynb", "solutions/*.ipynb")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _nbval_error(output: str) -> str:
    """The failing cell, line and exception from nbval's report."""
    text = _ANSI.sub("", output)
    lines = [line.strip() for line in text.splitlines()]
    cell = re.search(r"Cell (\d+): (Cell execution caused an exception|Timeout of)", text)
    errors = [
        line
        for line in lines
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b", line) and "Traceback" not in line
    ]
    arrows = [line for line in lines if re.match(r"^-+> ", line)]  # IPython's "----> 12 ..."
    interrupted = bool(errors) and errors[-1].startswith("KeyboardInterrupt")
    if interrupted or "Timeout of" in text:  # nbval interrupts a cell past its time limit
        where = f"code cell {cell.group(1)}" if cell else "a cell"
        return f"{where} ran past the per-cell time limit (--timeout) and was interrupted"
    if not (cell and errors):
        return "the run failed: " + " | ".join(line for line in lines[-6:] if line)
    where = f"code cell {cell.group(1)}" + (f" [{arrows[-1][:160]}]" if arrows else "")
    return f"{errors[-1][:400]} ({where})"


def _command(notebook: Path, timeout: int) -> list[str]:
    """Execute one notebook exactly as the test suite does: nbval, in lax mode, in pytest.

    (nbclient, which ``jupyter nbconvert --execute`` uses, once waited out the
    whole cell timeout after the ``ipywidgets.interact`` cells of chapters 6
    and 7 when two notebooks started at the same time.) No conftest is
    loaded, so nothing is written to the book's execution cache.
    """
    return [
        sys.executable, "-m", "pytest", str(notebook), "--noconftest", "-p", "no:cacheprovider",
        "-q", "-x", "-o", "addopts=", "--nbval-lax", "--nbval-current-env",
        f"--nbval-cell-timeout={timeout}", "--tb=short", "--color=no",
    ]  # fmt: skip


def run_notebook(notebook: Path, seed: int, threads: int, timeout: int = 300) -> dict:
    """Run ``notebook`` in a fresh kernel with the given seed and thread count."""
    import tempfile

    notebook = Path(notebook).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        results_file = Path(tmp) / "results.jsonl"
        env = dict(
            os.environ,
            COURSE_SEED=str(seed),
            COURSE_NUM_THREADS=str(threads),
            OMP_NUM_THREADS=str(threads),
            **{RESULTS_ENV: str(results_file)},
        )
        # OpenMP's threads spin while they wait for each other by default; on a machine whose
        # cores are shared (a VM, other jobs) a spinning thread waits for a descheduled partner,
        # and two threads ran 2-5x slower than one here (measured). Passive waiting yields.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        start = time.perf_counter()
        proc = subprocess.run(
            _command(notebook, timeout), env=env, cwd=tmp, capture_output=True, text=True
        )
        seconds = round(time.perf_counter() - start, 1)
        ok = proc.returncode == 0
        error = None if ok else _nbval_error(proc.stdout + proc.stderr)
        results: dict[str, float] = {}
        if results_file.exists():
            for line in results_file.read_text().splitlines():
                results.update(json.loads(line))
    try:
        name = str(notebook.relative_to(ROOT))
    except ValueError:
        name = str(notebook)
    return {
        "notebook": name,
        "seed": seed,
        "threads": threads,
        "ok": ok,
        "seconds": seconds,
        "error": error,
        "results": results,
    }


def sweep(
    notebooks: list[Path],
    seeds: list[int],
    threads: list[int],
    jobs: int | None = None,
    timeout: int = 300,
    progress: bool = True,
) -> list[dict]:
    """Run every notebook for every (seed, thread count); return one row per run.

    Runs with ``t`` threads go ``jobs // t`` at a time (``jobs`` defaults to
    the CPU count), so the machine is never oversubscribed.
    """
    jobs = jobs or os.cpu_count() or 1
    rows: list[dict] = []
    total = len(notebooks) * len(seeds) * len(threads)
    for t in threads:
        tasks = [(nb, s, t) for s in seeds for nb in notebooks]
        with ThreadPoolExecutor(max_workers=max(1, jobs // t)) as pool:
            futures = [pool.submit(run_notebook, nb, s, t_, timeout) for nb, s, t_ in tasks]
            for future in as_completed(futures):
                row = future.result()
                rows.append(row)
                if progress:
                    mark = "pass" if row["ok"] else f"FAIL {row['error']}"
                    print(
                        f"[{len(rows)}/{total}] seed {row['seed']} threads {row['threads']} "
                        f"{row['notebook']}: {row['seconds']} s {mark}",
                        flush=True,
                    )
    return rows


def summarize_results(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """notebook -> number name -> {n, mean, std, min, max} over the runs that recorded it."""
    values: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        for name, value in row.get("results", {}).items():
            values.setdefault(row["notebook"], {}).setdefault(name, []).append(value)
    summary: dict[str, dict[str, dict]] = {}
    for notebook, numbers in values.items():
        for name, xs in numbers.items():
            mean = sum(xs) / len(xs)
            std = (
                math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
            )
            summary.setdefault(notebook, {})[name] = {
                "n": len(xs),
                "mean": mean,
                "std": std,
                "min": min(xs),
                "max": max(xs),
            }
    return summary


def _merge(out: Path, rows: list[dict], hardware: str) -> dict:
    """Add ``rows`` to the record in ``out``; a rerun of a setting replaces the old row."""
    data = json.loads(out.read_text()) if out.exists() else {"runs": []}
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for row in rows:
        row.update(date=stamp, hardware=hardware)
    new = {(r["notebook"], r["seed"], r["threads"]) for r in rows}
    kept = [r for r in data["runs"] if (r["notebook"], r["seed"], r["threads"]) not in new]
    data["runs"] = sorted(kept + rows, key=lambda r: (r["notebook"], r["threads"], r["seed"]))
    data["results"] = summarize_results(data["runs"])
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def _find_notebooks(patterns: list[str]) -> list[Path]:
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(ROOT.glob(pattern)) if not Path(pattern).is_file() else [Path(pattern)]
        if not matches:
            raise SystemExit(f"sweep: no notebook matches {pattern!r} (relative to {ROOT})")
        found.extend(m.resolve() for m in matches if m.suffix == ".ipynb")
    return list(dict.fromkeys(found))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/sweep.py",
        description="Run notebooks under several seeds and thread counts and record which pass.",
    )
    parser.add_argument(
        "notebooks", nargs="*", help=f"paths or globs (default: {DEFAULT_NOTEBOOKS})"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--jobs", type=int, default=None, help="CPU cores to use (default: all)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell (default 300)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON record to update")
    args = parser.parse_args(argv)

    notebooks = _find_notebooks(args.notebooks or list(DEFAULT_NOTEBOOKS))
    rows = sweep(notebooks, args.seeds, args.threads, args.jobs, args.timeout)
    _merge(args.out, rows, describe_hardware())
    failed = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    for r in failed:
        print(f"FAILED seed {r['seed']} threads {r['threads']} {r['notebook']}: {r['error']}")
    print(f"record updated: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
