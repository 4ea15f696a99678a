"""The Vision Transformer (ViT): an image as a sequence of patches (Chapter 13).

Equation numbers refer to Chapter 13.  Shapes (``book/notation.md``): ``B``
batch, ``C`` image channels, ``height`` and ``width`` in pixels, ``P`` patch
size, ``N_p = (height / P)(width / P)`` patches, ``T = N_p + 1`` tokens (the
patches and the CLS token), ``D`` model width, ``h`` heads, ``K`` classes.

The model of Dosovitskiy et al. (2021), eqs. (13.1)-(13.4):

* (13.1) patch embedding: cut the image into ``N_p`` patches of ``P x P`` pixels,
  flatten each to ``C P^2`` numbers and map it linearly to ``D``:
  ``z_0 = [x_cls; x_p^1 E; ...; x_p^{N_p} E] + E_pos``.  :class:`PatchEmbedding`
  computes ``x_p E`` as a convolution with kernel and stride ``P``
  (:meth:`PatchEmbedding.forward`) and, for teaching, as :func:`patchify`
  followed by a matrix product (:meth:`PatchEmbedding.forward_linear`); the two
  are the same function;
* (13.2)-(13.3) ``num_layers`` pre-norm encoder blocks, ``z' = z + MHA(LN z)``,
  ``z = z' + MLP(LN z')`` (:class:`course_lib.blocks.EncoderBlock` with
  ``norm_first=True`` and GELU);
* (13.4) ``y = LN(z^0)`` (the last block's output): the final layer norm applied to the CLS token, then
  a linear classification head.

The parameter layout follows Hugging Face's ``ViTModel`` closely enough that the
tests copy its weights into :class:`ViT` and match its output within 1e-5.
:func:`attention_rollout` and :func:`cls_attention_map` turn the recorded
attention weights into one map over the patch grid per image.

Without ``E_pos`` the encoder is permutation-equivariant over the patches:
:func:`permute_patches` shuffles the patches of an image and
:func:`with_permuted_positions` moves the position embeddings with them, and the
two together leave the class scores unchanged (the patch-shuffle test of the
chapter).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from course_lib.attention import record_attention
from course_lib.blocks import EncoderBlock
from course_lib.config import TransformerConfig, check_config
from course_lib.shapes import fmt_shape

__all__ = [
    "patchify",
    "PatchEmbedding",
    "ViT",
    "attention_rollout",
    "cls_attention_map",
    "permute_patches",
    "with_permuted_positions",
]


def _check_images(where: str, images: Tensor, channels: int | None, patch_size: int) -> None:
    """``images`` must be [B, C, height, width] (``C = channels`` unless None), height and width multiples of P."""
    ok = isinstance(images, Tensor) and images.dim() == 4
    if not ok or (channels is not None and images.shape[1] != channels):
        shape = fmt_shape(images.shape) if isinstance(images, Tensor) else type(images).__name__
        c = "C" if channels is None else f"C={channels}"
        raise ValueError(f"{where}: images must be [B, {c}, height, width], got {shape}")
    h, w = images.shape[-2:]
    if h % patch_size or w % patch_size:
        raise ValueError(
            f"{where}: image size {h}x{w} is not a multiple of the patch size {patch_size}"
        )


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into flattened, non-overlapping patches, eq. (13.1).

    ``images`` [B, C, height, width] -> ``[B, N_p, C * P * P]`` with ``N_p = (height/P) (width/P)``,
    patches in row-major order over the grid (left to right, then top to
    bottom) and each patch flattened channel first, then row, then column: the
    order of ``Conv2d.weight.flatten(1)``, so that ``patchify(x) @ W.flatten(1).T``
    equals the strided convolution.
    """
    if not isinstance(patch_size, int) or patch_size < 1:
        raise ValueError(f"patchify: patch_size must be a positive int, got {patch_size!r}")
    _check_images("patchify", images, None, patch_size)
    b, c, h, w = images.shape
    p = patch_size
    x = images.reshape(b, c, h // p, p, w // p, p)  # [B, C, height/P, P, width/P, P]
    x = x.permute(0, 2, 4, 1, 3, 5)  # [B, height/P, width/P, C, P, P]
    return x.reshape(b, (h // p) * (w // p), c * p * p)  # [B, N_p, C P^2]


class PatchEmbedding(nn.Module):
    """Linear embedding of each ``P x P`` patch, eq. (13.1): ``x_p E + b``.

    ``proj`` is ``nn.Conv2d(C, D, kernel_size=P, stride=P)``: one output
    position per patch, so the convolution *is* the per-patch linear map, with
    ``E = proj.weight.flatten(1).T`` [C P^2, D].  ``forward(images [B, C, height, width])
    -> [B, N_p, D]``; :meth:`forward_linear` computes the same with
    :func:`patchify` and a matrix product.
    """

    def __init__(self, in_channels: int, d_model: int, patch_size: int) -> None:
        super().__init__()
        if min(in_channels, d_model, patch_size) < 1:
            raise ValueError(
                "PatchEmbedding: in_channels, d_model and patch_size must be positive, got "
                f"{in_channels}, {d_model}, {patch_size}"
            )
        self.in_channels, self.d_model, self.patch_size = in_channels, d_model, patch_size
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        _check_images("PatchEmbedding", images, self.in_channels, self.patch_size)
        z = self.proj(images)  # strided convolution                 [B, D, height/P, width/P]
        return z.flatten(2).transpose(1, 2)  # row-major patch order   [B, N_p, D]

    def forward_linear(self, images: Tensor) -> Tensor:
        """The same map written as (13.1): flatten each patch, multiply by ``E``."""
        _check_images("PatchEmbedding", images, self.in_channels, self.patch_size)
        patches = patchify(images, self.patch_size)  # [B, N_p, C P^2]
        e = self.proj.weight.flatten(1)  # E^T                                 [D, C P^2]
        return patches @ e.T + self.proj.bias  # x_p E + b                        [B, N_p, D]


class ViT(nn.Module):
    """A Vision Transformer classifier, eqs. (13.1)-(13.4).

    ``forward(images [B, C, height, width]) -> logits [B, K]``; :meth:`features` returns
    every token after the final layer norm, ``[B, T, D]`` with the CLS token at
    position 0; :meth:`attention_weights` returns the attention weights of every
    layer, ``[num_layers, B, h, T, T]``.

    ``ViT(config, image_size, patch_size, num_classes, in_channels=1)``.
    Parameters: ``patch_embed`` (:class:`PatchEmbedding`), ``cls_token`` [1, 1, D],
    ``pos_embed`` [1, T, D] (learned, eq. (13.1)), ``blocks`` (``config.num_layers``
    :class:`~course_lib.blocks.EncoderBlock`; ViT's are pre-norm with GELU:
    ``TransformerConfig(activation="gelu", eps=1e-6)``), ``norm`` (the final
    layer norm, eq. (13.4)) and ``head`` (``Linear(D, K)``).  ``config.eps`` is the
    epsilon of every layer norm (Hugging Face's ViT uses 1e-12, the original
    code 1e-6); ``config.max_len`` is not read (``T = N_p + 1``, set by the image).
    """

    def __init__(
        self,
        config: TransformerConfig,
        image_size: int,
        patch_size: int,
        num_classes: int,
        *,
        in_channels: int = 1,
    ) -> None:
        super().__init__()
        self.config = c = check_config("ViT", config)
        if not isinstance(patch_size, int) or patch_size < 1:
            raise ValueError(f"ViT: patch_size must be a positive int, got {patch_size!r}")
        if image_size % patch_size:
            raise ValueError(
                f"ViT: image_size ({image_size}) must be a multiple of patch_size ({patch_size})"
            )
        if num_classes < 1:
            raise ValueError(f"ViT: num_classes ({num_classes}) must be >= 1")
        self.image_size, self.patch_size = image_size, patch_size
        self.grid = image_size // patch_size
        self.num_patches = self.grid**2
        self.patch_embed = PatchEmbedding(in_channels, c.d_model, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.d_model))  # x_cls  [1, 1, D]
        self.pos_embed = nn.Parameter(  # E_pos                                  [1, T, D]
            torch.randn(1, self.num_patches + 1, c.d_model) * 0.02
        )
        self.dropout = nn.Dropout(c.dropout)
        kw = dict(norm_first=c.norm_first, activation=c.activation, eps=c.eps)
        self.blocks = nn.ModuleList(
            EncoderBlock(c.d_model, c.num_heads, c.d_ff, c.dropout, **kw)
            for _ in range(c.num_layers)
        )
        self.norm = nn.LayerNorm(c.d_model, eps=c.eps)
        self.head = nn.Linear(c.d_model, num_classes)

    def features(self, images: Tensor) -> Tensor:
        """Every token after the last block and the final layer norm, ``[B, T, D]``."""
        if images.dim() != 4 or images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(
                f"ViT: images must be [B, C, {self.image_size}, {self.image_size}], "
                f"got {fmt_shape(images.shape)}"
            )
        x = self.patch_embed(images)  # x_p E                                    [B, N_p, D]
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # [B, 1, D]
        z = torch.cat([cls, x], dim=1) + self.pos_embed  # (13.1)                   [B, T, D]
        z = self.dropout(z)
        for block in self.blocks:  # (13.2)-(13.3) pre-norm blocks
            z = block(z)
        return self.norm(z)  # (13.4) LN                                         [B, T, D]

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.features(images)[:, 0])  # classify the CLS token   [B, K]

    @torch.no_grad()
    def attention_weights(self, images: Tensor) -> Tensor:
        """The attention weights of every layer, ``[num_layers, B, h, T, T]`` (row: query token)."""
        with record_attention(self) as maps:
            self.features(images)
        return torch.stack([maps[f"blocks.{i}.self_attn"] for i in range(len(self.blocks))])


def _check_rollout(weights: Tensor, residual: float) -> None:
    """Raise unless ``weights`` is [num_layers, B, h, T, T] and ``residual`` lies in [0, 1]."""
    if weights.dim() != 5 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"attention_rollout: weights must be [num_layers, B, h, T, T], got {fmt_shape(weights.shape)}"
        )
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"attention_rollout: residual must be in [0, 1], got {residual}")


