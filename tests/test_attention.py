"""Attention (Chapters 2-3): scores, scaled dot-product and multi-head attention.

Covers course_lib.attention; the masks are tested in test_masks.py, Chapter 2's
seq2seq models with attention in test_seq2seq.py.

Cross-checks copy weights into PyTorch's own modules and compare in float32 with
atol 1e-5.  Several tests also show that a plausible mistake (the wrong mask
convention, a missing scale) is *caught*, so the comparisons can fail.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import (
    AdditiveAttention,
    LuongAttention,
    MultiHeadAttention,
    additive_score,
    attend,
    concat_score,
    dot_score,
    general_score,
    record_attention,
    scaled_dot_product_attention,
)
from course_lib.masks import (
    causal_mask,
    check_mask,
    masked_softmax,
    padding_mask,
    to_additive_mask,
    to_torch_mask,
)

ATOL = 1e-5


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> bool:
    return a.shape == b.shape and (a - b).abs().max().item() <= atol


# Seeded, one intra-op thread (fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("seed_and_one_thread")


# ---------------------------------------------------------------------------
# The masks attention uses (tested in test_masks.py).
# ---------------------------------------------------------------------------


def test_the_masks_used_by_attention_stay_importable_from_it():
    """gat.py and chapter 11 import these two from course_lib.attention."""
    import course_lib.attention
    import course_lib.masks

    assert course_lib.attention.masked_softmax is course_lib.masks.masked_softmax
    assert course_lib.attention.causal_mask is course_lib.masks.causal_mask
    assert "masked_softmax" not in course_lib.attention.__all__


# ---------------------------------------------------------------------------
# Scaled dot-product attention vs torch.nn.functional.scaled_dot_product_attention.
# ---------------------------------------------------------------------------


def _qkv(b=2, h=3, t=5, s=7, d=8, dv=6):
    return torch.randn(b, h, t, d), torch.randn(b, h, s, d), torch.randn(b, h, s, dv)


def test_sdpa_matches_torch_without_mask():
    q, k, v = _qkv()
    assert _close(scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    # a forgotten 1/sqrt(d_k) is caught by the same comparison
    wrong = scaled_dot_product_attention(q, k, v, scale=1.0)
    assert not _close(wrong, F.scaled_dot_product_attention(q, k, v))
    assert _close(wrong, F.scaled_dot_product_attention(q, k, v, scale=1.0))


def test_sdpa_matches_torch_with_a_boolean_mask():
    q, k, v = _qkv()
    mask = torch.rand(2, 1, 5, 7) > 0.4
    mask[..., 0] = True  # no fully masked row here (tested separately)
    ours = scaled_dot_product_attention(q, k, v, mask)
    assert _close(
        ours, F.scaled_dot_product_attention(q, k, v, attn_mask=to_torch_mask(mask, "sdpa"))
    )
    # the MHA convention (True = masked out) handed to SDPA gives another answer
    assert not _close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=~mask))


def test_sdpa_matches_torch_with_an_additive_mask():
    q, k, v = _qkv()
    add = torch.randn(5, 7)  # a finite bias ...
    add[:, 3] = float("-inf")  # ... and a removed key
    assert _close(
        scaled_dot_product_attention(q, k, v, add),
        F.scaled_dot_product_attention(q, k, v, attn_mask=add),
    )
    # a boolean mask and its additive form give the same result
    mask = torch.rand(5, 7) > 0.3
    mask[:, 0] = True
    assert _close(
        scaled_dot_product_attention(q, k, v, mask),
        scaled_dot_product_attention(q, k, v, to_additive_mask(mask)),
    )


@pytest.mark.parametrize("t,s", [(5, 5), (4, 7)])
def test_sdpa_matches_torch_causal(t, s):
    q, k, v = _qkv(t=t, s=s)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert _close(scaled_dot_product_attention(q, k, v, is_causal=True), expected)
    assert _close(scaled_dot_product_attention(q, k, v, causal_mask(t, s)), expected)
    assert not _close(scaled_dot_product_attention(q, k, v), expected)


def test_sdpa_returns_the_weights_it_used():
    q, k, v = _qkv()
    mask = torch.rand(5, 7) > 0.3
    mask[:, 1] = True
    out, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert w.shape == (2, 3, 5, 7)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 5))
    assert (w[..., ~mask] == 0).all()
    assert _close(out, w @ v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5 + to_additive_mask(mask), -1)
    assert _close(w, expected)


def test_a_fully_masked_row_gives_zero_weights_and_zero_output_like_torch_sdpa():
    q, k, v = _qkv()
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[2] = False  # query 2 may see nothing
    out, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert not torch.isnan(out).any()
    assert (w[..., 2, :] == 0).all() and (out[..., 2, :] == 0).all()
    assert _close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    add = to_additive_mask(mask)
    assert (scaled_dot_product_attention(q, k, v, add)[..., 2, :] == 0).all()


def test_sdpa_errors_name_the_expected_shapes():
    q, k, v = _qkv()
    with pytest.raises(
        ValueError, match=r"key must be \[\.\.\., S, d_k=8\] with leading dims \[2, 3\]"
    ):
        scaled_dot_product_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match=r"value must be \[\.\.\., S=7, d_v\].*got \[2, 3, 6, 6\]"):
        scaled_dot_product_attention(q, k, v[:, :, :6])
    with pytest.raises(
        ValueError, match=r"mask of shape \[5, 6\] does not broadcast.*\[T=5, S=7\]"
    ):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="must be boolean .* or floating"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 7, dtype=torch.long))
    with pytest.raises(ValueError, match=r"query must be a tensor \[\.\.\., T, d\]"):
        scaled_dot_product_attention(torch.randn(3), k, v)


def test_each_mask_is_checked_once_per_call(monkeypatch):
    """The entry point checks a mask; what it calls inside (SDPA, masked_softmax) does not
    check it again. A public function called directly still checks it, once."""
    import course_lib.attention
    import course_lib.masks
    from course_lib.relative import shaw_attention

    calls = []

    def counting(where, *args, **kwargs):
        calls.append(where)
        return check_mask(where, *args, **kwargs)

    for module in (course_lib.attention, course_lib.masks):
        monkeypatch.setattr(module, "check_mask", counting)
    mha = MultiHeadAttention(8, 2)
    x, causal = torch.randn(2, 5, 8), causal_mask(5)
    q = torch.randn(2, 2, 5, 4)
    runs = {
        "teaching path": lambda: mha(x, mask=causal, need_weights=True),
        "fused path": lambda: mha(x, mask=causal),
        "sdpa": lambda: scaled_dot_product_attention(q, q, q, causal),
        "masked_softmax": lambda: masked_softmax(torch.randn(5, 5), causal),
        "shaw": lambda: shaw_attention(q, q, q, torch.randn(3, 4), mask=causal),
    }
    for name, run in runs.items():
        calls.clear()
        run()
        assert len(calls) == 1, (name, calls)  # was 3 on the teaching path, 2 in sdpa and shaw
    calls.clear()
    padding = torch.ones(2, 5, dtype=torch.bool)
    mha(x, mask=causal, key_padding_mask=padding, need_weights=True)
    assert calls == ["MultiHeadAttention"] * 2  # each of the two masks once
    with pytest.raises(ValueError, match="MultiHeadAttention: key_padding_mask must be boolean"):
        mha(x, key_padding_mask=padding.long(), need_weights=True)


# ---------------------------------------------------------------------------
# Multi-head attention vs torch.nn.MultiheadAttention (batch_first, weights copied).
# ---------------------------------------------------------------------------


def _mha_pair(e=16, h=4):
    ref = nn.MultiheadAttention(e, h, batch_first=True).eval()
    with torch.no_grad():  # non-zero biases, so a misplaced bias would show
        ref.in_proj_bias.normal_()
        ref.out_proj.bias.normal_()
    ours = MultiHeadAttention(e, h).eval()
    ours.load_state_dict(ref.state_dict())
    return ours, ref


def test_mha_parameters_have_torch_names_and_shapes():
    ours, ref = _mha_pair()
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: v.shape for k, v in ref.state_dict().items()
    }


def test_mha_matches_torch_self_attention_with_key_padding_and_causal_masks():
    ours, ref = _mha_pair()
    x = torch.randn(3, 6, 16)
    kpm = padding_mask(torch.tensor([6, 4, 2]), 6)
    causal = causal_mask(6)
    a, wa = ref(
        x,
        x,
        x,
        key_padding_mask=to_torch_mask(kpm, "mha"),
        attn_mask=to_torch_mask(causal, "mha"),
        average_attn_weights=False,
    )
    b, wb = ours(x, mask=causal, key_padding_mask=kpm, need_weights=True)
    assert _close(a, b) and _close(wa, wb)
    # our mask handed to torch without translation means the opposite
    c, _ = ref(x, x, x, key_padding_mask=kpm, attn_mask=~causal)
    assert not _close(c, b)


def test_mha_matches_torch_cross_attention_and_is_causal():
    ours, ref = _mha_pair()
    q, mem = torch.randn(2, 5, 16), torch.randn(2, 8, 16)
    kpm = padding_mask(torch.tensor([8, 3]), 8)
    a, wa = ref(q, mem, mem, key_padding_mask=~kpm)
    b, wb = ours(q, mem, mem, key_padding_mask=kpm, need_weights=True)
    assert _close(a, b) and _close(wa, wb.mean(1))  # torch averages the heads by default
    x = torch.randn(2, 5, 16)
    a, _ = ref(x, x, x, attn_mask=nn.Transformer.generate_square_subsequent_mask(5), is_causal=True)
    b, _ = ours(x, is_causal=True)
    assert _close(a, b)


def test_mha_matches_torch_with_additive_and_per_batch_masks():
    ours, ref = _mha_pair()
    x = torch.randn(2, 5, 16)
    add = torch.randn(5, 5)
    assert _close(ref(x, x, x, attn_mask=add)[0], ours(x, mask=add)[0])
    per_head = torch.rand(2, 4, 5, 5) > 0.3
    per_head[..., 0] = True
    expected = ref(x, x, x, attn_mask=to_torch_mask(per_head, "mha").flatten(0, 1))[0]
    assert _close(expected, ours(x, mask=per_head)[0])
    per_batch = torch.rand(2, 5, 5) > 0.3
    per_batch[..., 0] = True
    torch_mask = to_torch_mask(per_batch, "mha").repeat_interleave(4, dim=0)  # [B*h, T, S]
    assert _close(ref(x, x, x, attn_mask=torch_mask)[0], ours(x, mask=per_batch)[0])
    # additive mask combined with a boolean key padding mask
    kpm = padding_mask(torch.tensor([5, 3]), 5)
    assert _close(
        ref(x, x, x, attn_mask=add, key_padding_mask=to_additive_mask(kpm))[0],
        ours(x, mask=add, key_padding_mask=kpm)[0],
    )


def test_mha_fully_masked_query_outputs_the_bias_where_torch_gives_nan():
    ours, ref = _mha_pair()
    x = torch.randn(1, 3, 16)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    out, w = ours(x, mask=mask, need_weights=True)
    assert torch.equal(out[0, 1], ours.out_proj.bias.detach())
    assert (w[0, :, 1] == 0).all()
    theirs, _ = ref(x, x, x, attn_mask=to_torch_mask(mask, "mha"))
    assert torch.isnan(theirs[0, 1]).all()  # the documented difference
    assert _close(theirs[0, [0, 2]], out[0, [0, 2]])


def _both_paths(module, x, memory=None, **kwargs):
    """Output and input gradients of ``module`` through its fused path and its teaching path."""
    results = []
    for need_weights in (False, True):
        xs = [x.detach().clone().requires_grad_()]
        if memory is not None:
            xs.append(memory.detach().clone().requires_grad_())
        out, _ = module(*xs, need_weights=need_weights, **kwargs)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append((out.detach(), [t.grad for t in xs]))
    return results


def _mask_cases(b=2, t=5, s=5):
    rand = torch.rand(b, 1, t, s) > 0.4
    rand[..., 0] = True
    empty = torch.ones(t, s, dtype=torch.bool)
    empty[1] = False  # query 1 sees nothing: (3.5) on both paths
    add = torch.randn(t, s)
    add[:, 2] = float("-inf")
    return {
        "none": {},
        "causal": {"is_causal": True},
        "bool per batch": {"mask": rand},
        "bool and causal": {"mask": rand, "is_causal": True},
        "additive and padding": {
            "mask": add,
            "key_padding_mask": padding_mask(torch.tensor([s, 3]), s),
        },
        "fully masked row": {"mask": empty},
        "fully masked additive": {"mask": to_additive_mask(empty)},
    }


@pytest.mark.parametrize("case", list(_mask_cases()))
def test_the_fused_path_equals_the_teaching_path(case):
    """Without weights MHA calls torch's fused kernel; with them, eq. (3.2) as written.
    Outputs and input gradients agree for every kind of mask, fully masked rows included."""
    ours, _ = _mha_pair()
    x = torch.randn(2, 5, 16)
    (fast, fast_grads), (slow, slow_grads) = _both_paths(ours, x, **_mask_cases()[case])
    assert torch.isfinite(fast).all() and torch.isfinite(fast_grads[0]).all()
    assert _close(fast, slow) and _close(fast_grads[0], slow_grads[0])
    # the comparison can fail: the teaching path without the mask is another answer
    if case != "none":
        (plain, _), _ = _both_paths(ours, x)
        assert not _close(plain, slow)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_the_two_paths_agree_in_other_dtypes_and_cross_attention(dtype):
    ours, _ = _mha_pair()
    ours = ours.to(dtype)
    q, mem = torch.randn(2, 4, 16, dtype=dtype), torch.randn(2, 7, 16, dtype=dtype)
    add = torch.randn(4, 7)  # a float32 bias: cast to the queries' dtype on the fused path
    (fast, fast_grads), (slow, slow_grads) = _both_paths(ours, q, mem, mask=add, is_causal=True)
    atol = 1e-10 if dtype == torch.float64 else 5e-2
    assert fast.dtype == dtype and _close(fast.float(), slow.float(), atol)
    for a, b in zip(fast_grads, slow_grads, strict=True):
        assert _close(a.float(), b.float(), atol)


def test_mha_heads_are_single_head_attention_in_parallel_subspaces():
    ours, _ = _mha_pair()
    x = torch.randn(2, 5, 16)
    w_q, w_k, w_v = ours.in_proj_weight.chunk(3)
    b_q, b_k, b_v = ours.in_proj_bias.chunk(3)
    heads = []
    for r in range(4):
        rows = slice(4 * r, 4 * r + 4)
        q = x @ w_q[rows].T + b_q[rows]
        k = x @ w_k[rows].T + b_k[rows]
        v = x @ w_v[rows].T + b_v[rows]
        heads.append(scaled_dot_product_attention(q, k, v))
    expected = ours.out_proj(torch.cat(heads, -1))
    assert _close(ours(x)[0], expected)


def test_mha_dropout_acts_in_train_only():
    """Built with dropout=0.5, in eval() the module gives the same output twice and equals
    the dropout-0 module with the same weights; in train() its calls differ."""
    plain, _ = _mha_pair()
    dropped = MultiHeadAttention(16, 4, dropout=0.5)
    dropped.load_state_dict(plain.state_dict())
    dropped.eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        first, weights = dropped(x, need_weights=True)  # the teaching path, twice
        assert torch.equal(first, dropped(x, need_weights=True)[0])
        second, _ = dropped(x)  # the fused path, twice
        assert torch.equal(second, dropped(x)[0]) and _close(first, second)
        assert _close(first, plain(x)[0])
        assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 5))  # none dropped
        dropped.train()
        third, fourth = dropped(x)[0], dropped(x)[0]
    assert not _close(third, fourth) and not _close(third, first)


def test_mha_errors_name_the_expected_shapes():
    ours, _ = _mha_pair()
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"query must be \[B, T, D=16\], got \[2, 5, 8\]"):
        ours(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match=r"key must be \[B=2, S, D=16\], got \[3, 4, 16\]"):
        ours(x, torch.randn(3, 4, 16))
    with pytest.raises(ValueError, match=r"key_padding_mask must be \[B=2, S=5\], got \[2, 4\]"):
        ours(x, key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(
        ValueError, match=r"mask of shape \[4, 4\] does not broadcast.*\[2, 4, 5, 5\]"
    ):
        ours(x, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(
        ValueError, match=r"embed_dim \(10\) must be a positive multiple of num_heads \(4\)"
    ):
        MultiHeadAttention(10, 4)


def test_record_attention_keeps_each_modules_last_weights():
    model = nn.ModuleDict({"a": MultiHeadAttention(8, 2), "b": MultiHeadAttention(8, 4)})
    x = torch.randn(1, 3, 8)
    with record_attention(model) as maps:
        model["a"](x, is_causal=True)
        model["b"](x)
    assert set(maps) == {"a", "b"}
    assert maps["a"].shape == (1, 2, 3, 3) and maps["b"].shape == (1, 4, 3, 3)
    assert (maps["a"][..., 0, 1:] == 0).all()  # causal
    assert not model["a"].record and model["a"].last_weights is None


# ---------------------------------------------------------------------------
# Chapter 2: alignment scores.
# ---------------------------------------------------------------------------


def test_dot_and_general_scores():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    assert _close(dot_score(q, k), torch.einsum("btd,bsd->bts", q, k))
    assert _close(general_score(q, k, torch.eye(4)), dot_score(q, k))  # W = I is the dot score
    w = torch.randn(4, 6)
    k6 = torch.randn(2, 5, 6)
    assert _close(general_score(q, k6, w), torch.einsum("btd,de,bse->bts", q, w, k6))
    with pytest.raises(ValueError, match=r"keys must be \[B=2, S, d_k=4\], got \[2, 5, 6\]"):
        dot_score(q, k6)
    with pytest.raises(ValueError, match=r"weight must be \[d_q=4, d_k=6\], got \[6, 4\]"):
        general_score(q, k6, w.T)


def test_additive_score_is_the_network_of_each_pair():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    wq, wk, v = torch.randn(7, 4), torch.randn(7, 6), torch.randn(7)
    e = additive_score(q, k, wq, wk, v)
    assert e.shape == (2, 3, 5)
    for b, i, j in [(0, 0, 0), (1, 2, 4), (0, 1, 3)]:
        assert abs(e[b, i, j] - v @ torch.tanh(wq @ q[b, i] + wk @ k[b, j])) < ATOL
    with pytest.raises(ValueError, match=r"w_key must be \[A=7, d_k=6\], got \[7, 4\]"):
        additive_score(q, k, wq, wq, v)


def test_luong_concat_is_exactly_bahdanau_additive_with_the_matrix_split():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    w, v = torch.randn(7, 10), torch.randn(7)
    assert _close(concat_score(q, k, w, v), additive_score(q, k, w[:, :4], w[:, 4:], v))
    with pytest.raises(ValueError, match=r"weight must be \[A, d_q \+ d_k=10\], got \[7, 9\]"):
        concat_score(q, k, w[:, :9], v)


def test_attend_gives_a_convex_combination_of_the_values():
    scores, values = torch.randn(2, 3, 5), torch.randn(2, 5, 4)
    c, w = attend(scores, values)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3)) and (w >= 0).all()
    assert _close(c, torch.softmax(scores, -1) @ values)
    with pytest.raises(ValueError, match=r"values must be \[B=2, S=5, d_v\], got \[2, 4, 4\]"):
        attend(scores, values[:, :4])


def _luong_score_by_hand(att: LuongAttention, s_i: torch.Tensor, h_j: torch.Tensor) -> float:
    """One score of eqs. (2.5)-(2.7) for one pair, as explicit sums over the coordinates."""
    s_i, h_j = s_i.tolist(), h_j.tolist()
    if att.kind == "dot":  # (2.5)  sum_a s_ia h_ja
        return sum(a * b for a, b in zip(s_i, h_j, strict=True))
    w = att.weight.tolist()
    if att.kind == "general":  # (2.6)  sum_a sum_b s_ia W_ab h_jb
        return sum(s_i[a] * w[a][b] * h_j[b] for a in range(len(s_i)) for b in range(len(h_j)))
    pair = s_i + h_j  # (2.7)  sum_r v_r tanh(sum_c W_rc [s_i; h_j]_c)
    v = att.v.tolist()
    return sum(
        v[r] * math.tanh(sum(wc * pc for wc, pc in zip(w[r], pair, strict=True)))
        for r in range(len(v))
    )


@pytest.mark.parametrize("kind", ["dot", "general", "concat"])
def test_luong_attention_modules(kind):
    """Scores, weights and context against a hand computation, pair by pair."""
    q_size = 8 if kind == "dot" else 5  # general and concat take queries of another width
    att = LuongAttention(q_size, 8, kind)
    n_params = sum(p.numel() for p in att.parameters())
    assert n_params == {"dot": 0, "general": 5 * 8, "concat": 8 * (5 + 8) + 8}[kind]
    q, k, v = torch.randn(2, 3, q_size), torch.randn(2, 4, 8), torch.randn(2, 4, 6)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[1, 2, 1:] = False  # one query of the second sequence may see key 0 only
    with torch.no_grad():
        scores = att.score(q, k)
        c, w = att(q, k, v, mask)
    assert c.shape == (2, 3, 6) and w.shape == (2, 3, 4)
    for b in range(2):
        for i in range(3):
            e = [_luong_score_by_hand(att, q[b, i], k[b, j]) for j in range(4)]
            for j in range(4):
                assert abs(scores[b, i, j].item() - e[j]) < ATOL, (b, i, j)
            allowed = [j for j in range(4) if mask[b, i, j]]
            top = max(e[j] for j in allowed)
            total = sum(math.exp(e[j] - top) for j in allowed)
            # (2.2) softmax over the allowed keys, zero elsewhere
            alpha = [math.exp(e[j] - top) / total if j in allowed else 0.0 for j in range(4)]
            for j in range(4):
                assert abs(w[b, i, j].item() - alpha[j]) < ATOL, (b, i, j)
            context = sum(alpha[j] * v[b, j] for j in range(4))  # (2.3) sum_j alpha_ij h_j
            assert _close(c[b, i], context)


def test_luong_and_additive_attention_reject_bad_configurations():
    with pytest.raises(ValueError, match="score must be one of"):
        LuongAttention(4, 4, "bilinear")
    with pytest.raises(ValueError, match="dot score needs query_size == key_size, got 4 and 6"):
        LuongAttention(4, 6, "dot")
    att = AdditiveAttention(4, 6, 5)
    c, w = att(torch.randn(2, 1, 4), torch.randn(2, 3, 6))
    assert c.shape == (2, 1, 6) and w.shape == (2, 1, 3)


# ---------------------------------------------------------------------------
# Chapter 6: cosine attention, eq. (6.6)
# ---------------------------------------------------------------------------


def test_cosine_attention_matches_torch_on_normalised_queries_and_keys():
    from course_lib.attention import cosine_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) * 7 for _ in range(3))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    ours, w = cosine_attention(q, k, v, 4.0, causal, return_weights=True)
    ref = F.scaled_dot_product_attention(
        F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, attn_mask=causal, scale=4.0
    )
    torch.testing.assert_close(ours, ref)
    # scores bounded by the scale whatever the norms: weight ratios at most exp(2 * scale)
    ratio = w[..., :, :1].expand_as(w)[causal.expand_as(w)] / w[causal.expand_as(w)]
    assert ratio.max() <= math.exp(8.0) * (1 + 1e-5) and ratio.min() >= math.exp(-8.0) * (1 - 1e-5)


def test_cosine_attention_scale_gets_a_gradient():
    from course_lib.attention import cosine_attention

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(4, 6, generator=g, dtype=torch.float64) for _ in range(3))
    log_scale = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda s: cosine_attention(q, k, v, s.exp()), (log_scale,), eps=1e-6
    )


def test_cosine_attention_errors_are_clear():
    from course_lib.attention import cosine_attention

    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="scale must be > 0"):
        cosine_attention(x, x, x, 0.0)
    with pytest.raises(ValueError, match="0-dim tensor"):
        cosine_attention(x, x, x, torch.ones(2))


# ---------------------------------------------------------------------------
# Constructors, defaults and initialisation (written for the mutants that survived
# the tests above: `mutmut run "course_lib.attention*"`, README "Mutation testing").
# ---------------------------------------------------------------------------


def test_additive_attention_defaults_its_hidden_size_and_scales_v():
    """A = key_size unless given; v ~ U(-1, 1) / sqrt(A), as Bahdanau's code initialises it."""
    assert AdditiveAttention(4, 6).v.shape == (6,)
    assert AdditiveAttention(4, 6).w_query.weight.shape == (6, 4)
    v = AdditiveAttention(4, 6, 400).v.detach()
    bound = 1 / math.sqrt(400)
    assert v.abs().max() <= bound and v.max() > 0.9 * bound and v.min() < -0.9 * bound


