"""Training node classifiers: the GAT paper's early stopping, many seeds over the cores (Chapter 14).

* :func:`fit_node_classifier` trains one model of :mod:`course_lib.gat` on one
  graph, full batch, with Adam and the stopping rule of the GAT paper's code
  (:class:`PaperEarlyStopping`), and returns a :class:`FitResult`.
* :func:`fit_seeds` trains several models (each a :class:`Setup`) once per
  seed; the runs are independent, so on the CPU they are spread over processes.

Shapes: ``N`` nodes, ``E`` edges, ``F_in`` input features, ``K`` classes.  The
node features ``x`` [N, F_in] may be dense, sparse COO or
:class:`course_lib.sparse.SparseFeatures`; ``edge_index`` is [2, E]; ``y`` [N]
holds the labels and ``masks = (train, val, test)`` are three bool [N] masks.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm, trange

from course_lib.runtime import seed_everything
from course_lib.sparse import SparseFeatures

__all__ = [
    "accuracy",
    "FitResult",
    "PaperEarlyStopping",
    "fit_node_classifier",
    "Setup",
    "fit_seeds",
]

Masks = tuple[Tensor, Tensor, Tensor]  # (train, val, test), bool [N] each


def accuracy(logits: Tensor, y: Tensor, mask: Tensor) -> float:
    """Fraction of the nodes in ``mask`` [N] whose arg-max logit ([N, K]) is their label ``y`` [N]."""
    return (logits[mask].argmax(-1) == y[mask]).float().mean().item()


@dataclass
class FitResult:
    """What :func:`fit_node_classifier` returns (accuracies in [0, 1])."""

    test_acc: float
    val_acc: float
    best_epoch: int
    epochs: int
    seconds: float
    history: dict[str, list[float]] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# One model: full-batch training with the paper's early stopping
# ---------------------------------------------------------------------------


def _copy_weights(model: nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class PaperEarlyStopping:
    """The early stopping of the GAT paper's code, one validation result per epoch.

    Training stops when for ``patience`` epochs neither the validation loss has
    reached a new minimum nor the validation accuracy a new maximum.  The
    weights kept are those of the last epoch that improved both at once (the
    model's weights when this object was made, until an epoch does).  Call
    :meth:`step` after each epoch's evaluation and :meth:`restore` at the end.
    """

    def __init__(self, model: nn.Module, patience: int) -> None:
        self.patience = patience
        self.best_loss, self.best_acc, self.wait = float("inf"), 0.0, 0
        self.best_epoch = 0
        self.best_weights = _copy_weights(model)

    def step(self, epoch: int, val_loss: float, val_acc: float, model: nn.Module) -> bool:
        """Record epoch ``epoch``'s validation loss and accuracy; True when training should stop."""
        if val_acc >= self.best_acc or val_loss <= self.best_loss:
            if val_acc >= self.best_acc and val_loss <= self.best_loss:
                self.best_weights = _copy_weights(model)
                self.best_epoch = epoch
            self.best_acc = max(val_acc, self.best_acc)
            self.best_loss = min(val_loss, self.best_loss)
            self.wait = 0
            return False
        self.wait += 1
        return self.wait == self.patience

    def restore(self, model: nn.Module) -> None:
        """Load the weights kept into ``model``."""
        model.load_state_dict(self.best_weights)


def _validate(
    model: nn.Module, x: Tensor | SparseFeatures, edge_index: Tensor, y: Tensor, mask: Tensor
) -> tuple[float, float]:
    """The loss and accuracy on the nodes of ``mask``, in evaluation mode."""
    model.eval()
    with torch.inference_mode():
        logits = model(x, edge_index)
        loss = F.cross_entropy(logits[mask], y[mask]).item()
        return loss, accuracy(logits, y, mask)


def fit_node_classifier(
    model: nn.Module,
    x: Tensor | SparseFeatures,
    edge_index: Tensor,
    y: Tensor,
    masks: Masks,
    *,
    lr: float = 0.005,
    weight_decay: float = 5e-4,
    max_epochs: int = 1000,
    patience: int | None = 100,
    progress: bool = True,
    desc: str = "training",
) -> FitResult:
    """Full-batch training with Adam (L2 weight decay) and the GAT paper's early stopping.

    ``masks = (train, val, test)``.  Every epoch takes one step on the training
    nodes' cross-entropy, then evaluates the validation loss and accuracy and
    asks :class:`PaperEarlyStopping` whether to stop (or stops after
    ``max_epochs``); the weights kept for the test are those it kept.  With
    ``patience=None`` or an empty validation mask, it trains for exactly
    ``max_epochs`` and keeps the last weights.  Returns a :class:`FitResult`
    with the test accuracy of the weights kept.
    """
    train_mask, val_mask, test_mask = masks
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    stopping = None
    if patience is not None and bool(val_mask.any()):
        stopping = PaperEarlyStopping(model, patience)
    history: dict[str, list[float]] = {"train_loss": [], "val_loss": [], "val_acc": []}
    epoch = 0
    start = time.perf_counter()
    bar = trange(max_epochs, desc=desc, disable=not progress, mininterval=0.5)
    for epoch in bar:
        model.train()
        loss = F.cross_entropy(model(x, edge_index)[train_mask], y[train_mask])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history["train_loss"].append(loss.item())
        if stopping is None:
            continue
        val_loss, val_acc = _validate(model, x, edge_index, y, val_mask)
        history["val_loss"].append(val_loss)
        history["val_acc"].append(val_acc)
        if stopping.step(epoch, val_loss, val_acc, model):
            break
        if progress and epoch % 20 == 0:
            bar.set_postfix(val_acc=f"{val_acc:.3f}", refresh=False)
    bar.close()
    seconds = time.perf_counter() - start
    if stopping is not None:
        stopping.restore(model)
    model.eval()
    with torch.no_grad():
        logits = model(x, edge_index)
    return FitResult(
        test_acc=accuracy(logits, y, test_mask),
        val_acc=accuracy(logits, y, val_mask) if val_mask.any() else float("nan"),
        best_epoch=stopping.best_epoch if stopping is not None else epoch,
        epochs=epoch + 1,
        seconds=seconds,
        history=history,
    )


# ---------------------------------------------------------------------------
# Many seeds, spread over the CPU's cores
# ---------------------------------------------------------------------------

_FIT_ARGUMENTS = ("lr", "weight_decay", "max_epochs", "patience")


@dataclass(frozen=True)
class Setup:
    """One model for :func:`fit_seeds`: ``Setup(model, model_kwargs, fit_kwargs)``.

    ``model`` is an ``nn.Module`` class, built as ``model(**model_kwargs)``;
    ``fit_kwargs`` are :func:`fit_node_classifier`'s training arguments
    (``lr``, ``weight_decay``, ``max_epochs``, ``patience``).
    """

    model: type[nn.Module]
    model_kwargs: dict = field(default_factory=dict)
    fit_kwargs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.model, type) and issubclass(self.model, nn.Module)):
            raise TypeError(f"Setup: model must be an nn.Module class, got {self.model!r}")
        for name in ("model_kwargs", "fit_kwargs"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"Setup: {name} must be a dict, got {getattr(self, name)!r}")
        unknown = sorted(set(self.fit_kwargs) - set(_FIT_ARGUMENTS))
        if unknown:
            raise ValueError(
                f"Setup: unknown training arguments {unknown}; allowed: {sorted(_FIT_ARGUMENTS)}"
            )


