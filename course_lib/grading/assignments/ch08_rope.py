"""Visible tests of exercise ``ch08-rope``: rotary position embeddings (chapter 8).

Compared with Hugging Face ``transformers``' LLaMA rotary embedding
(``LlamaRotaryEmbedding`` built from a small ``LlamaConfig``, no download, and
``apply_rotary_pos_emb``), on fixed random queries on the CPU.
"""

from __future__ import annotations

import math

import torch

from course_lib.grading.expect import expect_close, expect_tensor, fail
from course_lib.grading.registry import test

ASSIGNMENT = "ch08-rope"
TITLE = "Rotary position embeddings"


def _llama(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    d = x.shape[-1]
    config = LlamaConfig(
        hidden_size=2 * d,
        num_attention_heads=2,
        head_dim=d,
        num_hidden_layers=1,
        intermediate_size=8,
        vocab_size=8,
        max_position_embeddings=1024,
        rope_theta=10000.0,
    )
    cos, sin = LlamaRotaryEmbedding(config)(x, positions[None])
    return apply_rotary_pos_emb(x, x, cos, sin)[0].reshape(x.shape)  # [..., L, d]


@test("q1", points=3)
def matches_llama(apply_rope):
    """apply_rope(x, positions) equals LLaMA's rotary embedding (half-split pairs)"""
    g = torch.Generator().manual_seed(1)
    positions = torch.tensor([0, 1, 2, 7, 30, 100])
    x = torch.randn(2, 3, 6, 16, generator=g)  # [batch, heads, L, d]
    got = expect_tensor("apply_rope(x, positions)", apply_rope(x, positions), shape=(2, 3, 6, 16))
    expect_close("apply_rope(x, positions)", got, _llama(x, positions), atol=1e-4)


@test("q1", points=1)
def keeps_norms(apply_rope):
    """the rotation keeps the norm of every vector"""
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(2))
    got = apply_rope(x, torch.arange(10))
    expect_close("norms", got.norm(dim=-1), x.norm(dim=-1), atol=1e-5)


@test("q2", points=2)
def permutation_converts_interleaved_to_half(interleaved_to_half):
    """with perm = interleaved_to_half(d), LLaMA applied to x[perm] rotates the pairs (2i, 2i+1)"""
    d, positions = 8, torch.arange(5)
    perm = expect_tensor("interleaved_to_half(8)", interleaved_to_half(d), shape=(d,))
    if sorted(perm.tolist()) != list(range(d)):
        fail(f"interleaved_to_half(8) should be a permutation of 0..7, got {perm.tolist()}")
    x = torch.randn(5, d, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    expected = torch.empty_like(x)  # the RoPE paper's pairs (2i, 2i+1)
    for p in range(5):
        for i in range(d // 2):
            t = p / 10000 ** (2 * i / d)
            a, b = x[p, 2 * i].item(), x[p, 2 * i + 1].item()
            expected[p, 2 * i], expected[p, 2 * i + 1] = (
                a * math.cos(t) - b * math.sin(t),
                a * math.sin(t) + b * math.cos(t),
            )
    got = _llama(x[:, perm.long()].float(), positions).double()
    expect_close("LLaMA(x[perm])", got, expected[:, perm.long()], atol=1e-5)


@test("q3", points=2)
def scores_depend_on_the_offset_only(rope_scores):
    """rope_scores(q, k, L) is [L, L] and constant along diagonals (depends on n - m only)"""
    g = torch.Generator().manual_seed(4)
    q, k = (
        torch.randn(16, generator=g, dtype=torch.float64),
        torch.randn(16, generator=g, dtype=torch.float64),
    )
    S = expect_tensor("rope_scores(q, k, 40)", rope_scores(q, k, 40), shape=(40, 40)).double()
    expect_close(
        "S[1:, 1:]", S[1:, 1:], S[:-1, :-1], atol=1e-6, context="shifting both positions by one"
    )
    expect_close(
        "S[0, 0]",
        S[0, 0].reshape(1),
        (q @ k).reshape(1),
        atol=1e-6,
        context="position 0 is not rotated",
    )
