"""The course's training loop and training practices (Chapter 1; extended in Chapter 9).

``train`` knows nothing about the model or the data: it asks ``make_batch`` for
a batch at every step and ``loss_fn(model, batch)`` for a scalar loss, then
takes one optimizer step (AdamW by default) with the gradient norm clipped.  It
returns the loss of every step, so a notebook can plot the curve.

Chapter 9 adds, all optional and keyword-only (Chapter 1's calls are unchanged):

* a learning-rate ``schedule`` (a multiplier of the base rate per step), for
  example :func:`warmup_cosine` or :func:`warmup_inverse_sqrt`, eqs. (9.1)-(9.2);
* evaluation every ``eval_every`` steps with early stopping (``patience``) and
  the best weights restored;
* checkpoints that hold the model, the optimizer, the scheduler, the loss
  history and every random state, so that a run interrupted and resumed gives
  exactly the weights of an uninterrupted one (on the CPU);
* mixed precision through ``torch.autocast`` (bfloat16 on the CPU, float16 with
  a gradient scaler or bfloat16 on CUDA).

The training practices themselves are small functions, each matched to
PyTorch where PyTorch has one: :func:`label_smoothing_cross_entropy` (eq. 9.3,
equal to ``nn.CrossEntropyLoss(label_smoothing=...)``), :func:`clip_grad_norm`
(eq. 9.4, equal to ``nn.utils.clip_grad_norm_``), :func:`drop_path` and
:class:`StochasticDepth` (eq. 9.5), and :func:`torch_warmup_cosine`, the
same schedule as :func:`warmup_cosine` built from ``torch.optim.lr_scheduler``.

Steps are counted from 1: update ``s`` (``s = 1 .. T``) uses the rate
``lr * schedule(s - 1)``; the argument is ``LambdaLR``'s ``last_epoch``.
"""

from __future__ import annotations

import copy
import math
import os
import random
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import trange

__all__ = [
    "train",
    "TrainResult",
    "warmup_cosine",
    "warmup_inverse_sqrt",
    "torch_warmup_cosine",
    "label_smoothing_cross_entropy",
    "clip_grad_norm",
    "drop_path",
    "StochasticDepth",
    "rng_state",
    "set_rng_state",
]


# ---------------------------------------------------------------------------
# Learning-rate schedules, eqs. (9.1)-(9.2): multipliers of the base rate
# ---------------------------------------------------------------------------


def _check_warmup(where: str, warmup: int, total: int | None = None) -> None:
    if not isinstance(warmup, int) or warmup < 1:
        raise ValueError(f"{where}: warmup must be an int >= 1, got {warmup!r}")
    if total is not None and (not isinstance(total, int) or total <= warmup):
        raise ValueError(f"{where}: total must be an int > warmup={warmup}, got {total!r}")


def warmup_cosine(warmup: int, total: int, min_ratio: float = 0.0) -> Callable[[int], float]:
    """Linear warmup then cosine decay, Chapter 9, eq. (9.1); a ``LambdaLR`` multiplier.

    With ``s = t + 1`` the number of the update (``t`` is ``LambdaLR``'s step
    count, ``0 .. total - 1``)::

        f = s / warmup                                                  s <= warmup
        f = m + (1 - m) * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2   after

    so the rate climbs to its peak at update ``warmup`` and reaches
    ``m = min_ratio`` at update ``total``.  :func:`torch_warmup_cosine` builds
    the same schedule from PyTorch's own schedulers.
    """
    _check_warmup("warmup_cosine", warmup, total)
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"warmup_cosine: min_ratio must be in [0, 1], got {min_ratio}")

    def factor(t: int) -> float:
        s = t + 1
        if s <= warmup:
            return s / warmup
        progress = min(1.0, (s - warmup) / (total - warmup))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def warmup_inverse_sqrt(warmup: int) -> Callable[[int], float]:
    """Linear warmup then inverse-square-root decay, Chapter 9, eq. (9.2).

    ``f = min(s / warmup, sqrt(warmup / s))`` with ``s = t + 1``: the schedule
    of the Transformer paper, ``d^-0.5 min(s^-0.5, s warmup^-1.5)``, divided by
    its peak ``(d warmup)^-0.5`` so that the base rate is the peak rate.
    """
    _check_warmup("warmup_inverse_sqrt", warmup)

    def factor(t: int) -> float:
        s = t + 1
        return min(s / warmup, math.sqrt(warmup / s))

    return factor


