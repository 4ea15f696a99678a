"""Several independently initialised copies of one model, trained as one (Chapter 10).

Conclusions from training need several runs (seeds); small models run one after
the other spend most of their time in Python and kernel launches, not in
arithmetic.  :class:`Stacked` keeps ``K`` copies of a model with their own
weights as one set of stacked parameters (``torch.func.stack_module_state``)
and runs them together with ``torch.func.vmap`` over ``torch.func.functional_call``:
each layer becomes one batched operation over the members.  ``K`` is the member
(seed) dimension, first in every stacked tensor.

* :class:`Stacked`: ``forward(*inputs [K, ...]) -> [K, ...]`` (member ``k`` reads
  ``inputs[k]``); :meth:`Stacked.shared` gives every member the same inputs;
  :meth:`Stacked.member` returns member ``k`` as an ordinary module;
* :func:`clip_grad_norm_per_member`: Chapter 9, eq. (9.4), for each member separately;
* :func:`train_stacked`: the course's :func:`course_lib.training.train` with
  AdamW and clipping per member, so that training ``K`` members together gives the
  same weights as ``K`` separate runs on the same batches (tested);
* :class:`BestPerMember`: validation-based selection (Chapter 9's early stopping)
  per member: every ``every`` updates, keep each member's weights where its
  validation error is the lowest so far; load them back at the end;
* :func:`member_batches`: the ``make_batch`` of :func:`train_stacked` when each
  member has its own training set and its own random stream (Chapter 13's
  data-fraction sweep): member ``k`` draws its rows as a separate run would.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend

from course_lib.training import Callback, Run, adamw_step, train

__all__ = ["Stacked", "train_stacked", "BestPerMember", "member_batches"]


def _key(name: str) -> str:
    return name.replace(".", "/")  # a parameter's name may not contain a dot


class Stacked(nn.Module):
    """``K`` models of one architecture, each with its own weights, run as one.

    ``Stacked(models)`` stacks the parameters and buffers of ``models`` (``K``
    modules of the same class and sizes, e.g. built under ``K`` seeds) into
    tensors ``[K, ...]``, registered on this module, so ``.to()``, optimisers and
    ``state_dict`` see them.  ``forward(*inputs)`` takes each input with a leading
    member dimension, ``[K, ...]``, and returns the members' outputs stacked the
    same way; dropout draws differently in each member.
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        if len(models) < 1 or len({type(m) for m in models}) != 1:
            raise ValueError(
                "Stacked: give one or more models of the same class (e.g. "
                "[make() for seed in seeds]); got "
                f"{[type(m).__name__ for m in models]}"
            )
        params, buffers = stack_module_state(list(models))  # {name: [K, ...]}
        self.num_members = len(models)
        self._names = list(params)
        self._buffer_names = list(buffers)
        for name, value in params.items():  # a frozen weight (LoRA's base) stays frozen
            frozen = nn.Parameter(value.detach().clone(), requires_grad=value.requires_grad)
            self.register_parameter(_key(name), frozen)
        for name, value in buffers.items():
            self.register_buffer(_key(name), value.detach().clone())
        self._template = [copy.deepcopy(models[0]).to("meta")]  # a list: not a submodule

    def _state(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        params = {n: getattr(self, _key(n)) for n in self._names}
        return params, {n: getattr(self, _key(n)) for n in self._buffer_names}

    def _run(self, in_dims: tuple, inputs: tuple) -> Any:
        template = self._template[0]
        template.train(self.training)

        def one(params: dict, buffers: dict, *args: Any) -> Any:
            return functional_call(template, (params, buffers), args)

        params, buffers = self._state()
        saved = [(m, dict(vars(m))) for m in template.modules()]
        # PyTorch 2.13 has no vmap rule for the fused CPU kernel of Chapter 3, eq. (3.2): it
        # runs that kernel once per member (a correct loop) and warns; silenced here.
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "There is a performance drop")
                batched = vmap(one, in_dims=(0, 0, *in_dims), randomness="different")
                return batched(params, buffers, *inputs)
        finally:  # drop the tensors forward cached on the modules (RevIN's statistics)
            for m, attrs in saved:
                m.__dict__.update(attrs)

    def forward(self, *inputs: Tensor) -> Any:
        for i, x in enumerate(inputs):
            if x is not None and x.shape[:1] != (self.num_members,):
                raise ValueError(
                    f"Stacked: input {i} has shape {tuple(x.shape)}; each input needs the "
                    f"member dimension first, [K={self.num_members}, ...] (use .shared(...) to "
                    "give every member the same input)"
                )
        return self._run(tuple(None if x is None else 0 for x in inputs), inputs)

    def shared(self, *inputs: Tensor) -> Any:
        """Every member reads the same ``inputs`` (no member dimension); outputs ``[K, ...]``."""
        return self._run((None,) * len(inputs), inputs)

    def member(self, k: int) -> nn.Module:
        """Member ``k`` as an ordinary module (a copy: training it leaves this one alone)."""
        if not 0 <= k < self.num_members:
            raise IndexError(f"Stacked.member: k must be in 0..{self.num_members - 1}, got {k}")
        params, buffers = self._state()
        first = next(iter(params.values()))
        model = copy.deepcopy(self._template[0]).to_empty(device=first.device).to(first.dtype)
        state = {**params, **buffers}
        with torch.no_grad():  # non-persistent buffers too, which load_state_dict skips
            for name, t in [*model.named_parameters(), *model.named_buffers()]:
                t.copy_(state[name][k])
        return model.train(self.training)

    def extra_repr(self) -> str:
        return f"members={self.num_members}, model={type(self._template[0]).__name__}"


_FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_CPU_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
_FLASH = int(SDPBackend.FLASH_ATTENTION)  # torch._fused_sdp_choice's answer for that kernel


class _FoldedAttention(torch.autograd.Function):
    """PyTorch's fused CPU kernel of Chapter 3's eq. (3.2), with a vmap rule: the members in one call.

    PyTorch 2.13 has no vmap rule for that kernel and runs it once per member.  It
    computes every (batch, head) row on its own, so one call on ``[K B, h, T, d]``
    gives the members' outputs and gradients bit for bit (``tests/test_ensemble.py``),
    with less time spent outside the arithmetic.
    """

    @staticmethod
    def forward(q: Tensor, k: Tensor, v: Tensor, is_causal: bool) -> tuple[Tensor, Tensor]:
        return _FLASH_CPU(q, k, v, 0.0, is_causal)  # output, logsumexp

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*inputs[:3], *output)
        ctx.is_causal = inputs[3]
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _: Any) -> tuple:
        q, k, v, out, lse = ctx.saved_tensors
        return (*_FLASH_CPU_BACKWARD(grad, q, k, v, out, lse, 0.0, ctx.is_causal), None)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, q: Tensor, k: Tensor, v: Tensor, is_causal: bool) -> Any:
        k_ = info.batch_size
        q, k, v = (x.expand(k_, *x.shape) if d is None else x.movedim(d, 0)  # [K, B, ...]
                   for x, d in zip((q, k, v), in_dims[:3], strict=True))  # fmt: skip
        if torch._fused_sdp_choice(q[0], k[0], v[0], is_causal=is_causal) != _FLASH:
            members = zip(q, k, v, strict=True)  # PyTorch picks another kernel: as without us
            out = torch.stack(
                [F.scaled_dot_product_attention(*m, is_causal=is_causal) for m in members]
            )
            return (out, out.new_zeros(out.shape[:-1])), (0, 0)
        q, k, v = (x.flatten(0, 1) for x in (q, k, v))  # [K B, ...]
        out, lse = _FoldedAttention.apply(q, k, v, is_causal)
        unfold = (out.unflatten(0, (info.batch_size, -1)), lse.unflatten(0, (info.batch_size, -1)))
        return unfold, (0, 0)  # [K, B, ...], the member dimension first


