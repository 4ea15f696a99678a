"""Seeding and device selection: the standard first cell of every notebook.

A rerun of a notebook on the CPU must print the same numbers, so every source
of randomness the course uses (Python's ``random``, NumPy, PyTorch on CPU and
CUDA) is seeded from one integer.  The device is CUDA when one is present,
else the CPU; ``COURSE_DEVICE=cpu`` forces the CPU (useful on a GPU machine
when comparing against the CPU numbers the prose quotes).
"""

from __future__ import annotations

import os
import platform
import random

import numpy as np
import torch

__all__ = ["seed_everything", "get_device", "setup_notebook", "describe_hardware"]


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (CPU and every CUDA device) with ``seed``."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


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


def describe_hardware() -> str:
    """One line naming the CPU, core count, GPU (if any) and library versions."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, {gpu}; "
        f"Python {platform.python_version()}, PyTorch {torch.__version__}"
    )


def setup_notebook(seed: int = 0, *, quiet: bool = False) -> torch.device:
    """Seed everything, pick the device and return it (the standard first cell).

    On the CPU it also sets PyTorch to one thread (``COURSE_NUM_THREADS``
    overrides): the course's models are small, and on a 2-core machine with
    any other load, two threads per operation made training steps 6 to 30
    times slower than one (measured while building the course).

    With ``COURSE_REQUIRE_GPU=1`` (set by the GPU workflow) it raises instead
    of falling back to the CPU.

    """
    seed_everything(seed)
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
        print(f"seed={seed}, device={device} ({describe_hardware()})")
    return device
