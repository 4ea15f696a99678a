"""What Chapter 9 adds to the training loop: callbacks, random state and mixed precision.

:func:`course_lib.training.train` calls each callback before the first step
(``on_start``), after every update (``on_step``) and after the last
(``on_end``); a callback reads or changes the run, a
:class:`course_lib.training.Run` (model, optimizer, step, losses):

* :class:`Schedule`: a learning-rate multiplier per step, eqs. (9.1)-(9.2);
* :class:`EarlyStopping`: validation every few steps, stopping after
  ``patience`` evaluations without improvement, best weights restored;
* :class:`Checkpoint`: the model, optimizer, losses, callbacks' state and every
  random state (:func:`rng_state`) in one file, so an interrupted run resumes
  exactly (on the CPU; on a GPU up to the rounding of its kernels);
* :class:`MixedPrecision`: the forward pass under ``torch.autocast`` in
  bfloat16 or float16, with a ``torch.amp.GradScaler`` for float16.

:mod:`course_lib.training` re-exports all of them.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from course_lib.training import Run

__all__ = [
    "Callback",
    "Schedule",
    "EarlyStopping",
    "Checkpoint",
    "MixedPrecision",
    "rng_state",
    "set_rng_state",
]


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


def _byte_state(state: Tensor) -> Tensor:
    # torch.set_rng_state and cuda.set_rng_state_all take a CPU uint8 tensor ("ByteTensor");
    # a checkpoint loaded with map_location="cuda" has moved it to the GPU.
    return state.detach().to(device="cpu", dtype=torch.uint8).contiguous()


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned, wherever its tensors were loaded to.

    The PyTorch states go back to CPU byte tensors first, so a state loaded by
    ``torch.load(..., map_location="cuda")`` restores as well as one loaded on
    the CPU.
    """
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(_byte_state(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_byte_state(s) for s in state["cuda"]])


# ---------------------------------------------------------------------------
# Callbacks
# ---------------------------------------------------------------------------


class Callback:
    """An addition to :func:`train`; each method does nothing unless overridden.

    ``on_start(run)`` before the first step, ``on_step(run)`` after every
    update, ``on_end(run)`` after the last.  ``state_dict``/``load_state_dict``
    let a :class:`Checkpoint` save and restore what the callback keeps.
    Callbacks run in increasing ``order``.
    """

    order = 0

    def on_start(self, run: Run) -> None:
        pass

    def on_step(self, run: Run) -> None:
        pass

    def on_end(self, run: Run) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Schedule(Callback):
    """A learning-rate schedule, eqs. (9.1)-(9.2): update ``t + 1`` uses ``lr * factor(t)``.

    ``factor`` is a ``LambdaLR`` multiplier such as :func:`warmup_cosine`;
    ``lrs`` records the rate of every update.
    """

    def __init__(self, factor: Callable[[int], float]) -> None:
        self.factor = factor
        self.lrs: list[float] = []

    def on_start(self, run: Run) -> None:
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(run.optimizer, self.factor)

    def on_step(self, run: Run) -> None:
        self.lrs.append(run.optimizer.param_groups[0]["lr"])  # the rate this update used
        self.scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict(), "lrs": list(self.lrs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        self.lrs = list(state["lrs"])


class EarlyStopping(Callback):
    """Validate every ``every`` updates (and after the last); stop when it stops improving.

    ``eval_fn(model)`` returns a validation value, lower is better, computed in
    eval mode without gradients; ``evals`` keeps ``(step, value)`` pairs.  With
    ``patience``, the run stops after that many evaluations without a new best
    (``patience=None``: only record).  With ``restore_best`` the best weights are
    loaded back at the end.
    """

    def __init__(
        self,
        eval_fn: Callable[[nn.Module], float],
        every: int = 100,
        patience: int | None = None,
        restore_best: bool = True,
    ) -> None:
        if every < 1 or (patience is not None and patience < 1):
            raise ValueError(
                f"EarlyStopping: every and patience must be >= 1, got {every}, {patience}"
            )
        self.eval_fn, self.every, self.patience, self.restore_best = (
            eval_fn,
            every,
            patience,
            restore_best,
        )
        self.evals: list[tuple[int, float]] = []
        self.best_step: int | None = None
        self.best_value: float | None = None
        self.best_state: dict[str, Tensor] | None = None
        self.bad_evals = 0
        self.stopped_early = False

    def on_step(self, run: Run) -> None:
        if run.step % self.every and run.step != run.steps:
            return
        run.model.eval()
        with torch.no_grad():
            value = float(self.eval_fn(run.model))
        run.model.train()
        self.evals.append((run.step, value))
        if self.best_value is None or value < self.best_value:
            self.best_step, self.best_value, self.bad_evals = run.step, value, 0
            if self.restore_best:
                self.best_state = copy.deepcopy(run.model.state_dict())
        else:
            self.bad_evals += 1
        if self.patience is not None and self.bad_evals >= self.patience:
            run.stop = self.stopped_early = True

    def on_end(self, run: Run) -> None:
        if self.restore_best and self.best_state is not None:
            run.model.load_state_dict(self.best_state)

    _KEYS = ("evals", "best_step", "best_value", "best_state", "bad_evals", "stopped_early")

    def state_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self._KEYS}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in self._KEYS:
            setattr(self, key, state[key])


