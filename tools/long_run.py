"""Record a run longer than a chapter's budget (see ``course_lib.long_runs``).

    python tools/long_run.py ch10_exo_1000

runs the chapter named in ``course_lib.long_runs.LONG_RUNS``, up to the last
cell of its experiment, with its budget under each of its seeds (one CPU
thread each, ``--jobs`` at a time, through ``tools/sweep.py``) and writes what the chapter records to
``course_lib/recorded/<name>.json``, with the date, the machine and a hash of
the cells that define the experiment. Commit the file: the chapter reads it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
from pathlib import Path

from course_lib.long_runs import LONG_RUNS, cells_hash

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "course_lib" / "recorded"


def _tool(name: str):
    """A sibling maintainer tool (``tools/<name>.py``), as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _experiment(spec: dict, folder: Path) -> Path:
    """The notebook up to its last experiment cell (what follows, such as a cell that
    reads this very record, is not part of the run), less the cells in ``spec["skip"]``
    (a cell among them that reads the record), written into ``folder``."""
    nb = json.loads((ROOT / spec["notebook"]).read_text())
    last = max(i for i, c in enumerate(nb["cells"]) if c.get("id") in spec["cells"])
    skip = set(spec.get("skip", ()))
    missing = skip - {c.get("id") for c in nb["cells"][: last + 1]}
    if missing or skip & set(spec["cells"]):
        raise ValueError(
            f"long run: skip {sorted(skip)} must name cells before the last experiment cell "
            f"and none of the experiment's own ({spec['notebook']} has no {sorted(missing)})"
        )
    nb["cells"] = [c for c in nb["cells"][: last + 1] if c.get("id") not in skip]
    path = folder / Path(spec["notebook"]).name
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return path


def _record(name: str, jobs: int | None) -> Path:
    from course_lib.runtime import describe_hardware

    sweep = _tool("sweep").sweep

    spec = LONG_RUNS[name]
    before = cells_hash(spec["notebook"], spec["cells"])  # the cells the runs will execute
    os.environ.update(spec["env"])
    start = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with tempfile.TemporaryDirectory() as tmp:
        notebook = _experiment(spec, Path(tmp))
        rows = sweep([notebook], spec["seeds"], [1], jobs=jobs, timeout=3600)
    return _write(name, rows, start=start, hardware=describe_hardware(), cells_sha256=before)


def _write(name: str, rows: list[dict], *, start: str, hardware: str, cells_sha256: str) -> Path:
    """Write the sweep's rows (one per seed, as ``tools/sweep.py`` returns them) as the record."""
    spec = LONG_RUNS[name]
    failed = [r for r in rows if not r["ok"]]
    if failed:
        raise SystemExit(f"long run {name} failed: {[(r['seed'], r['error']) for r in failed]}")
    if sorted(r["seed"] for r in rows) != sorted(spec["seeds"]):
        raise SystemExit(f"long run {name}: seeds {[r['seed'] for r in rows]}, not {spec['seeds']}")
    runs = [
        {
            "seed": r["seed"],
            "seconds": r["seconds"],
            "results": {k: v for k, v in r["results"].items() if k.startswith(tuple(spec["keep"]))},
        }
        for r in sorted(rows, key=lambda r: r["seed"])
    ]
    env = " ".join(f"{k}={v}" for k, v in spec["env"].items())
    record = {
        "name": name,
        "notebook": spec["notebook"],
        "command": f"python tools/long_run.py {name}",
        "what_it_runs": f"{env}, seeds {spec['seeds']}, one CPU thread each",
        "started": start,
        "hardware": hardware,
        "cells": spec["cells"],
        "cells_sha256": cells_sha256,
        "runs": runs,
    }
    RECORDED.mkdir(exist_ok=True)
    out = RECORDED / f"{name}.json"
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/long_run.py",
        description="Run a chapter with a budget beyond its minute and record what it computes.",
    )
    parser.add_argument("name", choices=sorted(LONG_RUNS))
    parser.add_argument("--jobs", type=int, default=None, help="CPU cores to use (default: all)")
    args = parser.parse_args(argv)
    out = _record(args.name, args.jobs)
    print(f"recorded: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