def test_luong_attention_parameters_have_the_documented_shapes():
    general = LuongAttention(5, 8)  # the general score by default
    assert general.kind == "general" and general.weight.shape == (5, 8)  # W [d_q, d_k]
    concat = LuongAttention(5, 8, "concat", attn_size=3)
    assert concat.weight.shape == (3, 13) and concat.v.shape == (3,)
    v = LuongAttention(5, 8, "concat", attn_size=400).v.detach()
    bound = 1 / math.sqrt(400)
    assert v.abs().max() <= bound and v.max() > 0.9 * bound and v.min() < -0.9 * bound
    assert repr(general).endswith("(score='general')")


def test_mha_starts_from_torchs_initialisation():
    """Xavier-uniform in_proj_weight, zero biases, nothing recorded; the repr names the sizes."""
    att = MultiHeadAttention(64, 4, dropout=0.1)
    bound = math.sqrt(6 / (64 + 3 * 64))  # xavier_uniform_ on [3D, D]
    w = att.in_proj_weight.detach()
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert (att.in_proj_bias == 0).all() and (att.out_proj.bias == 0).all()
    assert att.last_weights is None
    assert "embed_dim=64, num_heads=4, dropout=0.1" in repr(att)


def test_mha_without_bias_matches_torch():
    ref = nn.MultiheadAttention(8, 2, bias=False, batch_first=True).eval()
    ours = MultiHeadAttention(8, 2, bias=False)
    assert ours.in_proj_bias is None and ours.out_proj.bias is None
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 8)
    assert _close(ours(x)[0], ref(x, x, x, need_weights=False)[0])