def attention_rollout(weights: Tensor, residual: float = 0.5) -> Tensor:
    """Attention rollout (Abnar & Zuidema, 2020), eq. (13.5).

    ``weights`` [num_layers, B, h, T, T] (from :meth:`ViT.attention_weights`).  Each layer's
    heads are averaged, the residual connection is accounted for as
    ``A_l' = residual * I + (1 - residual) * mean_h A_l``, and the layers are
    chained: ``R = A_L' ... A_1'``.  Returns ``R`` [B, T, T]; row ``t`` says how
    much of token ``t``'s final representation flows from each input token.
    Every row sums to 1.
    """
    _check_rollout(weights, residual)
    t = weights.shape[-1]
    eye = torch.eye(t, dtype=weights.dtype, device=weights.device)
    rollout = eye.expand(weights.shape[1], t, t)
    for layer in weights:  # [B, h, T, T], first layer first
        a = residual * eye + (1.0 - residual) * layer.mean(dim=1)  # [B, T, T]
        rollout = a @ rollout  # R_l = A_l' R_{l-1}
    return rollout


def cls_attention_map(weights: Tensor, grid: int, *, rollout: bool = True) -> Tensor:
    """What the CLS token looks at, as one ``[grid, grid]`` map per image.

    ``weights`` [num_layers, B, h, T, T] with ``T = grid**2 + 1``.  With ``rollout=True``
    the CLS row of :func:`attention_rollout`; otherwise the CLS row of the last
    layer, averaged over heads.  The CLS column is dropped and the ``N_p``
    patch entries are rescaled to sum to 1.  Returns ``[B, grid, grid]``.
    """
    t = grid * grid + 1
    if weights.dim() != 5 or weights.shape[-2:] != (t, t):
        raise ValueError(
            f"cls_attention_map: weights must be [num_layers, B, h, T={t}, T={t}], "
            f"got {fmt_shape(weights.shape)}"
        )
    rows = attention_rollout(weights)[:, 0] if rollout else weights[-1].mean(dim=1)[:, 0]
    patches = rows[:, 1:]  # drop the CLS column                           [B, N_p]
    patches = patches / patches.sum(dim=-1, keepdim=True)
    return patches.reshape(-1, grid, grid)