def torch_warmup_cosine(
    optimizer: torch.optim.Optimizer, warmup: int, total: int, min_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LRScheduler:
    """:func:`warmup_cosine` built from PyTorch schedulers (``warmup >= 2``).

    ``LinearLR`` from ``1 / warmup`` to 1 over ``warmup - 1`` steps, then
    ``CosineAnnealingLR`` over the remaining ``total - warmup`` steps down to
    ``min_ratio`` times each group's base rate, chained by ``SequentialLR``.
    """
    _check_warmup("torch_warmup_cosine", warmup, total)
    if warmup < 2:
        raise ValueError("torch_warmup_cosine: LinearLR needs warmup >= 2")
    sched = torch.optim.lr_scheduler
    base = [group["lr"] for group in optimizer.param_groups]
    if len(set(base)) != 1:
        raise ValueError("torch_warmup_cosine: all parameter groups must share one base lr")
    linear = sched.LinearLR(optimizer, 1.0 / warmup, 1.0, total_iters=warmup - 1)
    cosine = sched.CosineAnnealingLR(optimizer, T_max=total - warmup, eta_min=min_ratio * base[0])
    return sched.SequentialLR(optimizer, [linear, cosine], milestones=[warmup - 1])


# ---------------------------------------------------------------------------
# Regularisers and stabilisers, eqs. (9.3)-(9.5)
# ---------------------------------------------------------------------------


def label_smoothing_cross_entropy(
    logits: Tensor, target: Tensor, smoothing: float = 0.1, ignore_index: int = -100
) -> Tensor:
    """Cross-entropy against a smoothed target, Chapter 9, eq. (9.3).

    ``logits [N, C]`` (or ``[N, C, ...]`` like ``F.cross_entropy``), ``target [N]``
    class indices.  The target distribution is ``q = (1 - eps) onehot(y) + eps / C``
    (the mass ``eps`` spread over all ``C`` classes, the true one included), so

        loss = (1 - eps) * (-log p_y) + eps * mean_c(-log p_c),

    averaged over the targets that are not ``ignore_index``.  Equal to
    ``nn.CrossEntropyLoss(label_smoothing=eps, ignore_index=...)``.
    """
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(
            f"label_smoothing_cross_entropy: smoothing must be in [0, 1], got {smoothing}"
        )
    if logits.dim() < 2 or target.shape != logits.shape[:1] + logits.shape[2:]:
        raise ValueError(
            "label_smoothing_cross_entropy: logits must be [N, C, ...] and target [N, ...], got "
            f"{list(logits.shape)} and {list(target.shape)}"
        )
    logp = F.log_softmax(logits.float(), dim=1)  # [N, C, ...]
    keep = target != ignore_index  # [N, ...]
    safe = target.masked_fill(~keep, 0)
    nll = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)  # -log p_y       [N, ...]
    uniform = -logp.mean(dim=1)  # mean_c -log p_c                       [N, ...]
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return (loss * keep).sum() / keep.sum().clamp(min=1)


