"""Chapter 8: the position methods as hooks of the one attention class (each computes
its equations), their parameters, RoPE scaling, RoPE with a cache, clear errors.

Covers course_lib.position_hooks; the functions the hooks call are tested in
test_relative.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import lm
from course_lib import position_hooks as H
from course_lib import relative as R
from course_lib.attention import MultiHeadAttention, record_attention, scaled_dot_product_attention
from course_lib.config import TransformerConfig
from tests.test_relative import _gen, _llama_rotary


def test_position_hook_errors_are_clear():
    with pytest.raises(ValueError, match=r"d_model \(10\) must be a multiple of num_heads \(4\)"):
        TransformerConfig(d_model=10, num_heads=4)
    with pytest.raises(ValueError, match=r"^RoPE: dim must be even"):
        H.RoPE(3)  # RoPE rotates pairs of coordinates
    assert isinstance(H.position_hook("alibi", 3, 2), H.ALiBi)  # odd head sizes are fine elsewhere
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        H.T5Bias(0)
    with pytest.raises(ValueError, match="^position_hook: method must be one of"):
        H.position_hook("absolute", 4, 2)
    with pytest.raises(ValueError, match="^PositionalLM: method must be one of"):
        lm.PositionalLM(TransformerConfig(activation="gelu"), 11, "absolute")


# ---------------------------------------------------------------------------
# Chapter 8: the methods as hooks of the one attention class
# ---------------------------------------------------------------------------


def _heads(mha, x):
    """The projected heads q, k, v [B, h, T, d] of ``mha`` for self-attention on ``x``."""
    h, d = mha.num_heads, mha.head_dim
    qkv = torch.nn.functional.linear(x, mha.in_proj_weight, mha.in_proj_bias)
    return (t.unflatten(-1, (h, d)).transpose(1, 2) for t in qkv.chunk(3, dim=-1))


def _reference(method, hook, q, k, v, causal):
    """What each hook must compute, from the module-level functions of Chapter 8."""
    t = q.shape[-2]
    mask = torch.ones(t, t, dtype=torch.bool).tril() if causal else None
    if method == "shaw":
        return R.shaw_attention(q, k, v, hook.rel_k, hook.rel_v, mask=mask)
    if method == "rope":
        cos, sin = R.rope_cos_sin(t, q.shape[-1], dtype=q.dtype)
        q, k = R.apply_rope(q, cos, sin), R.apply_rope(k, cos, sin)
        return scaled_dot_product_attention(q, k, v, mask)
    if method == "alibi":
        bias = R.alibi_bias(R.alibi_slopes(q.shape[1]), t).to(q.dtype)
    else:
        bias = R.t5_bias(hook.table, t, max_distance=hook.max_distance)
    if causal:
        bias = bias.masked_fill(~mask, float("-inf"))
    return scaled_dot_product_attention(q, k, v, bias)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("method", ["shaw", "t5", "alibi", "rope"])
def test_multi_head_attention_with_each_position_hook_computes_its_equations(method, causal):
    torch.manual_seed(0)
    hook = H.position_hook(method, 4, 3)
    with torch.no_grad():
        for p in hook.parameters():  # T5's table starts at zero: make every entry matter
            p.normal_()
    mha = MultiHeadAttention(12, 3, position=hook).double().eval()
    x = torch.randn(2, 7, 12, dtype=torch.float64, generator=_gen(9))
    out, _ = mha(x, is_causal=causal)
    q, k, v = _heads(mha, x)
    y = _reference(method, hook, q, k, v, causal)  #                          [B, h, T, d]
    torch.testing.assert_close(out, mha.out_proj(y.transpose(1, 2).flatten(2)))
    plain = MultiHeadAttention(12, 3).double().eval()  # the same weights, no hook
    plain.load_state_dict(mha.state_dict(), strict=False)
    assert (plain(x, is_causal=causal)[0] - out).abs().max() > 1e-3  # the hook matters


def test_position_hook_parameters_live_in_the_attention_and_are_recorded():
    model = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=2, max_len=8, activation="gelu"),
        11,
        "t5",
    )
    names = [n for n, _ in model.named_parameters() if "position" in n]
    assert names == [
        "blocks.layers.0.self_attn.position.table",
        "blocks.layers.1.self_attn.position.table",
    ]
    with record_attention(model) as maps:
        model(torch.zeros(1, 8, dtype=torch.long))
    assert sorted(maps) == ["blocks.layers.0.self_attn", "blocks.layers.1.self_attn"]
    assert maps["blocks.layers.0.self_attn"].shape == (1, 2, 8, 8)
    assert maps["blocks.layers.0.self_attn"].triu(1).abs().max() == 0  # causal


# ---------------------------------------------------------------------------
# Chapter 8: RoPE position interpolation, eq. (8.9), set on every hook
# ---------------------------------------------------------------------------


def test_rope_scaling_sets_and_restores_every_hook():
    torch.manual_seed(0)
    model = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=2, max_len=8, activation="gelu"),
        11,
        "rope",
    )
    data = torch.randint(0, 11, (200,), generator=_gen(3))
    plain = lm.evaluate_lm(model, data, 16, num_chars=64)
    with H.rope_scaling(model, 2.0) as changed:
        assert changed == 2  # one hook per layer
        scaled = lm.evaluate_lm(model, data, 16, num_chars=64)
    assert scaled != plain
    assert all(m.scaling_factor == 1.0 for m in model.modules() if isinstance(m, H.RoPE))
    assert lm.evaluate_lm(model, data, 16, num_chars=64) == plain


def test_rope_scaling_errors_are_clear():
    model = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=8, activation="gelu"),
        11,
        "alibi",
    )
    with pytest.raises(ValueError, match="no RoPE hook"), H.rope_scaling(model, 2.0):
        pass
    with pytest.raises(ValueError, match="scaling_factor must be >= 1"):
        R.rope_cos_sin(8, 16, scaling_factor=0.5)


@pytest.mark.parametrize("t", [1, 3])
def test_rope_hook_with_fewer_queries_than_keys_is_generation_with_a_cache(t):
    """One new token (or a few) against a cached prefix: the queries sit at the last ``t``
    of the ``S`` key positions. Checked against LLaMA's rotation at those positions and
    against attention over the full sequence, whose last rows the cached call must equal."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    head_dim, s = 8, 7
    g = _gen(t)
    q = torch.randn(1, 2, s, head_dim, generator=g)
    k = torch.randn(1, 2, s, head_dim, generator=g)
    hook = H.RoPE(head_dim)
    q_new, k_all = hook.rotate(q[..., s - t :, :], k)  # the cached call
    positions = torch.arange(s)
    cos, sin = _llama_rotary(head_dim, positions, q)
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(q_new, q_ref[..., s - t :, :], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(k_all, k_ref, rtol=1e-4, atol=1e-4)
    q_full, _ = hook.rotate(q, k)  # the same queries within the whole sequence
    torch.testing.assert_close(q_new, q_full[..., s - t :, :])
    # independent formula: pair (j, j + d/2) of position p turns by p * base^(-2j/d)
    p, j = s - 1, 1
    angle = p * 10000.0 ** (-2 * j / head_dim)
    x, y = q[0, 0, -1, j], q[0, 0, -1, j + head_dim // 2]
    expected = x * math.cos(angle) - y * math.sin(angle)
    torch.testing.assert_close(q_new[0, 0, -1, j], expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# The hooks' defaults and options, one by one
# ---------------------------------------------------------------------------


def test_base_hook_changes_nothing_and_only_shaw_needs_the_weights():
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    base = H.PositionHook()
    rotated = base.rotate(q, k)
    assert rotated[0] is q and rotated[1] is k
    assert base.score_bias(q, k) is None and base.value_term(torch.ones(1, 2, 3, 5)) is None
    needs = {type(h).__name__: h.needs_weights for h in (base, H.ShawPositions(4), H.T5Bias(2))}
    needs.update(ALiBi=H.ALiBi(2).needs_weights, RoPE=H.RoPE(4).needs_weights)
    assert needs == dict(
        PositionHook=False, ShawPositions=True, T5Bias=False, ALiBi=False, RoPE=False
    )


def test_shaw_positions_tables_and_their_initialisation():
    """Two tables [2K+1, d] (K = 16 by default), N(0, init_std^2) with init_std 0.02."""
    torch.manual_seed(0)
    hook = H.ShawPositions(64)
    assert hook.rel_k.shape == hook.rel_v.shape == (33, 64)
    assert H.ShawPositions(4, max_distance=3).rel_k.shape == (7, 4)
    big = H.ShawPositions(1000, max_distance=16, init_std=0.5)
    for table, std in ((hook.rel_k, 0.02), (hook.rel_v, 0.02), (big.rel_k, 0.5), (big.rel_v, 0.5)):
        assert abs(table.detach().std().item() / std - 1) < 0.05  # >= 2112 draws
    assert not torch.equal(hook.rel_k, hook.rel_v)  # two tables, drawn apart
    with pytest.raises(ValueError, match="^ShawPositions: head_dim must be a positive int, got 0"):
        H.ShawPositions(0)


def test_shaw_positions_terms_for_fewer_queries_than_keys():
    """score_bias and value_term are eqs. (8.1)-(8.2) with the queries at the last T of S keys."""
    torch.manual_seed(1)
    hook = H.ShawPositions(4, max_distance=2, init_std=1.0)
    q, k = torch.randn(2, 3, 2, 4), torch.randn(2, 3, 5, 4)
    w = torch.softmax(torch.randn(2, 3, 2, 5), -1)
    bias, term = hook.score_bias(q, k), hook.value_term(w)
    for i in range(2):
        for j in range(5):
            row = max(-2, min(2, j - (3 + i))) + 2  # query i sits at position 3 + i
            torch.testing.assert_close(bias[..., i, j], q[..., i, :] @ hook.rel_k[row] / 2.0)
    expected = torch.zeros(2, 3, 2, 4)
    for i in range(2):
        for j in range(5):
            expected[..., i, :] += w[..., i, j, None] * hook.rel_v[max(-2, min(2, j - 3 - i)) + 2]
    torch.testing.assert_close(term, expected)


def test_t5_bias_hook_defaults_and_options():
    """A zero table [32 buckets, h] at the start, T5's causal buckets up to distance 128."""
    hook = H.T5Bias(3)
    assert hook.table.shape == (32, 3) and torch.equal(hook.table, torch.zeros(32, 3))
    assert hook.max_distance == 128
    custom = H.T5Bias(2, num_buckets=8, max_distance=20)
    assert custom.table.shape == (8, 2) and custom.max_distance == 20
    with torch.no_grad():
        custom.table.copy_(torch.arange(16.0).view(8, 2))
    q, k = torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 30, 4)
    buckets = R.t5_relative_position_bucket(
        R.relative_positions(3, 30), bidirectional=False, num_buckets=8, max_distance=20
    )
    torch.testing.assert_close(custom.score_bias(q, k), custom.table[buckets].permute(2, 0, 1))
    with pytest.raises(ValueError, match="^T5Bias: num_buckets must be a positive int, got 0"):
        H.T5Bias(2, num_buckets=0)


def test_alibi_hook_slopes_are_a_buffer_not_a_parameter():
    hook = H.ALiBi(4)
    torch.testing.assert_close(hook.slopes, R.alibi_slopes(4), rtol=0, atol=0)
    assert list(hook.parameters()) == [] and hook.state_dict() == {}  # not saved: recomputed
    q, k = torch.zeros(1, 4, 2, 8, dtype=torch.float64), torch.zeros(1, 4, 6, 8)
    bias = hook.score_bias(q, k)
    assert bias.dtype == torch.float64
    torch.testing.assert_close(bias, R.alibi_bias(R.alibi_slopes(4), 2, 6).double())


@pytest.mark.parametrize(("base", "factor"), [(10000.0, 1.0), (100.0, 1.0), (10000.0, 4.0)])
def test_rope_hook_base_and_scaling_factor(base, factor):
    """The hook rotates with its own base and factor: pair (j, j + d/2) of position p turns
    by (p / factor) * base^(-2j/d), written out here."""
    head_dim = 6
    hook = H.RoPE(head_dim, base=base, scaling_factor=factor)
    assert (hook.head_dim, hook.base, hook.scaling_factor) == (head_dim, base, factor)
    q = torch.randn(1, 1, 4, head_dim, dtype=torch.float64, generator=_gen(2))
    k = torch.randn(1, 1, 4, head_dim, dtype=torch.float64, generator=_gen(3))
    rq, rk = hook.rotate(q, k)
    assert rq.dtype == torch.float64
    for x, rx in ((q, rq), (k, rk)):
        for p in range(4):
            for j in range(head_dim // 2):
                angle = p / factor * base ** (-2 * j / head_dim)
                a, b = x[0, 0, p, j].item(), x[0, 0, p, j + head_dim // 2].item()
                assert rx[0, 0, p, j].item() == pytest.approx(
                    a * math.cos(angle) - b * math.sin(angle), abs=1e-12
                )
                assert rx[0, 0, p, j + head_dim // 2].item() == pytest.approx(
                    a * math.sin(angle) + b * math.cos(angle), abs=1e-12
                )
    assert H.RoPE(8).base == 10000.0 and H.RoPE(8).scaling_factor == 1.0
    with pytest.raises(ValueError, match="^RoPE: base must be > 1"):
        H.RoPE(8, base=1.0)


def test_position_hook_builds_each_method_with_its_options():
    assert all(H.position_hook(m, 4, 2) is None for m in ("none", "learned", "sinusoidal"))
    shaw = H.position_hook("shaw", 4, 2)
    assert type(shaw) is H.ShawPositions and shaw.rel_k.shape == (33, 4)
    assert H.position_hook("shaw", 6, 2, shaw_max_distance=3).rel_k.shape == (7, 6)
    t5 = H.position_hook("t5", 4, 3)
    assert type(t5) is H.T5Bias and t5.table.shape == (32, 3) and t5.max_distance == 128
    t5 = H.position_hook("t5", 4, 3, t5_num_buckets=8, t5_max_distance=20)
    assert t5.table.shape == (8, 3) and t5.max_distance == 20
    alibi = H.position_hook("alibi", 4, 5)
    assert type(alibi) is H.ALiBi and alibi.slopes.shape == (5,)
    rope = H.position_hook("rope", 6, 2)
    assert type(rope) is H.RoPE and rope.head_dim == 6
    assert H.POSITION_METHODS == ("none", "learned", "sinusoidal", "shaw", "t5", "alibi", "rope")


def test_rope_scaling_restores_on_error_and_checks_its_factor():
    model = lm.PositionalLM(
        TransformerConfig(d_model=16, num_heads=2, num_layers=2, max_len=8, activation="gelu"),
        11,
        "rope",
    )
    hooks = [m for m in model.modules() if isinstance(m, H.RoPE)]
    hooks[0].scaling_factor = 3.0  # each hook gets its own factor back
    with pytest.raises(KeyError), H.rope_scaling(model, 1.0) as changed:
        assert changed == 2 and [h.scaling_factor for h in hooks] == [1.0, 1.0]
        raise KeyError("inside the block")
    assert [h.scaling_factor for h in hooks] == [3.0, 1.0]
    for bad in (0.5, float("nan")):
        with pytest.raises(ValueError, match=r"^rope_scaling: scaling_factor must be >= 1, got"):
            with H.rope_scaling(model, bad):
                pass
    assert [h.scaling_factor for h in hooks] == [3.0, 1.0]


@pytest.mark.parametrize("method", ["shaw", "t5", "alibi", "rope"])
def test_hooks_take_heads_of_any_leading_shape(method):
    """Like the functions of Chapter 8 they call ([..., T, d]), the hooks read T and S from
    the last two axes: heads without a batch axis, [h, T, d], give the batched result's rows."""
    torch.manual_seed(0)
    hook = H.position_hook(method, 6, 3)
    with torch.no_grad():
        for p in hook.parameters():
            p.normal_()
    q, k = torch.randn(1, 3, 2, 6), torch.randn(1, 3, 5, 6)  # 2 queries, 5 keys, d = 6
    if method == "rope":
        (q4, k4), (q3, k3) = hook.rotate(q, k), hook.rotate(q[0], k[0])
        torch.testing.assert_close((q3, k3), (q4[0], k4[0]))
        return
    batched, single = hook.score_bias(q, k), hook.score_bias(q[0], k[0])
    assert single.shape[-2:] == (2, 5)
    torch.testing.assert_close(single, batched[0] if batched.dim() == 4 else batched)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_rope_hook_on_the_gpu():
    """The positions are made on the keys' device (on a CPU-only machine there is no other)."""
    hook = H.RoPE(8)
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8)
    rq, rk = hook.rotate(q.cuda(), k.cuda())
    cq, ck = hook.rotate(q, k)
    torch.testing.assert_close((rq.cpu(), rk.cpu()), (cq, ck), rtol=1e-5, atol=1e-5)
