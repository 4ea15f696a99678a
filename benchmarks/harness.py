"""Side-by-side timing and peak memory, shared by every benchmark.

Timing: the callables of one case run interleaved, in one process, in
``rounds`` rounds of ``repeats`` calls each (the order rotates from call to
call), so a slow spell of a shared machine hits every side alike.  A row
reports the median time of each side over all calls and the ratio ours /
peer: each round gives one (the ratio of its medians), the row shows their
median and their smallest and largest value (the spread: how noisy the
ratio was).

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` above what was
allocated before the call.  On the CPU, ``tracemalloc`` and the process's
RSS do not see tensors reliably (glibc keeps freed memory mapped), so the
call runs once under ``torch.profiler`` with ``profile_memory=True``: PyTorch's
CPU allocator reports every allocation and free of a tensor made during the
call, and the peak of their running sum is the largest number of bytes held
at once by tensors created during the call (activations kept for backward,
temporaries, gradients; not the parameters and inputs that existed before).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

CPU_DEVICE_TYPE = 0  # "Device Type" of a CPU allocation in the profiler's trace


@dataclass
class Config:
    """How hard to measure.  ``quick``: tiny sizes, one call each (the test of the command)."""

    quick: bool = False
    rounds: int = 3
    repeats: int = 25  # calls per side per round, at most
    min_repeats: int = 3  # ... and at least, even when a case is slow
    warmup: int = 2
    budget_s: float = 30.0  # a case's timed calls, all sides together, aim for about this long
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def quick_config(cls, device: torch.device) -> Config:
        return cls(quick=True, rounds=1, repeats=1, min_repeats=1, warmup=1, device=device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_side_by_side(
    fns: dict[str, Callable[[], object]], cfg: Config
) -> tuple[dict[str, list[list[float]]], int]:
    """Seconds per call of each of ``fns``, interleaved: ``{name: [round][call]}``, and the repeats.

    After ``cfg.warmup`` calls of each, the number of calls per round is chosen
    so that all rounds take about ``cfg.budget_s`` (between ``min_repeats`` and
    ``repeats``).
    """
    names = list(fns)
    for _ in range(cfg.warmup):
        for name in names:
            fns[name]()
    sync(cfg.device)
    start = time.perf_counter()
    for name in names:
        fns[name]()
    sync(cfg.device)
    one_each = time.perf_counter() - start
    repeats = int(cfg.budget_s / max(cfg.rounds * one_each, 1e-9))
    repeats = max(cfg.min_repeats, min(cfg.repeats, repeats))
    times: dict[str, list[list[float]]] = {n: [[] for _ in range(cfg.rounds)] for n in names}
    gc.collect()
    gc.disable()
    try:
        for r in range(cfg.rounds):
            for i in range(repeats):
                k = (r * repeats + i) % len(names)
                for name in names[k:] + names[:k]:
                    sync(cfg.device)
                    start = time.perf_counter()
                    fns[name]()
                    sync(cfg.device)
                    times[name][r].append(time.perf_counter() - start)
            gc.collect()
    finally:
        gc.enable()
    return times, repeats


def compare(times: dict[str, list[list[float]]], ours: str, peer: str) -> dict:
    """Median ms of each side over all calls; the ratio ours / peer and its range over rounds.

    Each round gives one ratio (its median time of ours over its median time
    of the peer); ``ratio`` is the median of those, ``ratio_min`` and
    ``ratio_max`` their extremes.
    """
    mine = statistics.median(t for rnd in times[ours] for t in rnd)
    theirs = statistics.median(t for rnd in times[peer] for t in rnd)
    per_round = [
        statistics.median(a) / statistics.median(b)
        for a, b in zip(times[ours], times[peer], strict=True)
    ]
    return {
        "ours_value": mine * 1e3,
        "peer_value": theirs * 1e3,
        "unit": "ms",
        "ratio": statistics.median(per_round),
        "ratio_min": min(per_round),
        "ratio_max": max(per_round),
    }


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the C++ profiler's start/stop lines (written to fd 2, not through Python)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes held by tensors allocated during one call of ``fn`` (see the module docstring).

    Frees of tensors that existed before the call are ignored: the peak is of
    the tensors the call itself allocates.
    """
    gc.collect()
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        sync(device)
        return torch.cuda.max_memory_allocated(device) - base
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    events = sorted(
        (e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Addr"], e["args"]["Bytes"])
        for e in trace["traceEvents"]
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == CPU_DEVICE_TYPE
    )
    # Count a free only if its allocation was seen in this call: the allocator's
    # bookkeeping may still hold a block allocated under an earlier profiler.
    live: dict[int, int] = {}
    running = peak = 0
    for _, _, addr, nbytes in events:
        if nbytes > 0:
            live[addr] = live.get(addr, 0) + nbytes
            running += nbytes
        elif addr in live:
            running -= live.pop(addr)
        peak = max(peak, running)
    return peak


def memory_row(ours_bytes: int, peer_bytes: int) -> dict:
    return {
        "ours_value": ours_bytes / 2**20,
        "peer_value": peer_bytes / 2**20,
        "unit": "MiB",
        "ratio": ours_bytes / peer_bytes,
        "ratio_min": None,
        "ratio_max": None,
    }


def goal_met(row: dict) -> bool | None:
    """Whether a row meets its goal (``goal_ratio``: ratio at most; ``goal_value``: ours at most)."""
    if row.get("skipped"):
        return None
    if row.get("goal_ratio") is not None:
        return row["ratio"] <= row["goal_ratio"]
    if row.get("goal_value") is not None:
        return row["ours_value"] <= row["goal_value"]
    return None