def test_mha_sizes_at_the_edges():
    MultiHeadAttention(1, 1)  # one head of width one is allowed
    for embed_dim, num_heads in [(0, 1), (4, 0), (-4, -2), (6, 4)]:
        with pytest.raises(ValueError, match="must be a positive multiple"):
            MultiHeadAttention(embed_dim, num_heads)


def test_score_errors_name_the_score_function():
    q, k6 = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match=r"^dot_score: keys must be"):
        dot_score(q, k6)
    with pytest.raises(ValueError, match=r"^general_score: keys must be"):
        general_score(q, torch.randn(3, 5, 6), torch.randn(4, 6))
    with pytest.raises(ValueError, match=r"^additive_score: query must be"):
        additive_score(torch.randn(3, 4), k6, torch.randn(7, 4), torch.randn(7, 6), torch.randn(7))
    with pytest.raises(ValueError, match=r"^concat_score: query must be"):
        concat_score(torch.randn(3, 4), k6, torch.randn(7, 10), torch.randn(7))


def test_cosine_attention_small_scales_and_short_vectors():
    """Any scale > 0 is allowed, also below 1 and as a tensor; a zero tensor is refused.
    ``eps`` floors the norms: vectors shorter than it are not stretched to unit length."""
    from course_lib.attention import cosine_attention

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 5, 8, generator=g) for _ in range(3))
    out = cosine_attention(q, k, v, 0.5)
    assert isinstance(out, torch.Tensor)  # the weights only when asked for
    ref = F.scaled_dot_product_attention(
        F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, scale=0.5
    )
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(cosine_attention(q, k, v, torch.tensor(0.5)), ref)
    # short vectors (norms ~0.03) are still normalised with the default eps ...
    torch.testing.assert_close(cosine_attention(q / 100, k / 100, v, 0.5), ref)
    with pytest.raises(ValueError, match="scale must be > 0"):
        cosine_attention(q, k, v, torch.tensor(0.0))
    # ... but with eps = 1, a query or key of norm 1e-2 is divided by 1, not by its norm:
    # its scores shrink to ~0 and its weights become uniform
    _, w = cosine_attention(q / 100, k, v, 4.0, eps=1.0, return_weights=True)
    torch.testing.assert_close(w, torch.full_like(w, 1 / 5), atol=0.05, rtol=0)
    _, w = cosine_attention(q, k / 100, v, 4.0, eps=1.0, return_weights=True)
    torch.testing.assert_close(w, torch.full_like(w, 1 / 5), atol=0.05, rtol=0)


