"""Several copies of one model trained as one: a seed dimension on every weight (Chapter 13).

A conclusion from training needs several seeds, and a small model trained from
several seeds one after another spends most of its time on per-step overhead
(Python, small kernels), not on arithmetic.  Stacking the copies turns ``M``
small steps into one step of an ``M``-times wider computation.

* :class:`StackedModels` holds ``M`` models of the same architecture, each built
  (and so initialised) by the caller with its own seed, as one module whose
  parameters carry a leading model dimension ``[M, ...]``
  (:func:`torch.func.stack_module_state`).  ``forward(x [M, B, ...])`` runs model
  ``m`` on ``x[m]`` with :func:`torch.func.vmap` over
  :func:`torch.func.functional_call`; dropout draws different masks per model.
  :meth:`StackedModels.unstack` returns the ``M`` trained models.
* :class:`PerModelClipAdamW` is AdamW on the stacked parameters with each model's
  gradients clipped to its own global norm (eq. (9.4)).  Adam's update is
  elementwise, so stacked training is the same computation as ``M`` separate
  runs of :func:`course_lib.training.train` with ``clip_norm``; only the random
  numbers (batches, dropout) are drawn differently.

Shapes: ``M`` models, ``B`` batch; ``x`` [M, B, ...] holds each model's own batch.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

__all__ = ["StackedModels", "PerModelClipAdamW"]


class StackedModels(nn.Module):
    """``M`` models of one architecture as one module with stacked parameters ``[M, ...]``.

    ``StackedModels(models)`` copies the weights of ``models`` (a list of equal
    architecture, e.g. each built after its own ``seed_everything``).
    ``forward(x [M, B, ...]) -> [M, B, ...]``: model ``m`` on ``x[m]``.
    ``train()``/``eval()`` switch every copy.  :meth:`unstack` gives back ``M``
    ordinary models holding the current weights.
    """

    def __init__(self, models: list[nn.Module]) -> None:
        super().__init__()
        if len(models) < 1 or not all(isinstance(m, nn.Module) for m in models):
            raise ValueError("StackedModels: give a non-empty list of nn.Module models")
        names = [sorted(n for n, _ in m.named_parameters()) for m in models]
        if any(n != names[0] for n in names):
            raise ValueError("StackedModels: the models must share one architecture")
        self.num_models = len(models)
        self.base = [copy.deepcopy(models[0]).to("meta")]  # a list: not a submodule
        params, buffers = stack_module_state(models)
        self._keys = list(params)
        self.params = nn.ParameterList(nn.Parameter(params[k].detach()) for k in self._keys)
        self._buffers_stacked = buffers

    def stacked_parameters(self) -> dict[str, Tensor]:
        """``{name: tensor [M, ...]}``, the names of one model's parameters."""
        return dict(zip(self._keys, self.params, strict=True))

    def train(self, mode: bool = True) -> StackedModels:
        super().train(mode)
        self.base[0].train(mode)
        return self

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[0] != self.num_models:
            raise ValueError(
                f"StackedModels: x must be [M={self.num_models}, B, ...], got {list(x.shape)}"
            )
        base = self.base[0]

        def one(params: dict, buffers: dict, xb: Tensor) -> Tensor:
            return functional_call(base, (params, buffers), (xb,))

        return vmap(one, randomness="different")(
            self.stacked_parameters(), self._buffers_stacked, x
        )

    def unstack(self, make: callable) -> list[nn.Module]:
        """The ``M`` models, each built by ``make()`` and loaded with its stacked weights."""
        models = []
        for m in range(self.num_models):
            model = make().to(self.params[0].device)
            state = {k: p[m].detach().clone() for k, p in self.stacked_parameters().items()}
            state |= {k: b[m].clone() for k, b in self._buffers_stacked.items()}
            model.load_state_dict(state)
            models.append(model.eval() if not self.training else model)
        return models


class PerModelClipAdamW(torch.optim.AdamW):
    """AdamW on stacked parameters ``[M, ...]``, gradients clipped per model, eq. (9.4).

    Before each step, model ``m``'s gradients (slice ``m`` of every parameter)
    are scaled by ``min(1, clip_norm / ||g_m||)``, ``||g_m||`` the global norm over
    all of that model's parameters: what ``clip_grad_norm_`` does for one model.
    """

    def __init__(self, params, lr: float, weight_decay: float, clip_norm: float) -> None:
        super().__init__(params, lr=lr, weight_decay=weight_decay)
        self.clip_norm = clip_norm

    @torch.no_grad()
    def step(self, closure=None):
        grads = [p.grad for group in self.param_groups for p in group["params"]]
        grads = [g for g in grads if g is not None]
        if grads:
            sq = sum(g.flatten(1).pow(2).sum(1) for g in grads)  # ||g_m||^2         [M]
            scale = (self.clip_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)  # as clip_grad_norm_
            for g in grads:
                g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
        return super().step(closure)
