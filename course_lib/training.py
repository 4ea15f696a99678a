"""The course's training loop (Chapter 1) and the training practices of Chapter 9.

:func:`train` is about thirty lines: it asks ``make_batch()`` for a batch at
every step and ``loss_fn(model, batch)`` for a scalar loss, takes one optimizer
step (AdamW by default) with the gradient norm clipped, and returns the loss of
every step.  It knows nothing about the model or the data.

Chapter 9's additions plug into the same loop as *callbacks*, in
:mod:`course_lib.callbacks` and re-exported here: :class:`Schedule`,
:class:`EarlyStopping`, :class:`Checkpoint` and :class:`MixedPrecision` (the
forward pass under ``torch.autocast``; for float16 the loop's
``torch.amp.GradScaler`` is switched on).  The GAT paper's stopping rule
(Chapter 14) is one more callback, in :mod:`course_lib.gat_training`.

The training practices themselves are small functions, each matched to
PyTorch where PyTorch has one: :func:`label_smoothing_cross_entropy` (eq. 9.3,
equal to ``nn.CrossEntropyLoss(label_smoothing=...)``), :func:`clip_grad_norm`
(eq. 9.4, equal to ``nn.utils.clip_grad_norm_``), :func:`adamw_step` (one
Adam/AdamW update written from eqs. 9.5-9.6, equal to ``torch.optim.AdamW``, or with
``decoupled=False`` to ``torch.optim.Adam`` with an L2 penalty), :func:`drop_path`
(eq. 9.7), and :func:`torch_warmup_cosine`, the same schedule as :func:`warmup_cosine`
built from ``torch.optim.lr_scheduler``.  Schedules are multipliers of the base
rate, eqs. (9.1)-(9.2).

Steps are counted from 1: update ``s`` (``s = 1 .. T``) uses the rate
``lr * factor(s - 1)``; the argument is ``LambdaLR``'s ``last_epoch``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim import AdamW
from tqdm.auto import trange

from course_lib.callbacks import (
    Callback,
    Checkpoint,
    EarlyStopping,
    MixedPrecision,
    Schedule,
    rng_state,
    set_rng_state,
)
from course_lib.shapes import fmt_shape

__all__ = [
    "train",
    "Run",
    "Callback",
    "Schedule",
    "EarlyStopping",
    "Checkpoint",
    "MixedPrecision",
    "rng_state",
    "set_rng_state",
    "warmup_cosine",
    "warmup_inverse_sqrt",
    "torch_warmup_cosine",
    "label_smoothing_cross_entropy",
    "clip_grad_norm",
    "adamw_step",
    "drop_path",
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
# Regularisers, stabilisers and the optimizer, eqs. (9.3)-(9.7)
# ---------------------------------------------------------------------------


def _check_label_smoothing(logits: Tensor, target: Tensor, smoothing: float) -> None:
    """Raise unless ``logits`` is [N, C, ...], ``target`` [N, ...] and ``smoothing`` in [0, 1]."""
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(
            f"label_smoothing_cross_entropy: smoothing must be in [0, 1], got {smoothing}"
        )
    if logits.dim() < 2 or target.shape != logits.shape[:1] + logits.shape[2:]:
        raise ValueError(
            "label_smoothing_cross_entropy: logits must be [N, C, ...] and target [N, ...], got "
            f"{fmt_shape(logits.shape)} and {fmt_shape(target.shape)}"
        )


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
    _check_label_smoothing(logits, target, smoothing)
    # at least float32 inside (bfloat16 logs are coarse), the logits' dtype out, as F.cross_entropy
    logp = F.log_softmax(logits, dim=1, dtype=torch.promote_types(logits.dtype, torch.float32))
    keep = target != ignore_index  # [N, ...]
    safe = target.masked_fill(~keep, 0)
    nll = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)  # -log p_y       [N, ...]
    uniform = -logp.mean(dim=1)  # mean_c -log p_c                       [N, ...]
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    # float32 under autocast (as F.cross_entropy, which autocast runs in float32: a float16
    # loss times GradScaler's 2**16 overflows), else the logits' dtype
    out = torch.float32 if torch.is_autocast_enabled(logits.device.type) else logits.dtype
    return ((loss * keep).sum() / keep.sum().clamp(min=1)).to(out)


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


def _check_adamw(param: Tensor, grad: Tensor, betas: tuple[float, float]) -> None:
    """Raise unless ``param`` and ``grad`` have one shape and both betas lie in [0, 1)."""
    if param.shape != grad.shape:
        raise ValueError(
            f"adamw_step: param and grad must have one shape, got {fmt_shape(param.shape)} "
            f"and {fmt_shape(grad.shape)}"
        )
    if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
        raise ValueError(f"adamw_step: betas must be in [0, 1), got {betas}")


@torch.no_grad()
def adamw_step(
    param: Tensor,
    grad: Tensor,
    state: dict[str, Any],
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = True,
) -> None:
    """One Adam update of ``param`` (any shape) in place, Chapter 9, eqs. (9.5)-(9.6).

    ``grad`` is the loss gradient, the same shape as ``param``; ``state`` is an
    empty dict before the first step and keeps the step count ``t`` and the two
    moving averages ``m``, ``v`` (each the shape of ``param``) between calls::

        g = grad (+ weight_decay * param   if not decoupled: L2 in the gradient)
        m = b1 m + (1 - b1) g                  v = b2 v + (1 - b2) g^2
        m_hat = m / (1 - b1^t)                 v_hat = v / (1 - b2^t)
        param -= lr * (m_hat / (sqrt(v_hat) + eps) (+ weight_decay * param  if decoupled))

    ``decoupled=True`` is AdamW (equal to ``torch.optim.AdamW``); ``False`` is Adam
    with an L2 penalty added to the gradient (equal to ``torch.optim.Adam`` with
    ``weight_decay``), whose decay is then divided by ``sqrt(v_hat)`` like the rest.
    """
    _check_adamw(param, grad, betas)
    b1, b2 = betas
    if not state:
        state.update(t=0, m=torch.zeros_like(param), v=torch.zeros_like(param))
    state["t"] += 1
    t = state["t"]
    g = grad if decoupled else grad + weight_decay * param  # L2: the penalty's gradient
    state["m"].mul_(b1).add_((1 - b1) * g)  # first moment, eq. (9.5)
    state["v"].mul_(b2).add_((1 - b2) * g * g)  # second moment
    m_hat = state["m"] / (1 - b1**t)  # bias corrections
    v_hat = state["v"] / (1 - b2**t)
    update = m_hat / (v_hat.sqrt() + eps)
    if decoupled:  # AdamW, eq. (9.6): the decay is not divided by sqrt(v_hat)
        update = update + weight_decay * param
    param.sub_(lr * update)


def drop_path(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Stochastic depth on one residual branch, Chapter 9, eq. (9.7).

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


# ---------------------------------------------------------------------------
# The loop (Chapter 1)
# ---------------------------------------------------------------------------


@dataclass
class Run:
    """What :func:`train` shares with its callbacks: model, optimizer, progress, losses.

    ``step`` counts finished updates; a callback ends the run by setting
    ``stop``.  :class:`MixedPrecision` replaces ``autocast`` (a context-manager
    factory around the forward pass and the loss; by default it does nothing)
    and, for float16, ``scaler`` (by default a disabled ``GradScaler``, whose
    every method passes through: the plain float32 step).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    steps: int
    callbacks: list[Callback] = field(default_factory=list)
    step: int = 0
    losses: list[float] = field(default_factory=list)
    stop: bool = False
    autocast: Callable[[], AbstractContextManager] = nullcontext
    scaler: torch.amp.GradScaler = field(
        default_factory=lambda: torch.amp.GradScaler("cpu", enabled=False)
    )


