"""Run notebooks under several seeds and thread counts: do their claims hold anywhere?

A fixed seed repeats a training run on one machine only; another CPU, thread
count, GPU or PyTorch release rounds floating point differently and the run
takes another path. So every claim a notebook asserts about a trained,
sampled or timed result must hold for *any* seed, and this module checks that:

    python -m course_lib.sweep --seeds 0 1 2 3 --threads 1 2

runs every chapter and solution notebook once per (seed, thread count), each
in a fresh kernel with ``COURSE_SEED`` and ``COURSE_NUM_THREADS`` set (see
``course_lib.runtime``), and writes a table, notebook x setting -> passed or
failed and seconds, to ``book/sweep.json``; the book's status page shows it.
A run fails when any cell raises, a notebook's own ``assert`` included.

Notebooks also hand their headline numbers to the sweep with
:func:`course_lib.record`
(``course_lib.record(local_minus_global=...)``); the sweep keeps them, and the
status page gives their mean, standard deviation and range over the runs:
the spread that an assert's margin must be taken from.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course_lib.runtime import RESULTS_ENV

__all__ = ["run_notebook", "sweep", "summarize_results", "main"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "book" / "sweep.json"
DEFAULT_NOTEBOOKS = ("notebooks/*.ipynb", "solutions/*.ipynb")


def _execute(notebook: Path, timeout: int, save: Path | None = None) -> dict:
    """Execute one notebook in a fresh kernel (in this process's environment).

    With ``save``, the executed notebook (outputs and all) is written there.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": notebook.parent}},
    )
    start = time.perf_counter()
    error = None
    try:
        client.execute()
    except CellTimeoutError:
        error = f"a cell ran longer than {timeout} s"
    except CellExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue}".strip()
        # The failing line: the last line of the traceback that names the cell.
        for line in reversed(str(exc).splitlines()):
            if line.strip().startswith("---->") or line.strip().startswith("Cell In"):
                error += f" [{line.strip()[:160]}]"
                break
    seconds = round(time.perf_counter() - start, 1)
    if save is not None:
        nbformat.write(nb, save)
    return {"ok": error is None, "seconds": seconds, "error": error}


def run_notebook(
    notebook: Path, seed: int, threads: int, timeout: int = 300, keep: Path | None = None
) -> dict:
    """Run ``notebook`` in a subprocess with the given seed and thread count.

    With ``keep`` (a folder), the executed notebook is saved there as
    ``<name>.seed<seed>.threads<threads>.ipynb``.
    """
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
        cmd = [sys.executable, "-m", "course_lib.sweep", "--execute", str(notebook)]
        cmd += ["--timeout", str(timeout)]
        if keep is not None:
            Path(keep).mkdir(parents=True, exist_ok=True)
            saved = Path(keep) / f"{notebook.stem}.seed{seed}.threads{threads}.ipynb"
            cmd += ["--save", str(saved.resolve())]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        try:
            outcome = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            tail = (proc.stdout + proc.stderr).strip()[-400:]
            outcome = {"ok": False, "seconds": None, "error": f"runner crashed: {tail}"}
        results: dict[str, float] = {}
        if results_file.exists():
            for line in results_file.read_text().splitlines():
                results.update(json.loads(line))
    try:
        name = str(notebook.relative_to(ROOT))
    except ValueError:
        name = str(notebook)
    return {"notebook": name, "seed": seed, "threads": threads, **outcome, "results": results}


def sweep(
    notebooks: list[Path],
    seeds: list[int],
    threads: list[int],
    jobs: int | None = None,
    timeout: int = 300,
    keep: Path | None = None,
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
            futures = [pool.submit(run_notebook, nb, s, t_, timeout, keep) for nb, s, t_ in tasks]
            for future in futures:
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
        prog="python -m course_lib.sweep",
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
    parser.add_argument("--keep", type=Path, help="save the executed notebooks in this folder")
    parser.add_argument("--execute", type=Path, help=argparse.SUPPRESS)  # one run, in a child
    parser.add_argument("--save", type=Path, help=argparse.SUPPRESS)  # where the child saves it
    args = parser.parse_args(argv)

    if args.execute:
        print(json.dumps(_execute(args.execute.resolve(), args.timeout, args.save)))
        return 0

    from course_lib.runtime import describe_hardware

    notebooks = _find_notebooks(args.notebooks or list(DEFAULT_NOTEBOOKS))
    rows = sweep(notebooks, args.seeds, args.threads, args.jobs, args.timeout, args.keep)
    _merge(args.out, rows, describe_hardware())
    failed = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    for r in failed:
        print(f"FAILED seed {r['seed']} threads {r['threads']} {r['notebook']}: {r['error']}")
    print(f"record updated: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
