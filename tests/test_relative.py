"""course_lib.relative (Chapter 8) against Hugging Face transformers and against its
own equations.

Cross-checks: T5's bucket function, BLOOM's ALiBi slopes, LLaMA's rotary
embedding (half-split, and interleaved after the permutation).  Property tests:
RoPE's norms and relative scores, ALiBi's decay, Shaw et al. against a loop over
its equations.  The hooks inside the one attention class are tested in
test_position_hooks.py, the language model of the experiment in test_lm.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import relative as R
from course_lib.attention import scaled_dot_product_attention
from course_lib.positional import sinusoidal_frequencies

OFFSETS = torch.arange(-300, 301)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------
# Chapter 8: T5 buckets against transformers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (16, 64), (64, 256), (8, 20)])
def test_t5_buckets_match_transformers(bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    ours = R.t5_relative_position_bucket(OFFSETS, bidirectional, num_buckets, max_distance)
    ref = T5Attention._relative_position_bucket(
        OFFSETS, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, ref.long())


def test_t5_bias_is_a_function_of_the_offset():
    table = torch.randn(32, 3, generator=_gen())
    bias = R.t5_bias(table, 40)  # [H, L, L]
    assert bias.shape == (3, 40, 40)
    for s in (1, 5):
        assert torch.equal(bias[:, s:, s:], bias[:, :-s, :-s])  # Toeplitz: depends on j - i


# ---------------------------------------------------------------------------
# Chapter 8: ALiBi against BLOOM
# ---------------------------------------------------------------------------


def _bloom_slopes(num_heads: int) -> torch.Tensor:
    """BLOOM's ALiBi slopes, from whichever helper this transformers release has."""
    from transformers.models.bloom import modeling_bloom

    if hasattr(modeling_bloom, "_get_alibi_slopes"):  # newer releases
        return modeling_bloom._get_alibi_slopes(num_heads, torch.device("cpu"))
    # Older releases (e.g. 5.17) only have build_alibi_tensor: slope_h * position, so the
    # value at position 1 is the slope itself.
    alibi = modeling_bloom.build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)
    return alibi[:, 0, 1]


@pytest.mark.parametrize("num_heads", range(1, 65))
def test_alibi_slopes_match_bloom(num_heads):
    ref = _bloom_slopes(num_heads)
    torch.testing.assert_close(R.alibi_slopes(num_heads), ref, rtol=1e-6, atol=0)


def test_alibi_slopes_of_the_paper():
    assert R.alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    # 12 heads: the 8 slopes for 8 heads, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    extra = [2.0 ** -(k + 0.5) for k in range(4)]
    torch.testing.assert_close(R.alibi_slopes(12)[8:], torch.tensor(extra))


def test_alibi_gives_blooms_attention_weights():
    """BLOOM adds m_h * j (not m_h (j - i)): after the causal softmax, the same weights."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    heads, length = 6, 20
    scores = torch.randn(heads, length, length, generator=_gen())
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    bloom = build_alibi_tensor(torch.ones(1, length), heads, torch.float32)  # [H, 1, L]
    ours = R.alibi_bias(R.alibi_slopes(heads), length)
    w_bloom = torch.softmax((scores + bloom).masked_fill(~causal, -math.inf), -1)
    w_ours = torch.softmax((scores + ours).masked_fill(~causal, -math.inf), -1)
    torch.testing.assert_close(w_ours, w_bloom, rtol=1e-5, atol=1e-6)


def test_alibi_weights_fall_with_distance():
    """Equal content scores: every head's weights fall strictly as the key gets farther."""
    heads, length = 4, 12
    bias = R.alibi_bias(R.alibi_slopes(heads), length)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    w = torch.softmax(bias.masked_fill(~causal, -math.inf), -1)  # [H, L, L]
    for i in range(1, length):
        row = w[:, i, : i + 1]  # keys 0..i; distance falls from i to 0
        assert (row[:, 1:] > row[:, :-1]).all()
    # and the sign matters: the opposite sign makes far keys win
    w_flipped = torch.softmax((-bias).masked_fill(~causal, -math.inf), -1)
    assert (w_flipped[:, -1, 0] > w_flipped[:, -1, -1]).all()


# ---------------------------------------------------------------------------
# Chapter 8: RoPE against LLaMA
# ---------------------------------------------------------------------------


