"""Training node classifiers: the GAT paper's early stopping, many seeds over the cores (Chapter 14).

* :func:`fit_node_classifier` trains one model of :mod:`course_lib.gat` on one
  graph, full batch, with Adam and the stopping rule of the GAT paper's code
  (:class:`PaperEarlyStopping`), and returns a :class:`FitResult`.
* :func:`receptive_field`: the nodes and edges a two-layer attention model
  reads to compute its outputs at a set of nodes; :func:`fit_node_classifier`
  trains and validates a :class:`course_lib.gat.GAT` on those alone.
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
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from course_lib import gat
from course_lib.runtime import seed_everything
from course_lib.sparse import SparseFeatures
from course_lib.training import Callback, Run, train

__all__ = [
    "accuracy",
    "receptive_field",
    "FitResult",
    "PaperEarlyStopping",
    "WindowEarlyStopping",
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
# Receptive fields: the part of the graph a loss on a few nodes reads
# ---------------------------------------------------------------------------


@dataclass
class ReceptiveField:
    """What :func:`receptive_field` returns.

    ``nodes`` [M]: the nodes read, as ids of the whole graph, the mask's first;
    ``edges``: one edge list per layer, first layer first, [2, E_l] each, as
    positions in ``nodes``; ``targets`` [T]: the positions in ``nodes`` of the
    nodes asked for, in their order in the mask (``0 .. T - 1``);
    ``num_targets``: per layer, how many of the first ``nodes`` need its output
    (the last layer's: ``T``), the ``num_targets`` of :class:`course_lib.gat.GAT`.
    """

    nodes: Tensor
    edges: tuple[Tensor, ...]
    targets: Tensor
    num_targets: tuple[int, ...]


def receptive_field(edge_index: Tensor, mask: Tensor, hops: int = 2) -> ReceptiveField:
    """The nodes and edges that ``hops`` attention layers read to compute their outputs at ``mask``.

    A layer's output at node ``i`` depends on the edges into ``i`` (its softmax
    runs over them, eq. (14.3)) and on the previous layer's outputs at their
    sources, and on nothing else.  So the last layer needs the edges into the
    nodes of ``mask`` [N] (bool), the layer before the edges into their sources,
    and so on; the first layer's input is read at every source reached.  A model
    of :mod:`course_lib.gat` given ``x[nodes]`` and these per-layer edges (its
    layers add the self-loops) returns at ``targets`` the same outputs as on
    the whole graph, and so the same loss and gradients (``tests/test_gat_training.py``);
    layers with a degree normalisation such as GCN's (14.1), which reads the
    sources' degrees too, are not covered.  The nodes come in the order they
    are first needed (the mask's, then the other nodes whose first-layer output
    is read, ...), so each layer need compute its outputs only at the first
    ``num_targets[l]`` nodes (``GAT(..., num_targets=field.num_targets)``).
    """
    gat._check_edges("receptive_field", edge_index, mask.shape[0])
    needed = [mask.clone()]  # needed[l]: nodes whose output of layer (hops - l) is read
    for _ in range(hops):
        reached = needed[-1].clone()
        reached[edge_index[0, needed[-1][edge_index[1]]]] = True  # the sources of edges into them
        needed.append(reached)
    new = [needed[0]] + [now & ~old for old, now in zip(needed[:-1], needed[1:], strict=True)]
    nodes = torch.cat([m.nonzero().squeeze(1) for m in new])  # the mask's first, in its order
    position = torch.full_like(mask, -1, dtype=torch.long)
    position[nodes] = torch.arange(len(nodes), device=mask.device)
    edges = tuple(position[edge_index[:, targets[edge_index[1]]]] for targets in needed[-2::-1])
    num_targets = tuple(int(m.sum()) for m in needed[-2::-1])
    return ReceptiveField(nodes, edges, position[mask.nonzero().squeeze(1)], num_targets)


# ---------------------------------------------------------------------------
# One model: full-batch training with the paper's early stopping
# ---------------------------------------------------------------------------


def _copy_weights(model: nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class PaperEarlyStopping(Callback):
    """The early stopping of the GAT paper's code, as a callback of the course's loop.

    After every epoch (one full-batch step of :func:`course_lib.training.train`)
    ``validate(model)`` gives the validation loss and accuracy.  Training stops
    when for ``patience`` epochs neither the loss has reached a new minimum nor
    the accuracy a new maximum; at the end the model gets back the weights of
    the last epoch that improved both at once (its starting weights, if none
    did).  ``history`` keeps every epoch's ``val_loss`` and ``val_acc``.
    """

    def __init__(self, validate: Callable[[nn.Module], tuple[float, float]], patience: int) -> None:
        if patience < 1:
            raise ValueError(f"PaperEarlyStopping: patience must be >= 1, got {patience}")
        self.validate, self.patience = validate, patience
        self.best_loss, self.best_acc, self.wait = float("inf"), 0.0, 0
        self.best_epoch = 0
        self.history: dict[str, list[float]] = {"val_loss": [], "val_acc": []}

    def on_start(self, run: Run) -> None:
        self.best_weights = _copy_weights(run.model)

    def on_step(self, run: Run) -> None:
        epoch = run.step - 1
        val_loss, val_acc = self.validate(run.model)
        self.history["val_loss"].append(val_loss)
        self.history["val_acc"].append(val_acc)
        if val_acc >= self.best_acc or val_loss <= self.best_loss:
            if val_acc >= self.best_acc and val_loss <= self.best_loss:
                self.best_weights = _copy_weights(run.model)
                self.best_epoch = epoch
            self.best_acc = max(val_acc, self.best_acc)
            self.best_loss = min(val_loss, self.best_loss)
            self.wait = 0
        else:
            self.wait += 1
            run.stop = self.wait == self.patience

    def on_end(self, run: Run) -> None:
        run.model.load_state_dict(self.best_weights)


class WindowEarlyStopping(Callback):
    """Kipf & Welling's early stopping (GCN paper, section 5.2), as a callback of the course's loop.

    Training stops when the validation loss has not decreased for ``patience``
    (10 in the paper) consecutive epochs.  After every epoch ``validate(model)`` gives the
    validation loss and accuracy; the model keeps its last weights (the paper
    restores none).  ``history`` keeps every epoch's ``val_loss`` and
    ``val_acc``; ``best_epoch`` is the last epoch trained.
    """

    def __init__(self, validate: Callable[[nn.Module], tuple[float, float]], patience: int) -> None:
        if patience < 1:
            raise ValueError(f"WindowEarlyStopping: patience must be >= 1, got {patience}")
        self.validate, self.patience = validate, patience
        self.best_loss, self.wait, self.best_epoch = float("inf"), 0, 0
        self.history: dict[str, list[float]] = {"val_loss": [], "val_acc": []}

    def on_step(self, run: Run) -> None:
        self.best_epoch = run.step - 1  # the weights kept: the last ones
        val_loss, val_acc = self.validate(run.model)
        self.history["val_loss"].append(val_loss)
        self.history["val_acc"].append(val_acc)
        if val_loss < self.best_loss:
            self.best_loss, self.wait = val_loss, 0
        else:
            self.wait += 1
            run.stop = self.wait == self.patience


_STOPPING = {"gat": PaperEarlyStopping, "gcn": WindowEarlyStopping}


Logits = Callable[[nn.Module], Tensor]  # model -> its outputs at the nodes of a mask [T, K]


def _whole_graph(model: nn.Module, x: Any, edge_index: Tensor, y: Tensor, mask: Tensor) -> tuple:
    """``(logits, labels)`` at ``mask``, computed on the whole graph."""
    return (lambda m: m(x, edge_index)[mask]), y[mask]


def _on_field(model: nn.Module, x: Any, edge_index: Tensor, y: Tensor, mask: Tensor) -> tuple:
    """``(logits, labels)`` at ``mask``: a :class:`course_lib.gat.GAT` reads its receptive
    field only (the same outputs, less work); any other model the whole graph."""
    if not isinstance(model, gat.GAT) or not bool(mask.any()):
        return _whole_graph(model, x, edge_index, y, mask)
    part = receptive_field(edge_index, mask)
    rows = x.rows(part.nodes) if isinstance(x, SparseFeatures) else x.index_select(0, part.nodes)
    return (lambda m: m(rows, part.edges, num_targets=part.num_targets)), y[mask]


def _loss_and_accuracy(model: nn.Module, logits_of: Logits, labels: Tensor) -> tuple[float, float]:
    """The loss and accuracy at a mask's nodes, in evaluation mode (then back to training)."""
    model.eval()
    with torch.inference_mode():
        logits = logits_of(model)
        loss = F.cross_entropy(logits, labels).item()
        acc = (logits.argmax(-1) == labels).float().mean().item()
    model.train()
    return loss, acc