def _check_perm(where: str, perm: Tensor, n: int) -> None:
    if not isinstance(perm, Tensor) or perm.shape != (n,) or perm.is_floating_point():
        got = fmt_shape(perm.shape) if isinstance(perm, Tensor) else type(perm).__name__
        raise ValueError(f"{where}: perm must be an integer tensor [N_p={n}], got {got}")
    if not torch.equal(perm.sort().values.cpu(), torch.arange(n)):
        raise ValueError(f"{where}: perm must hold each of 0 .. {n - 1} once (torch.randperm({n}))")


def permute_patches(images: Tensor, perm: Tensor, patch_size: int) -> Tensor:
    """Shuffle the patches of every image: patch ``k`` of the result is patch ``perm[k]``.

    ``images`` [B, C, height, width], ``perm`` [N_p] a permutation of the patch
    indices (row-major, as in :func:`patchify`).  Returns an image of the same
    shape, so that ``patchify(permute_patches(x, perm, P), P) == patchify(x, P)[:, perm]``.
    The pixels inside each patch keep their arrangement.
    """
    _check_images("permute_patches", images, None, patch_size)
    b, c, h, w = images.shape
    p, gh, gw = patch_size, h // patch_size, w // patch_size
    _check_perm("permute_patches", perm, gh * gw)
    x = images.reshape(b, c, gh, p, gw, p).permute(0, 2, 4, 1, 3, 5)  # [B, gh, gw, C, P, P]
    x = x.reshape(b, gh * gw, c, p, p)[:, perm.to(images.device)]  # shuffled  [B, N_p, C, P, P]
    x = x.reshape(b, gh, gw, c, p, p).permute(0, 3, 1, 4, 2, 5)  # [B, C, gh, P, gw, P]
    return x.reshape(b, c, h, w)


def with_permuted_positions(model: ViT, perm: Tensor) -> ViT:
    """A copy of ``model`` whose patch position embeddings are shuffled like the patches.

    Row ``k`` of the copy's patch positions is row ``perm[k]`` of the original's
    (the CLS position stays).  Every other part of a ViT treats the patches as a
    set, so ``copy(permute_patches(x, perm))`` equals ``model(x)``: the model sees
    each patch with its own position, wherever it sits in the sequence.
    """
    if not isinstance(model, ViT):
        raise TypeError(f"with_permuted_positions: model must be a ViT, got {type(model).__name__}")
    _check_perm("with_permuted_positions", perm, model.num_patches)
    shuffled = copy.deepcopy(model)
    with torch.no_grad():
        patch_rows = model.pos_embed[:, 1:][:, perm.to(model.pos_embed.device)]  # [1, N_p, D]
        shuffled.pos_embed[:, 1:] = patch_rows
    return shuffled