def _llama_rotary(
    head_dim: int, positions: torch.Tensor, x: torch.Tensor, rope_scaling: dict | None = None
):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        num_hidden_layers=1,
        intermediate_size=8,
        vocab_size=8,
        max_position_embeddings=1024,
        rope_theta=10000.0,
        rope_scaling=rope_scaling,
    )
    return LlamaRotaryEmbedding(config)(x, positions[None])  # cos, sin [1, L, d]


# transformers computes the angles p * omega in float32, we in float64: at p = 511 the
# cosines differ by ~4e-5, hence the tolerance (a wrong pairing or sign differs by ~1).
@pytest.mark.parametrize("head_dim", [8, 16, 64])
def test_rope_matches_llama(head_dim):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    g = _gen(head_dim)
    positions = torch.tensor([0, 1, 2, 5, 17, 100, 511])
    q = torch.randn(2, 4, len(positions), head_dim, generator=g)
    k = torch.randn(2, 4, len(positions), head_dim, generator=g)
    cos, sin = _llama_rotary(head_dim, positions, q)
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos, sin)
    c, s = R.rope_cos_sin(positions, head_dim)
    torch.testing.assert_close(R.apply_rope(q, c, s), q_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(R.apply_rope(k, c, s), k_ref, rtol=1e-4, atol=1e-4)

    # interleaved: rotate in the interleaved layout, then permute == LLaMA on permuted input
    perm = R.rope_permutation(head_dim)
    inv = torch.argsort(perm)
    q_int = q[..., inv]  # a query stored in the interleaved layout
    ci, si = R.rope_cos_sin(positions, head_dim, convention="interleaved")
    rotated = R.apply_rope(q_int, ci, si, convention="interleaved")
    q_ref_int, _ = apply_rotary_pos_emb(q_int[..., perm], k, cos, sin)
    torch.testing.assert_close(rotated[..., perm], q_ref_int, rtol=1e-4, atol=1e-4)


def test_rope_interleaved_is_the_papers_pairing():
    """(x_2i, x_2i+1) -> (x_2i cos - x_2i+1 sin, x_2i sin + x_2i+1 cos)."""
    x = torch.randn(3, 6, generator=_gen())
    c, s = R.rope_cos_sin(3, 6, convention="interleaved")
    y = R.apply_rope(x, c, s, convention="interleaved")
    omega = sinusoidal_frequencies(6)
    for p in range(3):
        for i in range(3):
            t = p * omega[i].item()
            a, b = x[p, 2 * i].item(), x[p, 2 * i + 1].item()
            assert y[p, 2 * i].item() == pytest.approx(a * math.cos(t) - b * math.sin(t), abs=1e-5)
            assert y[p, 2 * i + 1].item() == pytest.approx(
                a * math.sin(t) + b * math.cos(t), abs=1e-5
            )


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_rope_preserves_norms(convention):
    x = torch.randn(5, 300, 32, generator=_gen(1), dtype=torch.float64)
    c, s = R.rope_cos_sin(300, 32, convention=convention, dtype=torch.float64)
    y = R.apply_rope(x, c, s, convention=convention)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_rope_scores_depend_only_on_the_offset(convention):
    """<R_m q, R_n k> is the same for (m, n) and (m + s, n + s)."""
    d = 16
    g = _gen(2)
    q, k = (
        torch.randn(d, generator=g, dtype=torch.float64),
        torch.randn(d, generator=g, dtype=torch.float64),
    )
    positions = torch.arange(400)
    c, s = R.rope_cos_sin(positions, d, convention=convention, dtype=torch.float64)
    rq = R.apply_rope(q.expand(400, d), c, s, convention=convention)  # q at every position
    rk = R.apply_rope(k.expand(400, d), c, s, convention=convention)
    scores = rq @ rk.T  # [m, n]
    for shift in (1, 10, 150):
        torch.testing.assert_close(scores[shift:, shift:], scores[:-shift, :-shift])
    assert (scores[0, 1] - scores[1, 0]).abs() > 1e-3  # but not symmetric in (m, n)


# ---------------------------------------------------------------------------
# Chapter 8: Shaw et al.
# ---------------------------------------------------------------------------


def _shaw_loop(q, k, v, rel_k, rel_v, causal):
    """Eqs. (8.1)-(8.3) written as loops over (i, j), one head."""
    big_k = rel_k.shape[0] // 2
    lq, lk, d = q.shape[0], k.shape[0], q.shape[1]
    out = torch.zeros(lq, v.shape[1], dtype=q.dtype)
    for i in range(lq):
        e = torch.full((lk,), -math.inf, dtype=q.dtype)
        for j in range(lk):
            if causal and j > i:
                continue
            a = rel_k[max(-big_k, min(big_k, j - i)) + big_k]
            e[j] = q[i] @ (k[j] + a) / math.sqrt(d)
        alpha = torch.softmax(e, 0)
        for j in range(lk):
            if alpha[j] > 0:
                out[i] += alpha[j] * (v[j] + rel_v[max(-big_k, min(big_k, j - i)) + big_k])
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_shaw_matches_its_equations(causal):
    g = _gen(3)
    length, d, big_k = 9, 4, 3
    q, k, v = (torch.randn(length, d, generator=g, dtype=torch.float64) for _ in range(3))
    rel_k = torch.randn(2 * big_k + 1, d, generator=g, dtype=torch.float64)
    rel_v = torch.randn(2 * big_k + 1, d, generator=g, dtype=torch.float64)
    mask = torch.ones(length, length, dtype=torch.bool).tril() if causal else None
    ours = R.shaw_attention(q, k, v, rel_k, rel_v, mask=mask)
    torch.testing.assert_close(ours, _shaw_loop(q, k, v, rel_k, rel_v, causal))


def test_shaw_with_zero_tables_is_plain_attention():
    g = _gen(4)
    q, k, v = (torch.randn(2, 3, 10, 8, generator=g) for _ in range(3))
    zeros = torch.zeros(2 * 4 + 1, 8)
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    ours = R.shaw_attention(q, k, v, zeros, zeros, mask=mask)
    torch.testing.assert_close(ours, scaled_dot_product_attention(q, k, v, mask))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_shaw_indices_clip():
    idx = R.shaw_indices(6, 6, 2)
    assert idx[5].tolist() == [0, 0, 0, 0, 1, 2]  # query 5: distances -5..0, clipped at -2
    assert idx[0].tolist() == [2, 3, 4, 4, 4, 4]


def test_shaw_errors_name_shaw_attention():
    """Its arguments are checked once, by shaw_attention itself, not by the attention it calls."""
    q, k = torch.zeros(1, 3, 4), torch.zeros(1, 5, 4)
    rel = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"^shaw_attention: value must be \[\.\.\., S=5, d_v\]"):
        R.shaw_attention(q, k, torch.zeros(1, 4, 4), rel)
    with pytest.raises(ValueError, match=r"^shaw_attention: mask of shape \[3, 4\] does not"):
        R.shaw_attention(q, k, k, rel, mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="^shaw_attention: mask must be boolean"):
        R.shaw_attention(q, k, k, rel, mask=torch.ones(3, 5, dtype=torch.long))