def test_sdpa_names_the_argument_that_is_not_a_matrix():
    q, k, v = _qkv()
    where = r"^scaled_dot_product_attention: "
    with pytest.raises(
        ValueError, match=where + r"query must be a tensor \[\.\.\., T, d\], got \[\]$"
    ):
        scaled_dot_product_attention([[1.0]], k, v)  # not a tensor: no shape
    with pytest.raises(
        ValueError, match=where + r"key must be a tensor \[\.\.\., S, d\], got \[8\]$"
    ):
        scaled_dot_product_attention(q, torch.randn(8), v)
    with pytest.raises(
        ValueError, match=where + r"value must be a tensor \[\.\.\., S, d\], got \[6\]$"
    ):
        scaled_dot_product_attention(q, k, torch.randn(6))
    with pytest.raises(ValueError, match=where + r"key must be \[\.\.\., S, d_k=8\]"):
        scaled_dot_product_attention(q, k[..., :4], v)


def test_sdpa_dropout_drops_the_asked_fraction_of_weights():
    q, k, v = _qkv(b=4, h=4, t=25, s=25)  # 10,000 weights
    _, w = scaled_dot_product_attention(q, k, v, dropout_p=0.2, return_weights=True)
    dropped = (w == 0).float().mean().item()
    assert 0.15 < dropped < 0.25  # Binomial(10_000, 0.2): sd 0.004
    kept = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, -1)
    assert _close(w[w != 0], kept[w != 0] / 0.8)  # the survivors are scaled by 1 / (1 - p)