def _device_of(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


class Checkpoint(Callback):
    """Save the whole run every ``every`` updates (and at the end); ``resume`` continues one.

    The file holds the model, the optimizer, the losses, every other callback's
    state and every random state, so a run interrupted and resumed gives
    exactly the weights of an uninterrupted one (on the CPU).  With
    ``resume=True`` an existing file is loaded before the first step;
    ``resumed_from`` is the step it was saved at (``None`` if nothing was loaded).
    It runs after the other callbacks, whose state it saves.
    """

    order = 1

    def __init__(self, path: str | os.PathLike, every: int = 100, resume: bool = False) -> None:
        if every < 1:
            raise ValueError(f"Checkpoint: every must be >= 1, got {every}")
        self.path, self.every, self.resume = Path(path), every, resume
        self.resumed_from: int | None = None

    def on_start(self, run: Run) -> None:
        if not (self.resume and self.path.exists()):
            return
        saved = torch.load(self.path, map_location=_device_of(run.model), weights_only=False)
        run.model.load_state_dict(saved["model"])
        run.optimizer.load_state_dict(saved["optimizer"])
        run.losses = list(saved["losses"])
        run.step = self.resumed_from = saved["step"]
        others = [c for c in run.callbacks if c is not self]
        for callback, state in zip(others, saved["callbacks"], strict=True):
            callback.load_state_dict(state)
        set_rng_state(saved["rng"])

    def on_step(self, run: Run) -> None:
        if run.step % self.every == 0 or run.step == run.steps or run.stop:
            state = {
                "step": run.step,
                "model": run.model.state_dict(),
                "optimizer": run.optimizer.state_dict(),
                "losses": list(run.losses),
                "callbacks": [c.state_dict() for c in run.callbacks if c is not self],
                "rng": rng_state(),
            }
            tmp = self.path.with_name(self.path.name + ".tmp")
            torch.save(state, tmp)
            os.replace(tmp, self.path)  # a crash while saving never leaves a broken file


def amp_needs_scaler(device_type: str, dtype: torch.dtype) -> bool:
    """Whether autocast in ``dtype`` on ``device_type`` needs a ``GradScaler``; raise if unsupported.

    bfloat16 on ``"cpu"`` or ``"cuda"``: no scaler (it has float32's exponent
    range).  float16 on ``"cpu"`` or ``"cuda"``: a scaler (its smallest normal
    number is about 6e-5, and small gradients underflow to zero without one).
    Anything else raises a ``ValueError`` that names the fix.
    """
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(
            f"MixedPrecision: dtype must be torch.bfloat16 or torch.float16, got {dtype}; "
            "to train in float32, leave MixedPrecision out of the callbacks"
        )
    if device_type not in ("cpu", "cuda"):
        raise ValueError(
            f"MixedPrecision: the course runs autocast on 'cpu' and 'cuda', and the model is on "
            f"{device_type!r}; move it with model.to('cuda') or model.to('cpu'), or leave "
            "MixedPrecision out"
        )
    if device_type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ValueError(
            "MixedPrecision: this GPU has no bfloat16 support; use MixedPrecision(torch.float16), "
            "which adds a GradScaler"
        )
    return dtype == torch.float16


class MixedPrecision(Callback):
    """Mixed precision, Chapter 9: the forward pass and the loss under ``torch.autocast``.

    The weights, their gradients and the optimizer stay in float32; autocast
    runs the matrix products in ``dtype``.  For float16 the run also gets an
    enabled ``torch.amp.GradScaler`` on the model's device, which
    :func:`course_lib.training.train` uses at every step: the loss is
    multiplied by the scale before ``backward`` (so small gradients do not
    underflow to zero in float16), the gradients are divided by it before
    clipping, and a step whose gradients hold an inf or NaN is *skipped*, the
    scale halved.  ``skipped`` lists those steps; ``scales`` the scale before
    the first step and after every step.  bfloat16 needs no scaler.  Supported: bfloat16 on CPU and
    CUDA, float16 on CPU and CUDA (:func:`amp_needs_scaler` says why not
    otherwise).
    """

    def __init__(self, dtype: torch.dtype = torch.bfloat16) -> None:
        amp_needs_scaler("cpu", dtype)  # a wrong dtype fails here, before any training
        self.dtype = dtype
        self.scaler: torch.amp.GradScaler | None = None
        self.skipped: list[int] = []
        self.scales: list[float] = []

    def on_start(self, run: Run) -> None:
        device_type, dtype = _device_of(run.model).type, self.dtype
        run.autocast = lambda: torch.autocast(device_type, dtype=dtype)
        if amp_needs_scaler(device_type, dtype):
            run.scaler = self.scaler = torch.amp.GradScaler(device_type)
            self.scales = [self.scaler.get_scale()]  # before the first step: 2^16

    def on_step(self, run: Run) -> None:
        if self.scaler is None:
            return
        scale = self.scaler.get_scale()
        if scale < self.scales[-1]:  # update() lowers the scale only after an inf or NaN
            self.skipped.append(run.step)
        self.scales.append(scale)

    def state_dict(self) -> dict[str, Any]:
        scaler = self.scaler.state_dict() if self.scaler is not None else None
        return {"scaler": scaler, "skipped": list(self.skipped), "scales": list(self.scales)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.skipped, self.scales = list(state["skipped"]), list(state["scales"])