def folded_attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, dropout_p: float) -> Tensor:
    """Chapter 3's eq. (3.2) inside :class:`Stacked` (under ``vmap``) on the CPU, without a mask.

    The kernel of ``torch.nn.functional.scaled_dot_product_attention``, called once for all
    members; with dropout, that function itself (one call per member).
    """
    if dropout_p:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    return _FoldedAttention.apply(q, k, v, is_causal)[0]


def clip_grad_norm_per_member(parameters: Sequence[Tensor], max_norm: float) -> Tensor:
    """Chapter 9, eq. (9.4), per member: scale member ``k``'s gradients by ``min(1, c / (|g_k| + eps))``.

    ``parameters``: stacked tensors ``[K, ...]`` with gradients.  ``||g_k||`` is the
    global norm over member ``k``'s slices of all of them, as
    ``torch.nn.utils.clip_grad_norm_`` computes it for one model.  Returns the
    norms before clipping, ``[K]``.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        raise ValueError("clip_grad_norm_per_member: no parameter has a gradient")
    norms = torch.stack([g.flatten(1).pow(2).sum(1) for g in grads]).sum(0).sqrt()  # [K]
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # [K]
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms


class _AdamWClippedPerMember(torch.optim.AdamW):
    """AdamW (elementwise, so independent per member) after clipping per member.

    ``member_lr`` [K], if given, multiplies the group's rate member by member: member
    ``k`` takes the update of AdamW at rate ``lr * member_lr[k]``
    (:func:`course_lib.training.adamw_step`, with the rate broadcast over its slice).
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        max_norm: float | None,
        member_lr: Tensor | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(params, foreach=True, **kw)  # the same weights as the loop, faster
        self.max_norm, self.member_lr = max_norm, member_lr

    @torch.no_grad()
    def step(self, closure: Callable | None = None) -> Any:
        if self.max_norm is not None:
            clip_grad_norm_per_member(self.param_groups[0]["params"], self.max_norm)
        if self.member_lr is None:
            return super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                lr = group["lr"] * self.member_lr.to(p.device, p.dtype)  # [K]
                lr = lr.view(-1, *([1] * (p.dim() - 1)))  #              [K, 1, ...]
                adamw_step(p, p.grad, self.state[p], lr, group["betas"], group["eps"],
                           group["weight_decay"])  # fmt: skip
        return None