def _adam(model: nn.Module, lr: float, decay: float, first_only: bool) -> torch.optim.Adam:
    """Adam with L2 weight decay ``decay``, on the first layer's parameters only if
    ``first_only`` (``conv1.*`` or ``lin1.*``)."""
    first = [p for n, p in model.named_parameters() if n.startswith(("conv1.", "lin1."))]
    rest = [p for n, p in model.named_parameters() if not n.startswith(("conv1.", "lin1."))]
    groups = [{"params": first, "weight_decay": decay}]
    groups.append({"params": rest, "weight_decay": 0.0 if first_only else decay})
    # foreach: one call per operation over all tensors, the same weights as the loop
    return torch.optim.Adam(groups, lr=lr, foreach=True)


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
    stopping: str = "gat",
    decay_first_layer_only: bool = False,
    progress: bool = True,
    desc: str = "training",
    receptive_fields: bool = True,
) -> FitResult:
    """Full-batch training with Adam (L2 weight decay) and a paper's early stopping.

    The course's loop :func:`course_lib.training.train` takes one step per
    epoch on the training nodes' cross-entropy (no gradient clipping);
    ``masks = (train, val, test)``.  ``stopping="gat"``: the GAT paper's rule,
    :class:`PaperEarlyStopping`; ``stopping="gcn"``: Kipf & Welling's,
    :class:`WindowEarlyStopping`.  With ``decay_first_layer_only`` (Kipf &
    Welling) the weight decay applies to the first layer's parameters only
    (``conv1.*`` or ``lin1.*``).  With ``patience=None`` or an empty validation
    mask it trains for exactly ``max_epochs`` and keeps the last weights.
    Returns a :class:`FitResult` with the test accuracy of the weights kept.

    With ``receptive_fields`` a :class:`course_lib.gat.GAT` computes the training
    loss and validation numbers on the :func:`receptive_field` of those nodes only:
    the same values and gradients, less work (dropout draws for what is read only).
    """
    if stopping not in _STOPPING:
        raise ValueError(f"fit_node_classifier: stopping must be 'gat' or 'gcn', got {stopping!r}")
    train_mask, val_mask, test_mask = masks
    on = _on_field if receptive_fields else _whole_graph
    callbacks = []
    if patience is not None and bool(val_mask.any()):
        on_val = on(model, x, edge_index, y, val_mask)
        callbacks.append(_STOPPING[stopping](lambda m: _loss_and_accuracy(m, *on_val), patience))
    train_logits, labels = on(model, x, edge_index, y, train_mask)
    start = time.perf_counter()
    losses = train(
        model,
        lambda: None,  # full batch: every epoch sees every training node
        lambda m, _: F.cross_entropy(train_logits(m), labels),
        max_epochs,
        clip_norm=None,
        optimizer=lambda _: _adam(model, lr, weight_decay, decay_first_layer_only),
        callbacks=callbacks,
        progress=progress,
        desc=desc,
    )
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        logits = model(x, edge_index)
    stopping = callbacks[0] if callbacks else None
    return FitResult(
        test_acc=accuracy(logits, y, test_mask),
        val_acc=accuracy(logits, y, val_mask) if val_mask.any() else float("nan"),
        best_epoch=stopping.best_epoch if stopping else len(losses) - 1,
        epochs=len(losses),
        seconds=seconds,
        history={
            "train_loss": losses,
            "val_loss": [],
            "val_acc": [],
            **(stopping.history if stopping else {}),
        },
    )


# ---------------------------------------------------------------------------
# Many seeds, spread over the CPU's cores
# ---------------------------------------------------------------------------

_FIT_ARGUMENTS = (
    "lr",
    "weight_decay",
    "max_epochs",
    "patience",
    "stopping",
    "decay_first_layer_only",
)


@dataclass(frozen=True)
class Setup:
    """One model for :func:`fit_seeds`: ``Setup(model, model_kwargs, fit_kwargs)``.

    ``model`` is an ``nn.Module`` class, built as ``model(**model_kwargs)``;
    ``fit_kwargs`` are :func:`fit_node_classifier`'s training arguments
    (``lr``, ``weight_decay``, ``max_epochs``, ``patience``, ``stopping``,
    ``decay_first_layer_only``).
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