def clip_grad_norm(parameters: Iterable[Tensor], max_norm: float) -> Tensor:
    """Rescale gradients so that their global L2 norm is at most ``max_norm``, eq. (9.4).

    ``g <- g * min(1, max_norm / (||g|| + 1e-6))`` with ``||g||`` the norm of all
    gradients concatenated; returns ``||g||`` before clipping.  Equal to
    ``nn.utils.clip_grad_norm_``.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return total


def drop_path(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Stochastic depth on one residual branch, Chapter 9, eq. (9.5).

    In training, each example of the batch (dimension 0) keeps the branch with
    probability ``1 - p`` and is scaled by ``1 / (1 - p)`` (so the expectation is
    unchanged); in evaluation it is the identity.  Used as
    ``x + drop_path(block(x), p)``, it skips the whole block for that example.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"drop_path: p must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return x
    shape = (x.shape[0],) + (1,) * (x.dim() - 1)
    keep = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(1.0 - p)
    return x * keep / (1.0 - p)


class StochasticDepth(nn.Module):
    """``x + drop_path(block(x), p)``: a residual block that is skipped at random, eq. (9.5)."""

    def __init__(self, block: nn.Module, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"StochasticDepth: p must be in [0, 1), got {p}")
        self.block, self.p = block, p

    def forward(self, x: Tensor) -> Tensor:
        return x + drop_path(self.block(x), self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# ---------------------------------------------------------------------------
# Random state, for checkpoints that resume exactly
# ---------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """Every random state the course uses: Python, NumPy, PyTorch CPU and CUDA."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------


class TrainResult(list):
    """The per-step losses (a ``list[float]``, as Chapter 1 uses it) plus what Chapter 9 adds.

    Attributes: ``lrs`` (the rate of every step), ``evals`` (``(step, value)``
    pairs from ``eval_fn``), ``best_step`` and ``best_value`` (the best
    evaluation; ``None`` without ``eval_fn``), ``stopped_early`` (bool) and
    ``resumed_from`` (the step a checkpoint was loaded at, or ``None``).
    """

    def __init__(self, losses: Iterable[float] = ()) -> None:
        super().__init__(losses)
        self.lrs: list[float] = []
        self.evals: list[tuple[int, float]] = []
        self.best_step: int | None = None
        self.best_value: float | None = None
        self.stopped_early = False
        self.resumed_from: int | None = None


def _device_of(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)  # a crash while saving never leaves a broken checkpoint