# ---------------------------------------------------------------------------
# Chapter 8: RoPE position interpolation, eq. (8.9)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [2.0, 8.0])
def test_rope_interpolation_is_rope_at_scaled_positions(factor):
    """Position interpolation reads position m at m L / L' = m / factor."""
    positions = torch.arange(0, 40)
    c, s = R.rope_cos_sin(positions, 16, scaling_factor=factor, dtype=torch.float64)
    c_ref, s_ref = R.rope_cos_sin(positions / factor, 16, dtype=torch.float64)
    torch.testing.assert_close((c, s), (c_ref, s_ref), rtol=0, atol=0)
    # the last of L' = factor * 8 positions lands inside the 8 trained ones
    last = R.rope_cos_sin(torch.tensor([int(8 * factor) - 1]), 16, scaling_factor=factor)
    inside = R.rope_cos_sin(torch.tensor([8.0 - 1.0 / factor]), 16)
    torch.testing.assert_close(last, inside)


@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_rope_interpolation_matches_llama_linear_scaling(factor):
    head_dim = 16
    positions = torch.tensor([0, 1, 3, 17, 100, 511])
    x = torch.zeros(1, len(positions), head_dim)
    scaling = {"rope_type": "linear", "factor": factor}
    cos, sin = _llama_rotary(head_dim, positions, x, rope_scaling=scaling)
    c, s = R.rope_cos_sin(positions, head_dim, scaling_factor=factor)
    torch.testing.assert_close((c, s), (cos[0], sin[0]), rtol=1e-4, atol=1e-4)
    # and it is not plain RoPE
    assert (R.rope_cos_sin(positions, head_dim)[0] - cos[0]).abs().max() > 0.1