_worker_data: tuple | None = None  # (x, edge_index, y, masks), set in each worker process


def _start_worker(data: tuple, num_threads: int) -> None:
    global _worker_data
    torch.set_num_threads(num_threads)
    _worker_data = data


def _run_one(setup: Setup, seed: int, data: tuple | None = None) -> FitResult:
    """Seed everything with ``seed``, build the model of ``setup`` and train it."""
    x, edge_index, y, masks = data if data is not None else _worker_data
    seed_everything(seed)
    model = setup.model(**setup.model_kwargs).to(x.device)
    return fit_node_classifier(model, x, edge_index, y, masks, progress=False, **setup.fit_kwargs)


def _run_in_pool(
    setups: dict[str, Setup], runs: list[tuple[str, int]], data: tuple, workers: int, bar: tqdm
) -> dict[tuple[str, int], FitResult]:
    """Each run ``(name, seed)`` in one of ``workers`` fresh processes."""
    results: dict[tuple[str, int], FitResult] = {}
    # "spawn": a fresh interpreter per worker, safe whatever threads this one runs.
    context = multiprocessing.get_context("spawn")
    # The workers share this process's threads: more threads than cores slows every run down.
    init = (data, max(1, torch.get_num_threads() // workers))
    with ProcessPoolExecutor(workers, context, _start_worker, init) as pool:
        futures = {pool.submit(_run_one, setups[name], seed): (name, seed) for name, seed in runs}
        try:
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.update()
        except BrokenProcessPool as error:
            raise RuntimeError(
                "fit_seeds: a worker process died before finishing its run. In a Python "
                "script, call fit_seeds under `if __name__ == '__main__':` (each worker "
                "imports the script again); if memory is short, pass workers=1."
            ) from error
    return results


def fit_seeds(
    setups: dict[str, Setup],
    seeds: Iterable[int],
    x: Tensor | SparseFeatures,
    edge_index: Tensor,
    y: Tensor,
    masks: Masks,
    *,
    workers: int | None = None,
    desc: str = "runs",
) -> dict[str, list[FitResult]]:
    """Train each model of ``setups`` once per seed; returns ``{name: [FitResult per seed]}``.

    ``setups`` maps a name to a :class:`Setup`; run ``(name, seed)`` calls
    :func:`course_lib.seed_everything` with ``seed``, builds the model and
    trains it with :func:`fit_node_classifier` and the setup's training
    arguments.

    The runs are independent, so on the CPU they are spread over ``workers``
    processes (default: one per core this process may use, at most 8), which
    share this process's torch threads (at least one each: one, after
    :func:`course_lib.setup_notebook`).  Each run seeds everything with its own
    seed, so the results do not depend on the number of workers, and the wall
    time falls with the number of cores.  The runs start in the order of
    ``setups``, so put the slowest first.  On a GPU, or with ``workers=1``,
    the runs go one after another in this process.
    """
    for name, setup in setups.items():
        if not isinstance(setup, Setup):
            raise TypeError(
                f"fit_seeds: setups[{name!r}] must be a Setup(model, model_kwargs, fit_kwargs), "
                f"got {setup!r}"
            )
    seeds = list(seeds)
    runs = [(name, seed) for name in setups for seed in seeds]
    data = (x, edge_index, y, masks)
    if workers is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        workers = min(cores or 1, 8, len(runs))
    bar = tqdm(total=len(runs), desc=desc)
    if x.device.type != "cpu" or workers <= 1:
        results = {}
        for name, seed in runs:
            results[name, seed] = _run_one(setups[name], seed, data)
            bar.update()
    else:
        results = _run_in_pool(setups, runs, data, workers, bar)
    bar.close()
    return {name: [results[name, seed] for seed in seeds] for name in setups}