def train_stacked(
    model: Stacked,
    make_batch: Callable[[], Any],
    loss_fn: Callable[[nn.Module, Any], Tensor],
    steps: int,
    lr: float | Sequence[float] = 1e-3,
    *,
    weight_decay: float = 0.01,
    clip_norm: float | None = 1.0,
    callbacks: Sequence[Callback] = (),
    progress: bool = False,
    desc: str = "training",
) -> list[float]:
    """:func:`course_lib.training.train` for a :class:`Stacked` model, members independent.

    ``loss_fn(model, batch)`` returns the members' losses ``[K]``; their *sum* is
    minimised, so member ``k``'s gradient is that of its own loss.  Gradients are
    clipped per member (:func:`clip_grad_norm_per_member`) before each AdamW
    step; returns the summed loss of each update.  ``lr`` is one rate for every
    member or a sequence of ``K`` rates, one per member (a learning-rate grid
    trained as one model; a :class:`~course_lib.training.Schedule` multiplies
    each); only parameters with ``requires_grad`` train.
    """
    if not isinstance(model, Stacked):
        raise TypeError(f"train_stacked: needs a Stacked model, got {type(model).__name__}")
    member_lr = None
    if not isinstance(lr, (int, float)):
        member_lr = torch.as_tensor(list(lr), dtype=torch.float64)
        if member_lr.shape != (model.num_members,) or not (member_lr > 0).all():
            raise ValueError(
                f"train_stacked: lr must be one rate or {model.num_members} positive rates "
                f"(one per member), got {list(lr)}"
            )
        lr = 1.0  # the group's rate: the schedule's factor times each member's own rate

    def summed(m: nn.Module, batch: Any) -> Tensor:
        losses = loss_fn(m, batch)
        if losses.shape != (model.num_members,):
            raise ValueError(
                f"train_stacked: loss_fn must return one loss per member, shape "
                f"[{model.num_members}], got {tuple(losses.shape)}"
            )
        return losses.sum()

    def optimizer(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return _AdamWClippedPerMember(
            params, clip_norm, member_lr, lr=lr, weight_decay=weight_decay
        )

    return train(
        model, make_batch, summed, steps, lr, clip_norm=None, optimizer=optimizer,
        callbacks=callbacks, progress=progress, desc=desc,
    )  # fmt: skip


class BestPerMember(Callback):
    """Validation-based selection for each member of a :class:`Stacked` model.

    Every ``every`` updates (and after the last), ``eval_fn(model) -> [K]`` is
    computed in eval mode without gradients; ``evals`` keeps ``(step, values)``.
    Each member's parameters are copied where its value is the lowest so far
    (``best_step [K]``, ``best_value [K]``) and loaded back at the end, as
    :class:`course_lib.training.EarlyStopping` with ``restore_best`` does for one model.
    """

    def __init__(self, eval_fn: Callable[[nn.Module], Tensor], every: int = 50) -> None:
        if every < 1:
            raise ValueError(f"BestPerMember: every must be >= 1, got {every}")
        self.eval_fn, self.every = eval_fn, every
        self.evals: list[tuple[int, Tensor]] = []
        self.best_value: Tensor | None = None
        self.best_step: Tensor | None = None
        self._best: dict[str, Tensor] = {}

    def on_step(self, run: Run) -> None:
        if run.step % self.every and run.step != run.steps:
            return
        model = run.model
        model.eval()
        with torch.no_grad():
            value = torch.as_tensor(self.eval_fn(model)).detach().float().cpu()  # [K]
            if self.best_value is None:
                better = torch.ones_like(value, dtype=torch.bool)
                self.best_value, self.best_step = value.clone(), torch.zeros_like(value).long()
                self._best = {n: p.detach().clone() for n, p in model.named_parameters()}
            else:
                better = value < self.best_value
            self.best_value = torch.where(better, value, self.best_value)
            self.best_step = torch.where(better, run.step, self.best_step)
            for n, p in model.named_parameters():
                mask = better.to(p.device).view(-1, *([1] * (p.dim() - 1)))
                self._best[n] = torch.where(mask, p.detach(), self._best[n])
        model.train()
        self.evals.append((run.step, value))

    def on_end(self, run: Run) -> None:
        with torch.no_grad():
            for n, p in run.model.named_parameters():
                if n in self._best:
                    p.copy_(self._best[n])


def member_batches(
    data: Sequence[Sequence[Tensor]], batch_size: int, generators: Sequence[torch.Generator]
) -> Callable[[], tuple[Tensor, ...]]:
    """``make_batch`` for :func:`train_stacked`: each member samples its own data with its own stream.

    ``data[k]``: member ``k``'s tensors (e.g. ``(images [N_k, ...], labels [N_k])``, the
    same number for every member, ``N_k`` rows each; members may have different
    ``N_k``); ``generators[k]``: its random stream.  Each call draws, for every
    member, ``rows = torch.randint(N_k, (batch_size,), generator=generators[k])`` (what
    one model's loop draws from that stream) and returns each tensor's rows stacked
    over the members, ``[K, batch_size, ...]``.
    """
    if len(data) < 1 or len(data) != len(generators):
        raise ValueError(
            f"member_batches: give one (tensors, generator) pair per member; got {len(data)} "
            f"members' data and {len(generators)} generators"
        )
    for k, tensors in enumerate(data):
        sizes = {len(t) for t in tensors}
        if len(tensors) != len(data[0]) or len(sizes) != 1:
            raise ValueError(
                f"member_batches: member {k} needs {len(data[0])} tensors with the same number "
                f"of rows; got rows {[len(t) for t in tensors]}"
            )

    def make_batch() -> tuple[Tensor, ...]:
        picks = []
        for tensors, gen in zip(data, generators, strict=True):
            rows = torch.randint(len(tensors[0]), (batch_size,), generator=gen)
            picks.append([t[rows.to(t.device)] for t in tensors])
        return tuple(torch.stack(column) for column in zip(*picks, strict=True))

    return make_batch
