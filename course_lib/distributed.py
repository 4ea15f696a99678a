"""Data-parallel training with ``torch.distributed``, runnable on the CPU (Chapter 9).

Each of ``W`` processes holds a full copy of the model and sees ``1 / W`` of
every batch.  ``DistributedDataParallel`` (DDP) averages the gradients over the
processes during ``backward`` (an all-reduce), so every copy takes the same
step.  With equal shards, the average of the shards' mean losses is the mean
loss of the full batch, eq. (9.8)::

    (1/W) sum_r grad (1/b) sum_{i in shard r} l_i  =  grad (1/(W b)) sum_i l_i,

so ``W`` processes on ``W`` shards give the weights of one process on the
full batch, up to float rounding of the all-reduce.

:func:`run_ddp` launches ``W`` processes with the ``gloo`` backend (CPU) in a
process each (``python -m course_lib.distributed --rank r``, what ``torchrun``
would start), with a free localhost port and a timeout, and
returns the weights that rank 0 saved; :func:`train_single` trains the same
model on the full batch in this process.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "make_model",
    "make_data",
    "sgd_steps",
    "train_single",
    "ddp_worker",
    "run_ddp",
]

LR = 0.05


def make_model(seed: int = 0) -> nn.Module:
    """The small MLP of the experiment, initialised from ``seed`` (same on every rank)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


def make_data(seed: int = 0, n: int = 64) -> tuple[Tensor, Tensor]:
    """A fixed regression batch ``x [n, 8]``, ``y [n, 1]``."""
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, 8, generator=g)
    y = torch.sin(x[:, :1] * 2) + 0.1 * x[:, 1:2] ** 2
    return x, y


def sgd_steps(model: nn.Module, x: Tensor, y: Tensor, steps: int) -> None:
    """``steps`` full-batch SGD updates (momentum 0.9) of the squared error on ``(x, y)``."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)  # mean over this process's examples
        opt.zero_grad(set_to_none=True)
        loss.backward()  # under DDP: gradients all-reduced (averaged) here, eq. (9.8)
        opt.step()


def train_single(steps: int = 20, seed: int = 0, n: int = 64) -> dict[str, Tensor]:
    """One process, the full batch: the reference weights."""
    model = make_model(seed)
    x, y = make_data(seed, n)
    sgd_steps(model, x, y, steps)
    return model.state_dict()


def ddp_worker(rank: int, world: int, port: int, steps: int, seed: int, n: int, out: str) -> None:
    """One of ``world`` processes: the same model, its own shard of the batch, gradients averaged."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        model = make_model(seed)  # same seed: same initial weights (DDP also broadcasts rank 0's)
        ddp = nn.parallel.DistributedDataParallel(model)
        x, y = make_data(seed, n)
        shard = slice(rank * n // world, (rank + 1) * n // world)  # this rank's 1/W of the batch
        sgd_steps(ddp, x[shard], y[shard], steps)
        if rank == 0:
            torch.save(model.state_dict(), out)
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    """A TCP port on localhost that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(
    world_size: int = 2, steps: int = 20, seed: int = 0, n: int = 64, timeout: float = 60.0
) -> dict[str, Tensor]:
    """Train with DDP on ``world_size`` CPU processes (gloo); return rank 0's weights.

    Starts ``python -m course_lib.distributed --rank r`` for each rank with this
    package on its ``PYTHONPATH`` (so it works from any working directory).  All
    ranks share one deadline, ``timeout`` seconds from the start: a rank that
    fails or hangs (the others then wait for it in the all-reduce) makes every
    process be killed and ``RuntimeError`` be raised with the ranks' output.
    """
    if n % world_size:
        raise ValueError(f"run_ddp: the batch n={n} must split evenly over {world_size} processes")
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ddp.pt")
        port = free_port()
        procs, log_paths = [], []
        deadline = time.monotonic() + timeout  # one deadline for all the ranks
        timed_out = False
        try:
            for rank in range(world_size):  # one OS process per rank, as torchrun would start
                cmd = [sys.executable, "-m", "course_lib.distributed", "--rank", str(rank)]
                cmd += ["--world-size", str(world_size), "--port", str(port)]
                cmd += ["--steps", str(steps), "--seed", str(seed), "--n", str(n), "--out", out]
                log_paths.append(os.path.join(tmp, f"rank{rank}.log"))
                with open(log_paths[-1], "wb") as log:  # a file: a full pipe cannot block a rank
                    procs.append(
                        subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
                    )
            while any(proc.poll() is None for proc in procs):
                if any(proc.returncode not in (None, 0) for proc in procs):
                    break  # a rank died: the others would wait for it in the all-reduce
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                time.sleep(0.05)
        finally:
            for proc in procs:  # never leave a process behind
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        if timed_out or any(p.returncode != 0 for p in procs) or not os.path.exists(out):
            logs = "\n".join(
                f"--- rank {rank} (exit code {proc.returncode}):\n"
                + Path(path).read_text(errors="replace")[-1000:]
                for rank, (proc, path) in enumerate(zip(procs, log_paths, strict=True))
            )
            why = f"did not finish within {timeout} s" if timed_out else "failed"
            raise RuntimeError(f"run_ddp: the DDP processes {why}:\n{logs}")
        return torch.load(out, weights_only=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="DDP on CPU processes (gloo), Chapter 9.")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--out", required=True)
    a = parser.parse_args(argv)
    ddp_worker(a.rank, a.world_size, a.port, a.steps, a.seed, a.n, a.out)


if __name__ == "__main__":
    main()
