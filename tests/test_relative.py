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
from tests.conftest import default_device

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


# ---------------------------------------------------------------------------
# Options the tests above leave at their defaults, and the edges of the checks
# ---------------------------------------------------------------------------


def test_relative_positions_with_a_cached_prefix():
    """r_ij = j - i with the T queries at the last of S positions; S defaults to T."""
    r = R.relative_positions(2, 5)
    assert r.dtype == torch.int64
    assert r.tolist() == [[-3, -2, -1, 0, 1], [-4, -3, -2, -1, 0]]
    assert torch.equal(R.relative_positions(3), R.relative_positions(3, 3))
    assert R.relative_positions(3).tolist() == [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]
    assert R.relative_positions(1, 1).tolist() == [[0]]
    assert R.relative_positions(2, 3, device="meta").device.type == "meta"
    with pytest.raises(
        ValueError, match=r"^relative_positions: q_len \(4\) must be <= k_len \(3\)"
    ):
        R.relative_positions(4, 3)
    with pytest.raises(ValueError, match="^relative_positions: k_len must be a positive int"):
        R.relative_positions(1, 0)


def test_shaw_indices_edges():
    assert R.shaw_indices(2, 3, 0).tolist() == [[0, 0, 0], [0, 0, 0]]  # K = 0: one row
    assert R.shaw_indices(1, 4, 1).tolist() == [[0, 0, 0, 1]]  # the query is the last key
    assert R.shaw_indices(2, 2, 5, device="meta").device.type == "meta"
    for bad in (-1, 2.0, None):
        with pytest.raises(ValueError, match=r"^shaw_indices: max_distance must be an int >= 0"):
            R.shaw_indices(2, 2, bad)


@pytest.mark.parametrize(("t", "s"), [(1, 6), (3, 6), (6, 6)])
def test_shaw_with_fewer_queries_than_keys(t, s):
    """Queries at the last t of s positions, with a mask, without a value table: the loop."""
    g = _gen(7)
    d, big_k = 4, 2
    q = torch.randn(2, t, d, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, s, d, generator=g, dtype=torch.float64) for _ in range(2))
    rel_k = torch.randn(2 * big_k + 1, d, generator=g, dtype=torch.float64)
    allowed = torch.rand(t, s, generator=g) > 0.3
    allowed[:, 0] = True
    y, w = R.shaw_attention(q, k, v, rel_k, mask=allowed, return_weights=True)
    assert w.shape == (2, t, s) and (w[:, ~allowed] == 0).all()
    for b in range(2):
        for i in range(t):
            pos = s - t + i
            e = torch.stack(
                [
                    q[b, i] @ (k[b, j] + rel_k[max(-big_k, min(big_k, j - pos)) + big_k])
                    for j in range(s)
                ]
            ) / math.sqrt(d)
            alpha = torch.softmax(e.masked_fill(~allowed[i], -math.inf), 0)
            torch.testing.assert_close(w[b, i], alpha)
            torch.testing.assert_close(y[b, i], alpha @ v[b])
    # an additive mask is added as it is
    bias = torch.randn(t, s, generator=g, dtype=torch.float64)
    y_add = R.shaw_attention(q, k, v, rel_k, mask=bias)
    plain = R.shaw_attention(q, k, v, rel_k, mask=torch.zeros(t, s, dtype=torch.float64))
    assert (y_add - plain).abs().max() > 1e-3
    torch.testing.assert_close(plain, R.shaw_attention(q, k, v, rel_k))