@pytest.mark.parametrize("need_weights", [True, False])
def test_the_causal_mask_is_built_on_the_queries_device(monkeypatch, need_weights):
    """Both paths ask for the causal mask on the queries' device (checked by a spy: on
    the CPU every device is the same one)."""
    import course_lib.attention as A

    asked = []

    def spy(t, s=None, *, device=None):
        asked.append(device)
        return causal_mask(t, s, device=device)

    monkeypatch.setattr(A, "causal_mask", spy)
    att = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    att(x, mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True, need_weights=need_weights)
    assert asked == [x.device]


def test_additive_attention_uses_its_values_and_mask():
    att = AdditiveAttention(4, 6, 5)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 7, 6), torch.randn(2, 7, 2)
    mask = torch.rand(2, 3, 7) > 0.5
    mask[..., 0] = True
    with torch.no_grad():
        e = additive_score(q, k, att.w_query.weight, att.w_key.weight, att.v)
        c, w = att(q, k, v, mask)
        c_keys, _ = att(q, k)  # values default to the keys
    alpha = torch.softmax(e.masked_fill(~mask, float("-inf")), -1)
    assert _close(w, alpha) and (w[~mask] == 0).all()
    assert _close(c, alpha @ v)
    assert _close(c_keys, torch.softmax(e, -1) @ k)


