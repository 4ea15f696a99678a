"""A small, generic training loop (Chapter 1; Chapter 9 extends it).

``train`` knows nothing about the model or the data: it asks ``make_batch`` for
a batch at every step and ``loss_fn(model, batch)`` for a scalar loss, then
takes one AdamW step with the gradient norm clipped.  It returns the loss of
every step, so a notebook can plot the curve.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import trange

__all__ = ["train"]


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
) -> list[float]:
    """Train ``model`` for ``steps`` AdamW steps and return the per-step losses.

    ``make_batch()`` returns a batch (already on the model's device);
    ``loss_fn(model, batch)`` returns a scalar tensor.  Gradients are clipped to
    a global L2 norm of ``clip_norm`` (``None``: no clipping).  With
    ``progress=True`` a ``tqdm.auto`` bar shows the running loss.
    Raises ``FloatingPointError`` as soon as the loss is not finite.
    """
    if steps < 0:
        raise ValueError(f"train: steps must be >= 0, got {steps}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("train: the model has no trainable parameters")
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    model.train()
    losses: list[float] = []
    bar = trange(steps, desc=desc, disable=not progress, mininterval=0.5)
    for step in bar:
        loss = loss_fn(model, make_batch())
        value = loss.item()
        if not math.isfinite(value):  # stop before a bad step corrupts the weights
            raise FloatingPointError(f"train: loss became {value} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm is not None:
            nn.utils.clip_grad_norm_(params, clip_norm)
        optimizer.step()
        losses.append(value)
        if progress and (step % 20 == 0 or step == steps - 1):
            bar.set_postfix(loss=f"{value:.4f}", refresh=False)
    bar.close()
    return losses