def train(
    model: nn.Module,
    make_batch: Callable[[], Any],
    loss_fn: Callable[[nn.Module, Any], Tensor],
    steps: int,
    lr: float = 1e-3,
    *,
    weight_decay: float = 0.01,
    clip_norm: float | None = 1.0,
    progress: bool = True,
    desc: str = "training",
    optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
    schedule: Callable[[int], float] | None = None,
    eval_fn: Callable[[nn.Module], float] | None = None,
    eval_every: int = 100,
    patience: int | None = None,
    restore_best: bool = True,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
    resume: bool = False,
    amp_dtype: torch.dtype | None = None,
) -> TrainResult:
    """Train ``model`` for ``steps`` optimizer steps and return the per-step losses.

    ``make_batch()`` returns a batch (already on the model's device);
    ``loss_fn(model, batch)`` returns a scalar tensor.  Gradients are clipped to
    a global L2 norm of ``clip_norm`` (``None``: no clipping).  With
    ``progress=True`` a ``tqdm.auto`` bar shows the running loss.
    Raises ``FloatingPointError`` as soon as the loss is not finite.

    Chapter 9 options (keyword-only, all off by default):

    * ``optimizer(params)``: builds the optimizer (default ``AdamW(lr, weight_decay)``);
    * ``schedule(t)``: multiplier of ``lr`` for step ``t = 0 .. steps - 1`` (``LambdaLR``);
    * ``eval_fn(model)``: a validation value, lower is better, computed every
      ``eval_every`` steps and after the last one under ``torch.no_grad()`` in
      eval mode; with ``patience`` the run stops after that many evaluations
      without improvement, and with ``restore_best`` the best weights are
      loaded back at the end;
    * ``checkpoint``: a file written every ``checkpoint_every`` steps (and at
      the end) with the model, optimizer, scheduler, loss history, evaluation
      state and random states; with ``resume=True`` an existing file is loaded
      first and training continues from its step, so the result equals an
      uninterrupted run;
    * ``amp_dtype``: ``torch.bfloat16`` (CPU or CUDA) or ``torch.float16``
      (CUDA, with a gradient scaler): the forward pass and loss run under
      ``torch.autocast``; the weights and the optimizer stay in float32.
    """
    if steps < 0:
        raise ValueError(f"train: steps must be >= 0, got {steps}")
    if eval_every < 1 or checkpoint_every < 1:
        raise ValueError("train: eval_every and checkpoint_every must be >= 1")
    if patience is not None and (eval_fn is None or patience < 1):
        raise ValueError("train: patience needs an eval_fn and must be >= 1")
    if resume and checkpoint is None:
        raise ValueError("train: resume=True needs a checkpoint path")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("train: the model has no trainable parameters")
    device = _device_of(model)
    if amp_dtype not in (None, torch.bfloat16, torch.float16):
        raise ValueError(f"train: amp_dtype must be None, bfloat16 or float16, got {amp_dtype}")
    if amp_dtype == torch.float16 and device.type != "cuda":
        raise ValueError("train: float16 autocast needs CUDA; use torch.bfloat16 on the CPU")
    opt = (
        optimizer(params)
        if optimizer
        else torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule) if schedule else None
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None

    result = TrainResult()
    best_state: dict[str, Tensor] | None = None
    bad_evals, start = 0, 0
    path = Path(checkpoint) if checkpoint is not None else None

    if resume and path is not None and path.exists():
        ck = torch.load(path, map_location=device, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        if sched is not None:
            sched.load_state_dict(ck["scheduler"])
        if scaler is not None and ck.get("scaler") is not None:
            scaler.load_state_dict(ck["scaler"])
        result.extend(ck["losses"])
        result.lrs, result.evals = ck["lrs"], ck["evals"]
        result.best_step, result.best_value = ck["best_step"], ck["best_value"]
        best_state, bad_evals, start = ck["best_state"], ck["bad_evals"], ck["step"]
        result.resumed_from = start
        set_rng_state(ck["rng"])

    def save(step: int) -> None:
        if path is None:
            return
        _save_atomic(
            {
                "step": step,
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict() if sched is not None else None,
                "scaler": scaler.state_dict() if scaler is not None else None,
                "losses": list(result),
                "lrs": result.lrs,
                "evals": result.evals,
                "best_step": result.best_step,
                "best_value": result.best_value,
                "best_state": best_state,
                "bad_evals": bad_evals,
                "rng": rng_state(),
            },
            path,
        )

    def evaluate(step: int) -> bool:
        """Record one evaluation; True when early stopping says stop."""
        nonlocal best_state, bad_evals
        model.eval()
        with torch.no_grad():
            value = float(eval_fn(model))
        model.train()
        result.evals.append((step, value))
        if result.best_value is None or value < result.best_value:
            result.best_step, result.best_value, bad_evals = step, value, 0
            if restore_best:
                best_state = copy.deepcopy(model.state_dict())
        else:
            bad_evals += 1
        return patience is not None and bad_evals >= patience

    model.train()
    bar = trange(start, steps, desc=desc, disable=not progress, mininterval=0.5)
    for step in bar:
        amp = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext()
        with amp:
            loss = loss_fn(model, make_batch())
        value = loss.item()
        if not math.isfinite(value):  # stop before a bad step corrupts the weights
            raise FloatingPointError(f"train: loss became {value} at step {step}")
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        if clip_norm is not None:
            nn.utils.clip_grad_norm_(params, clip_norm)
        result.lrs.append(opt.param_groups[0]["lr"])
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if sched is not None:
            sched.step()
        result.append(value)
        done = step + 1
        if progress and (step % 20 == 0 or done == steps):
            bar.set_postfix(loss=f"{value:.4f}", refresh=False)
        stop = False
        if eval_fn is not None and (done % eval_every == 0 or done == steps):
            stop = evaluate(done)
        if path is not None and (done % checkpoint_every == 0 or done == steps or stop):
            save(done)
        if stop:
            result.stopped_early = True
            break
    bar.close()
    if restore_best and best_state is not None:
        model.load_state_dict(best_state)
    return result