def _check_train(steps: int, params: list[nn.Parameter]) -> None:
    """Raise unless :func:`train` has steps to take and parameters to train."""
    if steps < 0:
        raise ValueError(f"train: steps must be >= 0, got {steps}")
    if not params:
        raise ValueError(
            "train: the model has no trainable parameters (all have requires_grad=False); "
            "unfreeze some, e.g. with p.requires_grad_(True)"
        )


def train(
    model: nn.Module,
    make_batch: Callable[[], Any],
    loss_fn: Callable[[nn.Module, Any], Tensor],
    steps: int,
    lr: float = 1e-3,
    *,
    weight_decay: float = 0.01,
    clip_norm: float | None = 1.0,
    optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
    callbacks: Iterable[Callback] = (),
    progress: bool = True,
    desc: str = "training",
) -> list[float]:
    """The course's training loop: ``steps`` updates of ``model``; returns the loss of each.

    ``make_batch()`` returns a batch (on the model's device) and ``loss_fn(model,
    batch)`` a scalar loss.  Each step: forward, backward, gradients clipped to a
    global norm of ``clip_norm`` (eq. (9.4); ``None``: no clipping), one
    optimizer step (``AdamW(lr, weight_decay)`` unless ``optimizer(params)``
    builds another).  Raises ``FloatingPointError`` as soon as the loss is not
    finite.  ``callbacks`` are Chapter 9's additions (:class:`Schedule`,
    :class:`EarlyStopping`, :class:`Checkpoint`, :class:`MixedPrecision`).
    With ``MixedPrecision(torch.float16)`` the backward pass runs on the loss
    times the ``GradScaler``'s scale, the gradients are unscaled before
    clipping, and ``scaler.step`` skips an update whose gradients are not
    finite (the loss of that step is still recorded).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    _check_train(steps, params)
    # foreach: one call per operation over all tensors (the CUDA default); on the CPU it
    # gives the same weights as the default loop over tensors, with less Python per step.
    opt = (
        optimizer(params)
        if optimizer
        else AdamW(params, lr, weight_decay=weight_decay, foreach=True)
    )
    run = Run(model, opt, steps, sorted(callbacks, key=lambda c: c.order))
    for callback in run.callbacks:
        callback.on_start(run)  # Chapter 9: schedule, resume, mixed precision
    model.train()
    bar = trange(run.step, steps, desc=desc, disable=not progress, mininterval=0.5)
    for step in bar:
        with run.autocast():
            loss = loss_fn(model, make_batch())
        value = loss.item()
        if not math.isfinite(value):  # stop before a bad step corrupts the weights
            raise FloatingPointError(f"train: loss became {value} at step {step}")
        opt.zero_grad(set_to_none=True)
        run.scaler.scale(loss).backward()  # float16: loss x scale; otherwise the loss itself
        if clip_norm is not None:
            run.scaler.unscale_(opt)  # clip the true gradient, not the scaled one
            nn.utils.clip_grad_norm_(params, clip_norm)  # (9.4)
        run.scaler.step(opt)  # float16: skipped if a gradient is inf or NaN
        run.scaler.update()
        run.step = step + 1
        run.losses.append(value)
        if step % 20 == 0 or run.step == steps:
            bar.set_postfix(loss=f"{value:.4f}", refresh=False)
        for callback in run.callbacks:
            callback.on_step(run)  # Chapter 9: schedule, evaluation, checkpoint
        if run.stop:
            break
    bar.close()
    for callback in run.callbacks:
        callback.on_end(run)
    return run.losses