def test_the_fused_path_takes_an_additive_mask_of_another_dtype():
    """PyTorch's kernel refuses a float64 bias for bfloat16 queries: the fused path
    casts an additive mask to the queries' dtype first."""
    att = MultiHeadAttention(8, 2).to(torch.bfloat16)
    x = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    bias = torch.randn(3, 3, dtype=torch.float64)
    fused, _ = att(x, mask=bias)
    taught, _ = att(x, mask=bias.to(torch.bfloat16), need_weights=True)
    assert fused.dtype == torch.bfloat16
    torch.testing.assert_close(fused, taught, atol=0.05, rtol=0.05)


def test_mha_attends_to_the_values_it_is_given():
    """Key and value different tensors (both default to the query): torch agrees, and
    the errors name the module."""
    ours, ref = _mha_pair()
    q, k, v = torch.randn(2, 3, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    with torch.no_grad():
        assert _close(ours(q, k, v)[0], ref(q, k, v, need_weights=False)[0])
        assert _close(ours(q, k)[0], ref(q, k, k, need_weights=False)[0])
    with pytest.raises(ValueError, match=r"^MultiHeadAttention: value must be \[B=2, S=5, D=16\]"):
        ours(q, k, v[:, :4])


def test_the_key_bias_matters_only_once_the_keys_are_rotated():
    """q . (k_j + b) = q . k_j + q . b: a key bias shifts every score of a query by the
    same amount, which the softmax ignores; after RoPE rotates k_j + b by an angle that
    depends on j, it no longer does. So the key bias is checked with RoPE."""
    from course_lib.position_hooks import RoPE

    x = torch.randn(2, 5, 8)
    outputs = {}
    for rope in (False, True):
        att = MultiHeadAttention(8, 2, position=RoPE(4) if rope else None).eval()
        with torch.no_grad():
            att.in_proj_bias.normal_()
            with_bias = att(x)[0]
            att.in_proj_bias[8:16] = 0  # the keys' bias
            outputs[rope] = (with_bias, att(x)[0])
    assert _close(*outputs[False])
    assert not _close(*outputs[True])


def test_a_position_bias_keeps_the_mask():
    """ALiBi's bias is merged with the mask, not put in its place."""
    from course_lib.position_hooks import ALiBi

    att = MultiHeadAttention(8, 2, position=ALiBi(2)).eval()
    mask = causal_mask(4)
    _, w = att(torch.randn(2, 4, 8), mask=mask, need_weights=True)
    assert (w[..., ~mask] == 0).all()


def test_mha_defaults_to_no_dropout_and_returns_weights_only_when_asked():
    att = MultiHeadAttention(8, 2)  # train() mode
    x = torch.randn(2, 3, 8)
    assert att.dropout == 0.0
    assert torch.equal(att(x)[0], att.eval()(x)[0])
    with record_attention(att) as maps:
        out, weights = att(x)  # the weights are formed for the record ...
    assert weights is None and maps[""].shape == (2, 2, 3, 3)  # ... but not returned


def test_fused_attention_under_vmap_on_the_cpu_folds_the_members_and_keeps_dropout(monkeypatch):
    """Inside ``Stacked`` (vmap, CPU, no mask) the fast path hands all members to
    ``ensemble.folded_attention`` in one call (the speed path of Chapter 10), with the
    dropout rate it was given: with dropout the members' outputs change, without it they
    are the plain kernel's."""
    from course_lib import attention as A
    from course_lib import ensemble

    calls = []
    real = ensemble.folded_attention

    def spy(*args):
        calls.append(args[3:])
        return real(*args)

    monkeypatch.setattr(ensemble, "folded_attention", spy)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 2, 4, 8, generator=g) for _ in range(3))  # [K, B, h, T, d]

    def run(p):
        return torch.func.vmap(
            lambda a, b, c: A._fused_attention(a, b, c, None, True, p), randomness="different"
        )(q, k, v)

    plain = run(0.0)
    assert calls == [(True, 0.0)], "_fused_attention: vmap on the CPU must fold the members"
    torch.testing.assert_close(plain, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.manual_seed(0)
    dropped = run(0.5)
    assert calls[-1] == (True, 0.5) and not torch.allclose(dropped, plain)
