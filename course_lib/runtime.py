"""Seeding and device selection: the standard first cell of every notebook.

Every source of randomness in a notebook (Python's ``random``, NumPy, PyTorch
on CPU and CUDA, data generators, data splits) derives from **one seed**, the
notebook's, which ``setup_notebook`` sets and ``COURSE_SEED=k`` overrides.
A notebook that needs several independent streams asks for them by number:
``derived_seed(k)`` is an integer seed and ``generator(k)`` a seeded
``torch.Generator``, both functions of the notebook's seed and ``k``.

A fixed seed makes a rerun on the *same* machine repeat itself; it does not
give the same trained numbers on another CPU, thread count, GPU or PyTorch
release, which round floating point differently. So the course asserts only
claims that hold for any seed, with margins measured over seeds
(``python tools/sweep.py``, which collects the numbers that notebooks
pass to ``record``), and the prose shows the numbers its own build computed.

The device is CUDA when one is present, else the CPU; ``COURSE_DEVICE=cpu``
forces the CPU.
"""

from __future__ import annotations

import json
import os
import platform
import random
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "seed_everything",
    "notebook_seed",
    "derived_seed",
    "generator",
    "get_device",
    "setup_notebook",
    "describe_hardware",
    "record",
]

# Offsets k of derived_seed(k) stay below this, so that two notebook seeds
# never share a derived seed: seed s, stream k -> SEED_STRIDE * s + k.
SEED_STRIDE = 100_000

_notebook_seed = 0  # set by setup_notebook

# Where record() appends a notebook's headline numbers; set by tools/sweep.py.
RESULTS_ENV = "COURSE_RESULTS_FILE"


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (CPU and every CUDA device) with ``seed``."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def notebook_seed(default: int = 0) -> int:
    """The seed ``setup_notebook`` will use: ``COURSE_SEED`` if set, else ``default``."""
    text = os.environ.get("COURSE_SEED", "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise ValueError(f"COURSE_SEED must be a non-negative integer, got {text!r}")
    return int(text)


def derived_seed(stream: int) -> int:
    """An integer seed for random stream number ``stream`` of this notebook.

    ``SEED_STRIDE * s + stream`` for the notebook's seed ``s``: with the
    default seed 0 it is ``stream`` itself, and ``COURSE_SEED`` moves every
    stream of the notebook at once.
    """
    if not isinstance(stream, int) or not 0 <= stream < SEED_STRIDE:
        raise ValueError(f"stream must be an int in [0, {SEED_STRIDE}), got {stream!r}")
    return SEED_STRIDE * _notebook_seed + stream


def generator(stream: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``derived_seed(stream)``."""
    return torch.Generator().manual_seed(derived_seed(stream))


def get_device(prefer: str | None = None) -> torch.device:
    """The device notebooks compute on.

    ``prefer`` (or the environment variable ``COURSE_DEVICE``) may be ``"cpu"``
    or ``"cuda"``; by default CUDA is used when available.
    """
    choice = (prefer or os.environ.get("COURSE_DEVICE", "")).strip().lower()
    if choice in ("", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cpu":
        return torch.device("cpu")
    if choice.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"COURSE_DEVICE={choice!r} asks for a GPU, but torch.cuda.is_available() is "
                "False. Unset COURSE_DEVICE to use the CPU, or install a CUDA build of PyTorch."
            )
        return torch.device(choice)
    raise ValueError(f"Unknown device {choice!r}: use 'cpu', 'cuda' or 'auto'.")


def _cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_hardware() -> str:
    """One line naming the CPU, core count, GPU (if any) and library versions."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{_cpu_name()}, {os.cpu_count()} CPU cores, {gpu}; "
        f"Python {platform.python_version()}, PyTorch {torch.__version__}"
    )


def setup_notebook(seed: int = 0, *, quiet: bool = False) -> torch.device:
    """Seed everything, pick the device and return it (the standard first cell).

    ``COURSE_SEED`` in the environment replaces ``seed``; every later
    ``derived_seed`` and ``generator`` of the notebook follows it.

    On the CPU it also sets PyTorch to one thread (``COURSE_NUM_THREADS``
    overrides): the course's models are small, and for small operations the
    cost of sharing work between threads outweighs the gain.

    With ``COURSE_REQUIRE_GPU=1`` (set by the GPU workflow) it raises instead
    of falling back to the CPU.

    """
    global _notebook_seed
    seed = notebook_seed(seed)
    seed_everything(seed)
    _notebook_seed = seed
    device = get_device()
    if os.environ.get("COURSE_REQUIRE_GPU") == "1" and device.type != "cuda":
        raise RuntimeError(
            "COURSE_REQUIRE_GPU=1 but this notebook would run on the CPU "
            f"(torch.cuda.is_available() is {torch.cuda.is_available()}). Check nvidia-smi and "
            "that the installed PyTorch is a CUDA build, or unset COURSE_REQUIRE_GPU."
        )
    if device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("COURSE_NUM_THREADS", "1")))
    if not quiet:
        threads = torch.get_num_threads() if device.type == "cpu" else "-"
        print(f"seed={seed}, device={device}, threads={threads} ({describe_hardware()})")
    return device


def record(**values: float) -> None:
    """Record a notebook's computed numbers for its prose, the errata and the sweep.

    Call it next to the asserts on a result, with the numbers they test:
    ``course_lib.record(acc_local=0.97, acc_global=0.95)``. Each value is

    - glued into the notebook's output under its name (myst-nb's glue format,
      hidden in Jupyter and Colab), so that the chapter's Markdown quotes it as
      ``{glue:text}`acc_local:.2f``` and an erratum as
      ``{glue:text}`/notebooks/ch02_attention_seq2seq.ipynb::acc_local:.2f```: the
      page shows the number this run computed, never a retyped one;
    - appended to the sweep's results file when ``tools/sweep.py`` runs the
      notebook (outside a sweep, nothing is written).
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                values[name] = float(value)  # a 0-d tensor or NumPy scalar
            except (TypeError, ValueError):
                raise TypeError(
                    f"record({name}=...) takes a number, got {type(value).__name__}; "
                    "pass float(x) or x.item()."
                ) from None
    for name, value in values.items():
        _glue(name, float(value))
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({k: float(v) for k, v in values.items()}) + "\n")


#: myst-nb reads a glued value from a display output whose MIME types carry
#: this prefix and whose metadata names it; front ends show no such output.
GLUE_PREFIX = "application/papermill.record/"


def _glue(name: str, value: float) -> None:
    """Display ``value`` as myst-nb's ``glue(name, value, display=False)`` does.

    Written out here so that the notebooks need no myst-nb (Colab has none).
    Outside an IPython kernel it does nothing.
    """
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return
    display(
        {GLUE_PREFIX + "text/plain": repr(value)},
        raw=True,
        metadata={"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}},
    )