def test_shaw_table_errors():
    q = torch.zeros(1, 3, 4)
    with pytest.raises(ValueError, match=r"^shaw_attention: rel_k must be \[2K\+1, d=4\]"):
        R.shaw_attention(q, q, q, torch.zeros(5, 3))  # wrong width
    with pytest.raises(ValueError, match=r"^shaw_attention: rel_k must be \[2K\+1, d=4\]"):
        R.shaw_attention(q, q, q, torch.zeros(5, 4, 1))  # not a matrix
    with pytest.raises(ValueError, match=r"^shaw_attention: rel_v must be \[2K\+1=5, dv=4\]"):
        R.shaw_attention(q, q, q, torch.zeros(5, 4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"^shaw_attention: rel_v must be \[2K\+1=5, dv=6\]"):
        R.shaw_attention(q, q, torch.zeros(1, 3, 6), torch.zeros(5, 4), torch.zeros(5, 4))
    with pytest.raises(ValueError, match=r"^shaw_attention: rel_v must be"):
        R.shaw_attention(q, q, q, torch.zeros(5, 4), torch.zeros(5, 4, 1))
    vec = torch.zeros(4)
    for args in ((vec, q, q), (q, vec, q), (q, q, vec)):
        with pytest.raises(ValueError, match=r"^shaw_attention: q, k, v must be \[\.\.\., T, d\]"):
            R.shaw_attention(*args, torch.zeros(5, 4))
    # one row (K = 0) is a valid table: every pair reads it
    one = torch.ones(1, 4)
    assert R.shaw_attention(q + 1, q, q, one, one).shape == (1, 3, 4)


def test_t5_buckets_defaults_and_checks():
    from transformers.models.t5.modeling_t5 import T5Attention

    ref = T5Attention._relative_position_bucket(OFFSETS)  # bidirectional, 32, 128
    assert torch.equal(R.t5_relative_position_bucket(OFFSETS), ref.long())
    # the smallest valid sizes: 4 buckets (2 exact) bidirectional, 2 causal; max_distance > n_exact
    for bidirectional, nb, md in ((True, 4, 2), (False, 2, 2), (True, 6, 2), (False, 3, 2)):
        ours = R.t5_relative_position_bucket(OFFSETS, bidirectional, nb, md)
        ref = T5Attention._relative_position_bucket(
            OFFSETS, bidirectional=bidirectional, num_buckets=nb, max_distance=md
        )
        assert torch.equal(ours, ref.long()), (bidirectional, nb, md)
    with pytest.raises(ValueError, match="bidirectional needs an even num_buckets, got 5"):
        R.t5_relative_position_bucket(OFFSETS, True, 5, 16)
    for bidirectional, nb, md in ((True, 2, 16), (False, 1, 16), (True, 4, 1), (False, 8, 4)):
        with pytest.raises(ValueError, match=r"need num_buckets >= \d and max_distance > \d"):
            R.t5_relative_position_bucket(OFFSETS, bidirectional, nb, md)
    with pytest.raises(ValueError, match="max_distance must be a positive int"):
        R.t5_relative_position_bucket(OFFSETS, True, 32, 0)
    rel = torch.tensor([-3, 0, 2], dtype=torch.int32)
    assert R.t5_relative_position_bucket(rel).dtype == torch.int64


def test_t5_bias_options_match_transformers():
    """``t5_bias`` with a cached prefix, both directions and another max_distance: T5's own
    ``compute_bias`` (which reads the table as ``nn.Embedding(num_buckets, h)``)."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    for bidirectional, max_distance in ((False, 128), (True, 128), (False, 20), (True, 20)):
        config = T5Config(
            d_model=8,
            d_kv=4,
            num_heads=2,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=max_distance,
            is_decoder=not bidirectional,
        )
        attn = T5Attention(config, has_relative_attention_bias=True)
        table = torch.randn(8, 2, generator=_gen(5))
        with torch.no_grad():
            attn.relative_attention_bias.weight.copy_(table)
            ref = attn.compute_bias(40, 40)[0]  # [h, T, S]
        ours = R.t5_bias(table, 40, bidirectional=bidirectional, max_distance=max_distance)
        torch.testing.assert_close(ours, ref)
        torch.testing.assert_close(
            R.t5_bias(table, 3, 40, bidirectional=bidirectional, max_distance=max_distance),
            ref[:, -3:],
        )
    # the defaults: causal, max_distance 128
    table = torch.randn(32, 2, generator=_gen(6))
    assert torch.equal(
        R.t5_bias(table, 200), R.t5_bias(table, 200, 200, bidirectional=False, max_distance=128)
    )
    assert not torch.equal(R.t5_bias(table, 200), R.t5_bias(table, 200, max_distance=64))
    with pytest.raises(ValueError, match=r"^t5_bias: table must be \[num_buckets, h\]"):
        R.t5_bias(torch.zeros(32), 4)


def test_alibi_bias_with_a_cached_prefix():
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    bias = R.alibi_bias(slopes, 2, 4)  # queries at positions 2, 3
    assert bias.dtype == torch.float64 and bias.shape == (2, 2, 4)
    assert bias[0].tolist() == [[-1.0, -0.5, 0.0, -0.5], [-1.5, -1.0, -0.5, 0.0]]
    torch.testing.assert_close(bias[1], bias[0] / 2)
    assert torch.equal(R.alibi_bias(slopes, 3), R.alibi_bias(slopes, 3, 3))
    assert R.alibi_slopes(1).tolist() == [2.0**-8] and R.alibi_slopes(3).dtype == torch.float32
    with pytest.raises(ValueError, match="^alibi_slopes: num_heads must be a positive int"):
        R.alibi_slopes(0)


def test_rope_cos_sin_layout_dtype_and_checks():
    c, s = R.rope_cos_sin(3, 4)
    assert c.dtype == s.dtype == torch.float32 and c.shape == (3, 4)
    omega = [1.0, 0.01]  # 10000^(-2i/4)
    for p in range(3):
        assert c[p].tolist() == pytest.approx([math.cos(p * w) for w in omega * 2])
        assert s[p].tolist() == pytest.approx([math.sin(p * w) for w in omega * 2])
    ci, si = R.rope_cos_sin(torch.tensor([5]), 4, base=100.0, convention="interleaved")
    angles = [5.0, 5.0, 0.5, 0.5]  # 100^(-2i/4) = 1, 0.1
    assert ci[0].tolist() == pytest.approx([math.cos(a) for a in angles])
    assert si[0].tolist() == pytest.approx([math.sin(a) for a in angles])
    c64, _ = R.rope_cos_sin(2, 4, dtype=torch.float64)
    assert c64.dtype == torch.float64
    assert R.rope_cos_sin(torch.arange(2, device="meta"), 4)[0].device.type == "meta"
    torch.testing.assert_close(R.rope_cos_sin(4, 8, scaling_factor=1.0), R.rope_cos_sin(4, 8))
    for bad in (0.99, float("nan")):
        with pytest.raises(ValueError, match=r"^rope_cos_sin: scaling_factor must be >= 1"):
            R.rope_cos_sin(4, 8, scaling_factor=bad)
    with pytest.raises(ValueError, match=r"^rope_cos_sin: convention must be one of"):
        R.rope_cos_sin(4, 8, convention="neox")
    with pytest.raises(ValueError, match=r"^rope_cos_sin: positions must be \[T\], got \[2, 2\]"):
        R.rope_cos_sin(torch.zeros(2, 2, dtype=torch.long), 8)
    with pytest.raises(ValueError, match=r"^rope_cos_sin: base must be > 1"):
        R.rope_cos_sin(4, 8, base=1.0)


def test_apply_rope_checks():
    c, s = R.rope_cos_sin(3, 4)
    with pytest.raises(ValueError, match=r"^apply_rope: convention must be one of"):
        R.apply_rope(torch.zeros(3, 4), c, s, convention="neox")
    with pytest.raises(ValueError, match=r"^apply_rope: x must be \[\.\.\., T, d\] with d even"):
        R.apply_rope(torch.zeros(4), c[0], s[0])
    with pytest.raises(ValueError, match=r"^apply_rope: x must be \[\.\.\., T, d\] with d even"):
        R.apply_rope(torch.zeros(3, 5), torch.zeros(3, 5), torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"^apply_rope: cos and sin must be \[T, d\] = \[3, 4\]"):
        R.apply_rope(torch.zeros(3, 4), c, s[:2])
    with pytest.raises(ValueError, match=r"^apply_rope: cos and sin must be \[T, d\] = \[3, 4\]"):
        R.apply_rope(torch.zeros(3, 4), c[:2], s)
    # one position, one pair: the plain 2-D rotation
    x = torch.tensor([[1.0, 2.0]])
    y = R.apply_rope(x, torch.tensor([[0.6, 0.6]]), torch.tensor([[0.8, 0.8]]))
    torch.testing.assert_close(y, torch.tensor([[1.0 * 0.6 - 2.0 * 0.8, 1.0 * 0.8 + 2.0 * 0.6]]))
    yi = R.apply_rope(
        x, torch.tensor([[0.6, 0.6]]), torch.tensor([[0.8, 0.8]]), convention="interleaved"
    )
    torch.testing.assert_close(yi, y)


def test_rotations_and_permutation_by_hand():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert R.rotate_half(x).tolist() == [-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]
    assert R.rotate_interleaved(x).tolist() == [-2.0, 1.0, -4.0, 3.0, -6.0, 5.0]
    assert R.rope_permutation(6).tolist() == [0, 2, 4, 1, 3, 5]
    assert R.rope_permutation(2).tolist() == [0, 1]
    with pytest.raises(ValueError, match="^rope_permutation: dim must be a positive int"):
        R.rope_permutation(0)


def test_results_follow_the_inputs_not_the_default_device_or_dtype():
    """The index and accumulator tensors are made on the inputs' device: with torch's default
    device set elsewhere (``torch.set_default_device``), the results are unchanged; ALiBi's
    slopes are float32 whatever the default dtype."""
    g = _gen(8)
    table = torch.randn(32, 2, generator=g)
    slopes = R.alibi_slopes(2)
    q = torch.randn(2, 3, 4, generator=g)
    rel = torch.randn(5, 4, generator=g)
    w = torch.softmax(torch.randn(2, 3, 6, generator=g), -1)

    def compute():
        return (
            R.t5_bias(table, 3, 6),
            R.alibi_bias(slopes, 3, 6),
            R.shaw_value_term(w, rel),
            R.shaw_key_bias(q, rel, 6),
        )

    expected = compute()
    with default_device("meta"):
        got = compute()
    for a, b in zip(got, expected, strict=True):
        assert a.device == b.device and torch.equal(a, b)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert R.alibi_slopes(3).dtype == torch.float32
    finally:
        torch.set_default_dtype(default)
