"""A small GPT: a decoder-only character language model, sampling, LoRA and adapters (Chapter 11).

The model is the library's decoder-only Transformer
(:class:`course_lib.transformer.DecoderOnly`: token and learned position
embeddings, pre-norm :class:`~course_lib.blocks.EncoderBlock` run with the
causal mask of Chapter 3, (3.4), a final layer norm, a linear read-out).  This module adds
what a language model needs around it:

* perplexity ``PPL = exp(L)`` (11.2) of the next-token loss (11.1)
  (:func:`evaluate`); the data, the loss and the training loop of every
  language model of the course are in :mod:`course_lib.lm`;
* checkpoints (:func:`save_checkpoint`, :func:`load_checkpoint`);
* sampling with a temperature and top-k (11.3), seeded (:func:`sample`), from
  the distribution :func:`next_token_probs`;
* LoRA (11.4) ``y = W x + b + (alpha / r) B A x`` with ``W`` frozen, ``A`` [r, in],
  ``B`` [out, r] = 0 at the start (:class:`LoRALinear`, :func:`add_lora`,
  :func:`merge_lora`), and on the query and value slices of the fused attention
  projection, Hu et al.'s placement (:class:`SliceLoRA`, :func:`add_qv_lora`);
* bottleneck adapters (11.5) ``h + W_up phi(W_down h + b_down) + b_up`` on a
  frozen sub-layer's output ``h``, ``W_up`` = 0 at the start
  (:class:`BottleneckAdapter`, :func:`add_adapters`);
* a weight converter from Hugging Face's ``GPT2Model`` (:func:`load_gpt2_weights`),
  which the tests use to check the blocks against GPT-2.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

from course_lib.blocks import ACTIVATIONS
from course_lib.config import TransformerConfig
from course_lib.lm import evaluate_lm

# count_parameters moved to course_lib.params (it serves every chapter); re-exported here
# so that the notebooks' ``gpt.count_parameters`` keeps working.
from course_lib.params import count_parameters as count_parameters
from course_lib.transformer import DecoderOnly

__all__ = [
    "GPT",
    "evaluate",
    "save_checkpoint",
    "load_checkpoint",
    "sample",
    "next_token_probs",
    "LoRALinear",
    "add_lora",
    "merge_lora",
    "SliceLoRA",
    "add_qv_lora",
    "BottleneckAdapter",
    "add_adapters",
    "load_gpt2_weights",
]


class GPT(DecoderOnly):
    """A decoder-only LM from the library's blocks; ``forward(tokens [B, T]) -> logits [B, T, V]``.

    ``GPT(config, vocab_size)``: :class:`~course_lib.transformer.DecoderOnly`
    with :meth:`hidden_states` and checkpoints.  GPT's own choices are a
    pre-norm stack with GELU and ``d_ff = 4 d_model``:
    ``TransformerConfig(activation="gelu")`` (``norm_first=True`` and
    ``d_ff=None``, i.e. ``4 d_model``, are the config's defaults).
    ``config`` and ``vocab_size`` rebuild the model from a checkpoint.
    """

    def __init__(self, config: TransformerConfig, vocab_size: int) -> None:
        super().__init__(config, vocab_size)
        self.vocab_size = vocab_size

    def hidden_states(self, tokens: Tensor) -> Tensor:
        """The final (normed) hidden states [B, T, D], before the read-out."""
        return self.blocks(self.embed(tokens), is_causal=True)


def evaluate(
    model: nn.Module, data: Tensor, *, block: int = 64, num_chars: int = 32768
) -> tuple[float, float]:
    """``(loss, perplexity)`` on the first ``num_chars`` targets of ``data`` (11.1)-(11.2).

    Consecutive windows of ``block`` tokens (:func:`course_lib.lm.evaluate_lm`);
    deterministic.  ``num_chars`` is rounded down to a multiple of ``block``.
    Raises ``ValueError`` if ``block`` exceeds the model's ``max_len``.
    """
    max_len = getattr(getattr(model, "embed", None), "max_len", None)
    if max_len is not None and block > max_len:
        raise ValueError(
            f"evaluate: block={block} is longer than the model's max_len={max_len} "
            "(its learned position table); use block <= max_len"
        )
    num_chars = min(num_chars, data.numel() - 1) // block * block
    loss = float(evaluate_lm(model, data, block, num_chars=num_chars))
    return loss, math.exp(loss)


def save_checkpoint(model: GPT, path: str | Path, **extra) -> None:
    """Write ``model``'s configuration, weights and any ``extra`` values to ``path``."""
    config = {**model.config.to_dict(), "vocab_size": model.vocab_size}
    torch.save({"config": config, "state_dict": model.state_dict(), "extra": extra}, path)


def load_checkpoint(path: str | Path, map_location=None) -> tuple[GPT, dict]:
    """Rebuild the :class:`GPT` saved at ``path``; returns ``(model, extra)``."""
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    config = dict(ckpt["config"])
    vocab_size = config.pop("vocab_size")
    model = GPT(TransformerConfig(**config), vocab_size)
    model.load_state_dict(ckpt["state_dict"])
    return model, ckpt["extra"]


def _check_knobs(where: str, temperature: float, top_k: int | None) -> None:
    if temperature < 0:
        raise ValueError(f"{where}: temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"{where}: top_k must be >= 1 or None, got {top_k}")


def next_token_probs(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
    """The distribution that :func:`sample` draws from, Chapter 11, (11.3): [..., V] -> [..., V].

    ``softmax(logits / temperature)`` over the ``top_k`` largest logits; the
    others get probability 0 (a logit tied with the k-th largest is kept).
    ``temperature=0`` is the limit: all the mass on the largest logit (greedy).
    """
    _check_knobs("next_token_probs", temperature, top_k)
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = z.topk(top_k, dim=-1).values[..., -1:]  #                        [..., 1]
        z = z.masked_fill(z < kth, float("-inf"))
    return F.softmax(z, -1)


@torch.no_grad()
def sample(
    model: nn.Module,
    prompt: Tensor,
    steps: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> Tensor:
    """Continue ``prompt`` [T] (or [B, T]) by ``steps`` sampled tokens, Chapter 11, (11.3).

    ``p = softmax(z / temperature)`` over the ``top_k`` largest logits only
    (others get probability 0, :func:`next_token_probs`); ``temperature=0`` is
    greedy decoding.  The
    draws use their own generator seeded with ``seed``: the same call returns
    the same tokens.  The context is cut to the model's last ``max_len`` tokens.
    """
    _check_knobs("sample", temperature, top_k)
    device = next(model.parameters()).device
    tokens = (prompt[None] if prompt.dim() == 1 else prompt).to(device)
    g = torch.Generator(device=device).manual_seed(seed)
    was_training = model.training
    model.eval()
    for _ in range(steps):
        logits = model(tokens[:, -model.embed.max_len :])[:, -1].float()  #      [B, V]
        if temperature == 0:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            probs = next_token_probs(logits, temperature, top_k)  #             [B, V]
            nxt = torch.multinomial(probs, 1, generator=g)  #                  [B, 1]
        tokens = torch.cat([tokens, nxt], dim=1)
    model.train(was_training)
    return tokens[0] if prompt.dim() == 1 else tokens


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update, Chapter 11, (11.4).

    ``y = x W^T + b + (alpha / r) x A^T B^T``, ``A`` [r, in] random (Kaiming, as
    in the LoRA paper's code), ``B`` [out, r] zero, so the wrapped layer starts
    equal to the base.  Only ``A`` and ``B`` train: ``r (in + out)`` parameters
    instead of ``in * out``.  :meth:`merged` folds the update into one ``nn.Linear``.
    """

    def __init__(self, base: nn.Linear, r: int = 4, alpha: float = 8.0) -> None:
        super().__init__()
        if r < 1:
            raise ValueError(f"LoRALinear: r must be >= 1, got {r}")
        self.base, self.r, self.scale = base, r, alpha / r
        for p in base.parameters():
            p.requires_grad_(False)
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, device=w.device, dtype=w.dtype))
        self.lora_B = nn.Parameter(
            torch.zeros(base.out_features, r, device=w.device, dtype=w.dtype)
        )
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    @property
    def weight(self) -> Tensor:
        """The effective weight ``W + (alpha / r) B A`` [out, in]."""
        return self.base.weight + self.scale * self.lora_B @ self.lora_A

    @property
    def bias(self) -> Tensor | None:
        return self.base.bias

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """One ``nn.Linear`` with weight ``W + (alpha / r) B A``: same outputs, no extra cost."""
        w = self.base.weight
        out = nn.Linear(
            self.base.in_features, self.base.out_features, self.bias is not None, w.device, w.dtype
        )
        out.weight.copy_(self.weight)
        if self.bias is not None:
            out.bias.copy_(self.bias)
        return out


def _replace(model: nn.Module, pick, make) -> int:
    names = [n for n, m in model.named_modules() if pick(n, m)]
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, make(getattr(parent, child)))
    return len(names)


def _freeze_for(where: str, model: nn.Module, targets: tuple[str, ...]) -> None:
    """Check that some ``nn.Linear`` of ``model`` is named in ``targets``, then freeze it all."""
    linears = [n for n, m in model.named_modules() if type(m) is nn.Linear]
    if not any(n.rsplit(".", 1)[-1] in targets for n in linears):
        names = sorted({n.rsplit(".", 1)[-1] for n in linears})
        raise ValueError(
            f"{where}: no nn.Linear named {targets} in the model; its nn.Linear layers "
            f"are named {names[:8]}{' ...' if len(names) > 8 else ''}"
        )
    for p in model.parameters():
        p.requires_grad_(False)


def add_lora(
    model: nn.Module,
    r: int = 4,
    alpha: float = 8.0,
    targets: tuple[str, ...] = ("out_proj", "linear1", "linear2"),
) -> nn.Module:
    """Freeze ``model`` and wrap every ``nn.Linear`` whose name ends in ``targets`` (in place).

    Default targets: each block's attention output projection and both
    feed-forward layers.  The query, key and value projections are one fused
    parameter (``in_proj_weight`` [3D, D]), not an ``nn.Linear``, so they cannot
    be wrapped.  Returns the model; only the LoRA factors train.
    """
    _freeze_for("add_lora", model, targets)
    _replace(
        model,
        lambda name, m: type(m) is nn.Linear and name.rsplit(".", 1)[-1] in targets,
        lambda m: LoRALinear(m, r, alpha),
    )
    return model


class SliceLoRA(nn.Module):
    """LoRA (11.4) on chosen slices of a fused projection ``[W_Q; W_K; W_V]`` [3D, D], Chapter 11.

    A parametrization (``torch.nn.utils.parametrize``) of the attention's
    ``in_proj_weight``: ``forward(W) = W + (alpha / r) [dW_Q; dW_K; dW_V]`` with
    ``dW_s = B_s A_s`` for each slice ``s`` in ``slices`` (``A_s`` [r, D] Kaiming,
    ``B_s`` [D, r] zero, as in :class:`LoRALinear`) and ``dW_s = 0`` for the others.
    ``slices=("q", "v")`` is the placement of Hu et al. (2021): the same update
    as a :class:`LoRALinear` on separate ``W_Q`` and ``W_V`` layers.
    """

    def __init__(self, weight: Tensor, r: int = 4, alpha: float = 8.0, slices=("q", "v")):
        super().__init__()
        if r < 1:
            raise ValueError(f"SliceLoRA: r must be >= 1, got {r}")
        if not slices or not set(slices) <= {"q", "k", "v"}:
            raise ValueError(f"SliceLoRA: slices must be a non-empty subset of 'qkv', got {slices}")
        three_d, d = weight.shape  #                                           [3D, D]
        if three_d != 3 * d:
            raise ValueError(
                f"SliceLoRA: expected a fused [3D, D] weight, got {list(weight.shape)}"
            )
        self.r, self.scale, self.slices = r, alpha / r, tuple(slices)
        kw = dict(device=weight.device, dtype=weight.dtype)
        self.lora_A = nn.ParameterDict(
            {s: nn.Parameter(torch.empty(r, d, **kw)) for s in self.slices}  # A_s [r, D]
        )
        self.lora_B = nn.ParameterDict(
            {s: nn.Parameter(torch.zeros(d, r, **kw)) for s in self.slices}  # B_s [D, r]
        )
        for a in self.lora_A.values():
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))

    def forward(self, weight: Tensor) -> Tensor:
        d = weight.shape[1]
        zero = weight.new_zeros(d, d)
        delta = [self.lora_B[s] @ self.lora_A[s] if s in self.slices else zero for s in "qkv"]
        return weight + self.scale * torch.cat(delta)  # (11.4) per slice       [3D, D]


def add_qv_lora(
    model: nn.Module, r: int = 4, alpha: float = 8.0, slices: tuple[str, ...] = ("q", "v")
) -> nn.Module:
    """Freeze ``model`` and put a :class:`SliceLoRA` on every fused ``in_proj_weight`` (in place).

    Default: the query and value slices, LoRA's placement in Hu et al. (2021).
    Returns the model; only the LoRA factors train.  :func:`merge_lora` folds them in.
    """
    owners = [m for m in model.modules() if isinstance(getattr(m, "in_proj_weight", None), Tensor)]
    if not owners:
        raise ValueError("add_qv_lora: the model has no attention with a fused in_proj_weight")
    for p in model.parameters():
        p.requires_grad_(False)
    for m in owners:
        parametrize.register_parametrization(
            m, "in_proj_weight", SliceLoRA(m.in_proj_weight, r, alpha, slices)
        )
    return model


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every :class:`LoRALinear` and :class:`SliceLoRA` into plain weights (in place).

    Returns the model, with its original parameter count and no extra work per forward pass.
    """
    _replace(model, lambda name, m: isinstance(m, LoRALinear), lambda m: m.merged())
    for m in list(model.modules()):
        if parametrize.is_parametrized(m, "in_proj_weight"):
            parametrize.remove_parametrizations(m, "in_proj_weight", leave_parametrized=True)
    return model


class BottleneckAdapter(nn.Module):
    """A frozen sub-layer output followed by a small trainable bottleneck, Chapter 11, (11.5).

    Houlsby et al. (2019) insert, after each sub-layer (attention, feed-forward)
    and before its residual sum, ``h -> h + W_up phi(W_down h + b_down) + b_up``
    with ``W_down`` [m, D], ``W_up`` [D, m] and a bottleneck ``m << D``.  Here the
    adapter wraps the sub-layer's last ``nn.Linear`` (``base``, [D_in -> D]), so
    ``forward(x [..., D_in]) -> [..., D]`` is ``h = base(x)`` plus the bottleneck
    of ``h``.  ``W_up`` and ``b_up`` start at zero: the wrapped layer starts
    equal to the base (the paper uses a near-zero initialisation).  It trains
    ``2 m D + m + D`` parameters.  Unlike LoRA it cannot be merged into ``base``
    (``phi`` is in the way), so it adds a little work at inference.
    """

    def __init__(self, base: nn.Linear, bottleneck: int = 8, activation: str = "gelu") -> None:
        super().__init__()
        if bottleneck < 1:
            raise ValueError(f"BottleneckAdapter: bottleneck must be >= 1, got {bottleneck}")
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"BottleneckAdapter: activation must be one of {tuple(ACTIVATIONS)}, "
                f"got {activation!r}"
            )
        self.base, self.activation = base, activation
        for p in base.parameters():
            p.requires_grad_(False)
        d, w = base.out_features, base.weight
        self.down = nn.Linear(d, bottleneck, device=w.device, dtype=w.dtype)  # W_down [m, D]
        self.up = nn.Linear(bottleneck, d, device=w.device, dtype=w.dtype)  #   W_up   [D, m]
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.base(x)  #                                                    [..., D]
        return h + self.up(ACTIVATIONS[self.activation](self.down(h)))  # (11.5)


def add_adapters(
    model: nn.Module,
    bottleneck: int = 8,
    targets: tuple[str, ...] = ("out_proj", "linear2"),
    activation: str = "gelu",
) -> nn.Module:
    """Freeze ``model`` and put a :class:`BottleneckAdapter` after each ``targets`` layer (in place).

    The defaults, each block's attention output projection and the feed-forward
    block's second layer, are the last layers of the two sub-layers: Houlsby's
    two adapters per block.  Returns the model; only the adapters train.
    """
    _freeze_for("add_adapters", model, targets)
    _replace(
        model,
        lambda name, m: type(m) is nn.Linear and name.rsplit(".", 1)[-1] in targets,
        lambda m: BottleneckAdapter(m, bottleneck, activation),
    )
    return model


@torch.no_grad()
def load_gpt2_weights(model: GPT, state: dict[str, Tensor]) -> GPT:
    """Copy a Hugging Face ``GPT2Model`` state dict into ``model`` (same sizes); returns it.

    GPT-2's ``Conv1D`` stores weights as [in, out], so every matrix is transposed;
    ``c_attn`` is already ``[W_Q; W_K; W_V]``, our ``in_proj_weight`` layout.  Use
    ``activation_function="gelu"`` in the ``GPT2Config`` (GPT-2 itself uses the
    tanh approximation, ``"gelu_new"``, which the library's blocks do not offer).
    """
    state = {k.removeprefix("transformer."): v for k, v in state.items()}
    ours = {"embed.tok.weight": state["wte.weight"], "embed.pos.weight": state["wpe.weight"]}
    ours["blocks.norm.weight"], ours["blocks.norm.bias"] = state["ln_f.weight"], state["ln_f.bias"]
    for i in range(len(model.blocks.layers)):
        h, b = f"h.{i}.", f"blocks.layers.{i}."
        pairs = {
            "ln_1": "norm1",
            "ln_2": "norm2",
            "attn.c_proj": "self_attn.out_proj",
            "mlp.c_fc": "ff.linear1",
            "mlp.c_proj": "ff.linear2",
        }
        for theirs, mine in pairs.items():
            w = state[h + theirs + ".weight"]
            ours[b + mine + ".weight"] = w if theirs.startswith("ln") else w.T
            ours[b + mine + ".bias"] = state[h + theirs + ".bias"]
        ours[b + "self_attn.in_proj_weight"] = state[h + "attn.c_attn.weight"].T
        ours[b + "self_attn.in_proj_bias"] = state[h + "attn.c_attn.bias"]
    missing = [k for k in model.state_dict() if k not in ours and not k.startswith("head.")]
    if missing:
        raise KeyError(f"load_gpt2_weights: no GPT-2 weight for {missing}")
    for k, v in ours.items():
        model.state_dict()[k].copy_(v)
    return model
