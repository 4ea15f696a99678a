"""Character language models: the data, the loss, training and evaluation (Chapters 8, 9 and 11).

What every language model of the course shares, whatever its positions or
size:

* :class:`CharVocab`: characters <-> integers;
* :func:`batches`: random windows of a token stream as ``(inputs, next tokens)``;
* :func:`lm_loss`: the next-token objective, Chapter 11, eq. (11.1),
  ``L = -1/T sum_t log p(x_{t+1} | x_{<=t})``; :func:`members_lm_loss`, the same
  for each member of a :class:`course_lib.ensemble.Stacked` model reading one batch;
* :func:`train_lm`: the course's loop (:func:`course_lib.training.train`) on
  those windows with that loss;
* :func:`train_lm_seeds`: the same training for several copies of one model
  (one per seed) at once, as one model with a seed dimension (``torch.func.vmap``);
* :func:`evaluate_lm`: the loss on consecutive held-out windows of one length,
  overall or per position (Chapter 8 measures extrapolation with it);
* :class:`PositionalLM`: the small causal model of Chapter 8's experiment,
  which takes any position method of :mod:`course_lib.positional` by name.

Chapter 11's GPT (:mod:`course_lib.gpt`) uses the same pieces.  Shapes:
``B`` batch, ``T`` window length, ``V`` vocabulary, ``D`` model width.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from tqdm.auto import trange

from course_lib.config import TransformerConfig, check_config
from course_lib.position_hooks import POSITION_METHODS, position_hook
from course_lib.positional import LearnedPositions, sinusoidal_table
from course_lib.shapes import expect_positive, expect_shape, fmt_shape
from course_lib.training import train
from course_lib.transformer import Encoder

__all__ = [
    "CharVocab",
    "batches",
    "lm_loss",
    "members_lm_loss",
    "train_lm",
    "train_lm_seeds",
    "evaluate_lm",
    "PositionalLM",
]


class CharVocab:
    """Characters <-> integers: ``encode(str) -> Tensor [N]``, ``decode(ids) -> str``."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        unknown = sorted(set(text) - self.index.keys())
        if unknown:
            raise ValueError(
                f"CharVocab.encode: character {unknown[0]!r} is not in the vocabulary built "
                f"from the training text ({len(self.chars)} characters"
                + (f"; {len(unknown)} unseen characters in all" if len(unknown) > 1 else "")
                + ")"
            )
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)

    def decode(self, ids: Tensor | list[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def batches(
    data: Tensor,
    block: int,
    batch_size: int,
    *,
    generator: torch.Generator,
    device: torch.device | str | None = None,
) -> Callable[[], tuple[Tensor, Tensor]]:
    """A ``make_batch()`` for :func:`course_lib.training.train`: random windows of ``data``.

    Each call returns ``(x [B, block], y [B, block])`` with ``y`` = ``x`` shifted
    by one (the next-token targets), start positions drawn with ``generator``.
    """
    if data.dim() != 1 or data.numel() <= block:
        raise ValueError(
            f"batches: data must be [N] with N > block={block}, got {fmt_shape(data.shape)}"
        )
    offsets = torch.arange(block + 1)

    def make_batch() -> tuple[Tensor, Tensor]:
        starts = torch.randint(data.numel() - block, (batch_size,), generator=generator)
        windows = data[starts[:, None] + offsets]  #                         [B, block + 1]
        return windows[:, :-1].to(device), windows[:, 1:].to(device)

    return make_batch


def lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Next-token cross-entropy (11.1) of ``batch = (inputs [B, T], targets [B, T])``."""
    x, y = batch
    logits = model(x)  #                                                       [B, T, V]
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def members_lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """(11.1) for each of the ``K`` members of a ``Stacked`` model, all reading ``batch``; ``[K]``.

    ``batch = (inputs [B, T], targets [B, T])`` as :func:`batches` makes them;
    ``model.shared(inputs)`` gives every member's logits ``[K, B, T, V]``.  The loss for
    :func:`course_lib.ensemble.train_stacked` (a grid of learning rates on the same
    batches, Chapter 11).
    """
    x, y = batch
    logits = model.shared(x)  #                                               [K, B, T, V]
    k = logits.shape[0]
    nll = F.cross_entropy(logits.flatten(0, 2), y.expand(k, *y.shape).flatten(), reduction="none")
    return nll.view(k, -1).mean(1)  #                                          [K]


def train_lm(
    model: nn.Module,
    data: Tensor,
    steps: int,
    *,
    block: int = 64,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
    desc: str = "training",
    **kwargs,
) -> list[float]:
    """Train on random windows of ``data`` with the next-token loss (11.1); per-step losses.

    The course's loop :func:`course_lib.training.train` does the work (``kwargs``
    go to it, e.g. ``callbacks``); ``seed`` fixes the order of the windows.
    """
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    make_batch = batches(data, block, batch_size, generator=g, device=device)
    return train(model, make_batch, lm_loss, steps, lr, progress=progress, desc=desc, **kwargs)


def _clip_each(stacked: list[Tensor], clip_norm: float) -> None:
    """Clip the gradient of each model ``s`` (index 0 of every tensor) to norm ``clip_norm``, (9.4)."""
    norm = torch.stack([p.grad.flatten(1).square().sum(1) for p in stacked]).sum(0).sqrt()  # [S]
    factor = (clip_norm / (norm + 1e-6)).clamp(max=1.0)  # as nn.utils.clip_grad_norm_
    for p in stacked:
        p.grad.mul_(factor.view(-1, *[1] * (p.dim() - 1)))


def _vmappable(base: nn.Module, params: dict, buffers: dict, x: Tensor) -> bool:
    """Whether ``base`` runs under ``vmap`` (no data-dependent Python control flow)."""
    try:
        with torch.no_grad():
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*batching rule.*")
                vmap(lambda p, b, xs: functional_call(base, (p, b), (xs,)))(params, buffers, x)
    except RuntimeError:
        return False
    return True


class _AdamWAfterBackward(torch.optim.AdamW):
    """AdamW for one model trained alone that first shows ``after_backward`` its gradients.

    Its step runs what :func:`train_lm_seeds`'s own loop runs between the backward pass
    and the update: ``after_backward`` sees the parameters as ``[1, ...]`` views (name ->
    tensor, ``.grad`` before clipping), then the gradient is clipped to ``clip_norm`` (9.4)
    as :func:`course_lib.training.train` clips it, then AdamW steps (``foreach``, as there).
    """

    def __init__(
        self,
        model: nn.Module,
        params: list[nn.Parameter],
        after_backward: Callable[[dict[str, Tensor]], None],
        clip_norm: float | None,
        **kw,
    ) -> None:
        super().__init__(params, foreach=True, **kw)
        names = {id(p): name for name, p in model.named_parameters()}
        self.named = [(names[id(p)], p) for p in params]
        self.after_backward, self.clip_norm = after_backward, clip_norm

    @torch.no_grad()
    def step(self, closure: Callable | None = None) -> float | None:
        views = {}
        for name, p in self.named:
            views[name] = p.detach().unsqueeze(0)  # [1, ...], the same storage
            views[name].grad = None if p.grad is None else p.grad.unsqueeze(0)
        self.after_backward(views)
        if self.clip_norm is not None:
            nn.utils.clip_grad_norm_([p for _, p in self.named], self.clip_norm)
        return super().step(closure)


def _train_alone(
    model: nn.Module,
    data: Tensor,
    steps: int,
    seed: int,
    desc: str,
    after_backward: Callable[[dict[str, Tensor]], None] | None,
    options: dict,
) -> list[float]:
    """:func:`train_lm` for one model of :func:`train_lm_seeds`, with its ``after_backward``."""
    if after_backward is None:
        return train_lm(model, data, steps, seed=seed, desc=desc, **options)
    hooked = dict(options, clip_norm=None)  # clipped in the optimizer, after after_backward
    lr, decay, clip = options["lr"], options["weight_decay"], options["clip_norm"]
    hooked["optimizer"] = lambda params: _AdamWAfterBackward(
        model, params, after_backward, clip, lr=lr, weight_decay=decay
    )
    return train_lm(model, data, steps, seed=seed, desc=desc, **hooked)


def train_lm_seeds(
    models: Sequence[nn.Module],
    data: Tensor,
    steps: int,
    *,
    seeds: Sequence[int],
    block: int = 64,
    batch_size: int = 32,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    clip_norm: float = 1.0,
    after_backward: Callable[[dict[str, Tensor]], None] | None = None,
    progress: bool = True,
    desc: str = "training",
) -> Tensor:
    """:func:`train_lm` for ``S`` models of one architecture at once; losses ``[steps, S]``.

    Model ``s`` is trained as ``train_lm(models[s], data, steps, seed=seeds[s])`` would
    train it (its own windows, AdamW, its own gradient clipped to ``clip_norm``,
    eq. (9.4)), but the copies run as one model with a leading seed dimension: their
    parameters are stacked (``torch.func.stack_module_state``) and the forward pass is
    ``vmap``-ed, so a step pays one model's Python overhead, not ``S``.  AdamW is
    elementwise: one optimizer over the stacked tensors is ``S`` independent ones.  A
    model that cannot run under ``vmap`` (attention that must return its weights) is
    trained copy after copy instead (``after_backward`` is then refused), and a single
    model in :func:`train_lm`'s own loop, without ``vmap``'s overhead.
    ``after_backward(params)`` sees the stacked parameters (name -> ``[S, ...]``,
    ``.grad`` before clipping) after each backward pass; a single model shows it its
    parameters as ``[1, ...]`` views (edit their ``.grad`` in place).  The trained weights are copied back into ``models``.
    """
    if len(models) < 1 or len(models) != len(seeds):
        raise ValueError(
            f"train_lm_seeds: need one seed per model, got {len(models)} models "
            f"and {len(seeds)} seeds"
        )
    expect_positive("train_lm_seeds", steps=steps, block=block, batch_size=batch_size)
    device = next(models[0].parameters()).device
    options = dict(block=block, batch_size=batch_size, lr=lr, progress=progress)
    options |= dict(weight_decay=weight_decay, clip_norm=clip_norm)
    params, buffers = stack_module_state(list(models))  # name -> [S, ...]
    base = copy.deepcopy(models[0]).to("meta")  # the architecture, without weights
    for m in (*models, base):
        m.train()
    probe = data[:2].expand(len(models), 1, 2).to(device)  # [S, 1, 2]
    alone = len(models) == 1
    if alone or not _vmappable(base, params, buffers, probe):  # one copy after the other
        if not alone and after_backward is not None:
            raise ValueError(
                "train_lm_seeds: after_backward needs the models to run under vmap, and these "
                "cannot (attention that returns its weights); train them one at a time with "
                "train_lm_seeds([model], ...) each, or leave after_backward out"
            )
        losses = [
            _train_alone(m, data, steps, s, f"{desc} (seed {s})", after_backward, options)
            for m, s in zip(models, seeds, strict=True)
        ]
        return torch.tensor(losses).T
    make = [
        batches(data, block, batch_size, generator=torch.Generator().manual_seed(s), device=device)
        for s in seeds
    ]
    stacked = list(params.values())
    # foreach: one call per operation over all tensors, the same weights as the CPU's default
    # loop over tensors (tested), with less Python per step (as course_lib.training.train)
    opt = torch.optim.AdamW(stacked, lr, weight_decay=weight_decay, foreach=True)

    def forward(p: dict, b: dict, x: Tensor) -> Tensor:  # one model: x [B, T]
        return functional_call(base, (p, b), (x,))

    losses = []
    for _ in trange(steps, desc=desc, disable=not progress, mininterval=0.5):
        xs, ys = zip(*(mk() for mk in make), strict=True)
        x, y = torch.stack(xs), torch.stack(ys)  #                            [S, B, T]
        with warnings.catch_warnings():  # ops without a vmap batching rule fall back to a loop
            warnings.filterwarnings("ignore", message=".*batching rule.*")
            logits = vmap(forward)(params, buffers, x)  #                     [S, B, T, V]
        nll = F.cross_entropy(logits.flatten(0, 2), y.flatten(), reduction="none")
        loss = nll.view(len(models), -1).mean(1)  # (11.1), one per model     [S]
        if not torch.isfinite(loss).all():
            raise FloatingPointError(f"train_lm_seeds: loss became {loss.tolist()}")
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()  # the models share nothing: each gets its own gradient
        if after_backward is not None:
            after_backward(params)
        _clip_each(stacked, clip_norm)
        opt.step()
        losses.append(loss.detach())
    with torch.no_grad():  # the trained weights back into the models
        for name, p in params.items():
            for s, m in enumerate(models):
                m.get_parameter(name).copy_(p[s])
    return torch.stack(losses).cpu()


@torch.no_grad()
def evaluate_lm(
    model: nn.Module,
    data: Tensor,
    length: int,
    *,
    num_chars: int = 16384,
    batch_size: int = 16,
    per_position: bool = False,
    offset: int = 0,
) -> float | Tensor:
    """Next-token loss (nats per token) of ``model`` on the first ``num_chars`` tokens of ``data``.

    ``data`` int64 ``[N]`` is cut into consecutive windows of ``length``
    (``num_chars`` must be a multiple of ``length``), so every length scores the
    *same* ``num_chars`` targets and only the context differs.  Returns the mean
    loss, or with ``per_position=True`` the mean loss at each position of the
    window, ``[length]``.  Returns ``nan`` (or a tensor of ``nan``) when the model
    has no position ``offset + length - 1`` (a learned table too short).
    ``offset`` > 0 numbers the window's tokens ``offset .. offset + length - 1``
    (``model(x, offset=offset)``, as :class:`PositionalLM` takes it): positions
    never seen in training, with a context no longer than in training (Chapter 7).
    Deterministic: no sampling.
    """
    expect_positive("evaluate_lm", length=length, num_chars=num_chars, batch_size=batch_size)
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"evaluate_lm: offset must be an int >= 0, got {offset!r}")
    if num_chars % length:
        raise ValueError(
            f"evaluate_lm: num_chars ({num_chars}) must be a multiple of length ({length})"
        )
    if data.dim() != 1 or data.numel() < num_chars + 1:
        raise ValueError(
            f"evaluate_lm: data must be [N] with N > num_chars={num_chars}, "
            f"got {fmt_shape(data.shape)}"
        )
    last = offset + length  # one past the last position read
    if any(isinstance(m, LearnedPositions) and m.max_len < last for m in model.modules()):
        nan = torch.full((length,), float("nan"), dtype=torch.float64)  # no row for the end
        return nan if per_position else float("nan")
    device = next(model.parameters()).device
    inputs = data[:num_chars].view(-1, length)  #                              [W, length]
    targets = data[1 : num_chars + 1].view(-1, length)
    was_training = model.training
    model.eval()
    sums = torch.zeros(length, dtype=torch.float64)
    try:
        for x, y in zip(inputs.split(batch_size), targets.split(batch_size), strict=True):
            x = x.to(device)
            logits = model(x, offset=offset) if offset else model(x)  #        [b, length, V]
            nll = F.cross_entropy(logits.transpose(1, 2), y.to(device), reduction="none")
            sums += nll.sum(0).double().cpu()  #                               [length]
    finally:
        model.train(was_training)
    by_position = sums / inputs.shape[0]
    return by_position if per_position else by_position.mean().item()


class PositionalLM(nn.Module):
    """A small causal character LM with one position method, Chapter 8's experiment.

    ``PositionalLM(config, vocab_size, method, ...)``.  Token embedding, plus a
    position table of Chapter 7 for ``"learned"`` (``config.max_len`` rows, eq. (7.3))
    or ``"sinusoidal"`` (eq. (7.1)); then the course's stack
    :class:`course_lib.transformer.Encoder` (the chapters use pre-norm, GELU,
    ``d_ff = 4 d_model``: ``TransformerConfig(activation="gelu", max_len=...)``)
    run causally, whose attention gets the method's hook
    (:func:`course_lib.position_hooks.position_hook`: Shaw, T5, ALiBi or RoPE);
    a linear read-out.  ``forward(ids [B, T], offset=0) -> logits [B, T, V]``.

    The token embeddings start at std 0.02 (row norm ``0.02 sqrt(D)``) while the
    sinusoidal table has unit amplitude (row norm ``sqrt(D/2)``): position
    outweighs token ``1 / (0.02 sqrt(2))``, about 35 to 1 in norm, at the start.
    ``position_scale`` multiplies the sinusoidal table (Chapter 7's control:
    ``0.02 * sqrt(2)`` gives both the same row norm).  ``token_init_std`` and
    ``token_scale`` set the embeddings' initial std and a factor they are
    multiplied by in the forward pass: ``token_init_std = D ** -0.5`` with
    ``token_scale = D ** 0.5`` is the original Transformer's balance (embeddings of
    std ``D ** -0.5``, as in its reference code, multiplied by ``sqrt(D)``,
    Vaswani et al. section 3.4), where a token's row has norm about ``sqrt(D)``
    against the table's ``sqrt(D/2)``.  ``offset`` numbers the
    tokens ``offset .. offset + T - 1`` for the absolute methods; the relative
    methods see only offsets ``j - i``, which a shift does not change.
    """

    def __init__(
        self,
        config: TransformerConfig,
        vocab_size: int,
        method: str,
        *,
        shaw_max_distance: int = 16,
        t5_num_buckets: int = 32,
        t5_max_distance: int = 128,
        position_scale: float = 1.0,
        token_init_std: float = 0.02,
        token_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.config = c = check_config("PositionalLM", config)
        if not (token_init_std > 0 and token_scale > 0):
            raise ValueError(
                f"PositionalLM: token_init_std and token_scale must be > 0, got "
                f"{token_init_std} and {token_scale}"
            )
        self.token_scale = token_scale
        if position_scale != 1.0 and method != "sinusoidal":
            raise ValueError(
                f"PositionalLM: position_scale scales the sinusoidal table; method {method!r} "
                "has none (leave position_scale at 1.0)"
            )
        if not position_scale > 0:
            raise ValueError(f"PositionalLM: position_scale must be > 0, got {position_scale}")
        self.position_scale = position_scale
        if method not in POSITION_METHODS:
            raise ValueError(
                f"PositionalLM: method must be one of {POSITION_METHODS}, got {method!r}"
            )
        expect_positive("PositionalLM", vocab_size=vocab_size)
        self.method, self.d_model = method, c.d_model
        self.embed = nn.Embedding(vocab_size, c.d_model)
        nn.init.normal_(self.embed.weight, std=token_init_std)
        self.positions = LearnedPositions(c.max_len, c.d_model) if method == "learned" else None
        options = dict(
            shaw_max_distance=shaw_max_distance,
            t5_num_buckets=t5_num_buckets,
            t5_max_distance=t5_max_distance,
        )
        head_dim = c.d_model // c.num_heads  # d = D / h
        self.blocks = Encoder(
            c, position=lambda: position_hook(method, head_dim, c.num_heads, **options)
        )
        self.head = nn.Linear(c.d_model, vocab_size)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        expect_shape("PositionalLM", "ids", ids, [("B", None), ("T", None)])
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"PositionalLM: offset must be an int >= 0, got {offset!r}")
        length = ids.shape[1]
        x = self.embed(ids)  #                                                 [B, T, D]
        if self.token_scale != 1.0:
            x = x * self.token_scale  # Vaswani et al.'s sqrt(D), when asked for
        if self.method == "learned":
            x = x + self.positions(length, offset)  # Chapter 7, (7.3); raises beyond max_len
        elif self.method == "sinusoidal":
            # computed in float32 at least (bfloat16 would round the angles), in x's dtype after
            at = torch.promote_types(x.dtype, torch.float32)
            pe = sinusoidal_table(offset + length, self.d_model, device=ids.device, dtype=at)
            pe = pe[offset:].to(x.dtype)
            x = x + self.position_scale * pe  # Chapter 7, (7.1)                [B, T, D]
        return self.head(self.blocks(x, is_causal=True))  #                      [B, T, V]
