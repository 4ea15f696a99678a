"""Chapter 11: the GPT from the library's blocks, matched to GPT-2; sampling; checkpoints; LoRA."""

import copy
import math
import pickle
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from transformers import GPT2Config, GPT2Model

from course_lib import gpt, lm, params
from course_lib.config import TransformerConfig
from tests.conftest import default_device


def small_gpt(seed=0):
    torch.manual_seed(seed)
    config = TransformerConfig(d_model=32, num_heads=4, num_layers=2, max_len=16, activation="gelu")
    return gpt.GPT(config, 50).eval()


def _gpt2_config(**extra) -> GPT2Config:
    """The transformers config of small_gpt's shape (no dropout), plus ``extra``."""
    return GPT2Config(
        vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4,
        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **extra,
    )  # fmt: skip


def test_blocks_match_gpt2():
    cfg = _gpt2_config(
        layer_norm_epsilon=1e-5,
        bos_token_id=None,
        eos_token_id=None,
        attn_implementation="eager",
    )
    torch.manual_seed(1)
    hf = GPT2Model(cfg).eval()
    with torch.no_grad():  # non-trivial layer norms and biases
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = gpt.load_gpt2_weights(small_gpt(), hf.state_dict())
    tokens = torch.randint(50, (3, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf(tokens).last_hidden_state
        got = ours.hidden_states(tokens)
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    # and a different model (other weights) does not match
    with torch.no_grad():
        assert (small_gpt(seed=5).hidden_states(tokens) - expected).abs().max() > 1e-2


def test_causal_no_peeking():
    model = small_gpt()
    x = torch.randint(50, (1, 10))
    y = x.clone()
    y[0, 6:] = (y[0, 6:] + 1) % 50  # change the future only
    with torch.no_grad():
        a, b = model(x), model(y)
    assert torch.allclose(a[0, :6], b[0, :6], atol=1e-6)
    assert not torch.allclose(a[0, 6:], b[0, 6:], atol=1e-3)


def test_sampling_is_seeded_and_respects_top_k():
    model = small_gpt()
    prompt = torch.tensor([1, 2, 3])
    a = gpt.sample(model, prompt, 20, temperature=1.0, seed=3)
    b = gpt.sample(model, prompt, 20, temperature=1.0, seed=3)
    c = gpt.sample(model, prompt, 20, temperature=1.0, seed=4)
    assert a.shape == (23,) and torch.equal(a[:3], prompt)
    assert torch.equal(a, b) and not torch.equal(a, c)
    greedy = gpt.sample(model, prompt, 5, temperature=0)
    assert torch.equal(gpt.sample(model, prompt, 5, top_k=1, seed=9), greedy)
    with pytest.raises(ValueError, match="temperature"):
        gpt.sample(model, prompt, 1, temperature=-1)


def test_checkpoint_roundtrip(tmp_path):
    model = small_gpt()
    gpt.save_checkpoint(model, tmp_path / "m.pt", step=7)
    loaded, extra = gpt.load_checkpoint(tmp_path / "m.pt")
    x = torch.randint(50, (2, 8))
    assert extra == {"step": 7}
    assert loaded.config == model.config and loaded.vocab_size == model.vocab_size == 50
    with torch.no_grad():
        assert torch.equal(model(x), loaded.eval()(x))


def test_lora_freezes_base_and_merges():
    model = small_gpt()
    total = params.count_parameters(model)
    x = torch.randint(50, (2, 12))
    with torch.no_grad():
        before = model(x)
    gpt.add_lora(model, r=2, alpha=4.0)
    d, f, r = 32, 128, 2
    per_layer = r * (d + d) + r * (d + f) + r * (f + d)  # out_proj, linear1, linear2
    assert params.count_parameters(model, trainable=True) == 2 * per_layer
    assert params.count_parameters(model) == total + 2 * per_layer
    with torch.no_grad():
        assert torch.equal(model(x), before)  # B = 0 at the start
        for m in model.modules():
            if isinstance(m, gpt.LoRALinear):
                m.lora_B.normal_()
        unmerged = model(x)
    assert (unmerged - before).abs().max() > 1e-2
    gpt.merge_lora(model)
    assert not any(isinstance(m, gpt.LoRALinear) for m in model.modules())
    assert params.count_parameters(model) == total
    with torch.no_grad():
        assert torch.allclose(model(x), unmerged, atol=1e-5)


def test_qv_lora_on_the_fused_projection():
    model = small_gpt()
    total = params.count_parameters(model)
    x = torch.randint(50, (2, 12))
    with torch.no_grad():
        before = model(x)
    w0 = {n: m.in_proj_weight.clone() for n, m in model.named_modules() if hasattr(m, "out_proj")}
    gpt.add_qv_lora(model, r=2, alpha=4.0)
    d, r = 32, 2
    assert params.count_parameters(model, trainable=True) == 2 * 2 * (
        2 * r * d
    )  # 2 blocks, q and v
    with torch.no_grad():
        assert torch.equal(model(x), before)  # B = 0: the model is unchanged
    copy.deepcopy(model)  # a parametrized model can be copied (the chapter copies it)
    attn = model.blocks.layers[0].self_attn
    lora = attn.parametrizations.in_proj_weight[0]
    with torch.no_grad():
        for s in "qv":
            lora.lora_B[s].normal_()
        # the same update as an explicit LoRALinear on W_Q and on W_V, and none on W_K
        u = torch.randn(5, d)
        wq, wk, wv = w0["blocks.layers.0.self_attn"].chunk(3)
        bq, bk, bv = attn.in_proj_bias.chunk(3)
        fused = F.linear(u, attn.in_proj_weight, attn.in_proj_bias).chunk(3, -1)
        for s, w, b, out in (("q", wq, bq, fused[0]), ("v", wv, bv, fused[2])):
            explicit = gpt.LoRALinear(nn.Linear(d, d), r=r, alpha=4.0)
            explicit.base.weight.copy_(w)
            explicit.base.bias.copy_(b)
            explicit.lora_A.copy_(lora.lora_A[s])
            explicit.lora_B.copy_(lora.lora_B[s])
            assert torch.allclose(explicit(u), out, atol=1e-5)
        assert torch.equal(fused[1], F.linear(u, wk, bk))
        unmerged = model(x)
    assert (unmerged - before).abs().max() > 1e-2
    gpt.merge_lora(model)
    assert params.count_parameters(model) == total
    assert not any(isinstance(m, gpt.SliceLoRA) for m in model.modules())
    with torch.no_grad():
        assert torch.allclose(model(x), unmerged, atol=1e-5)


def test_slice_lora_defaults_and_device_follow_lora_linear_and_the_weight():
    """SliceLoRA's defaults are LoRALinear's and add_qv_lora's (r=4, alpha=8), and its
    factors are made on the weight's device even when torch's default device is elsewhere."""
    lora = gpt.SliceLoRA(torch.zeros(3 * 5, 5))
    ref = gpt.LoRALinear(torch.nn.Linear(5, 5))
    assert (lora.r, lora.scale) == (ref.lora_A.shape[0], ref.scale) == (4, 2.0)
    assert lora.lora_A["q"].shape == (4, 5) and lora.lora_B["v"].shape == (5, 4)
    weight = torch.zeros(3 * 4, 4, dtype=torch.float64)
    with default_device("meta"):
        lora = gpt.SliceLoRA(weight, r=2)
    for p in lora.parameters():
        assert (p.device, p.dtype) == (weight.device, weight.dtype), "SliceLoRA: factor device"


def test_slice_lora_scale_is_alpha_over_r():
    d, r, alpha = 4, 3, 6.0
    lora = gpt.SliceLoRA(torch.zeros(3 * d, d), r=r, alpha=alpha)
    with torch.no_grad():
        for s in "qv":
            lora.lora_A[s].fill_(1.0)
            lora.lora_B[s].fill_(1.0)
    delta = lora(torch.zeros(3 * d, d))  # (alpha / r) * (B A), B A = r everywhere: alpha
    expected = torch.cat([torch.full((d, d), alpha), torch.zeros(d, d), torch.full((d, d), alpha)])
    assert torch.equal(delta, expected)
    with pytest.raises(ValueError, match="fused"):
        gpt.SliceLoRA(torch.zeros(5, 4))
    with pytest.raises(ValueError, match="slices"):
        gpt.SliceLoRA(torch.zeros(12, 4), slices=("x",))


def test_qv_lora_trains_only_the_factors():
    model = small_gpt()
    frozen = {n: p.clone() for n, p in model.named_parameters()}
    gpt.add_qv_lora(model)
    data = torch.arange(400) % 7
    lm.train_lm(model, data, 5, block=12, batch_size=4, lr=1e-2, progress=False)
    gpt.merge_lora(model)
    moved = [n for n, p in model.named_parameters() if not torch.equal(p, frozen[n])]
    assert moved and all(n.endswith("in_proj_weight") for n in moved)
    w = model.blocks.layers[0].self_attn.in_proj_weight.detach()
    w_old = frozen["blocks.layers.0.self_attn.in_proj_weight"]
    assert torch.equal(w[32:64], w_old[32:64])  # the key slice never moved


def test_training_lowers_loss():
    torch.manual_seed(0)
    data = torch.arange(400) % 7  # a periodic sequence: easy to predict
    model = gpt.GPT(
        TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=16, activation="gelu"), 7
    )
    before, _ = gpt.evaluate(model, data, block=16, num_chars=256)
    lm.train_lm(model, data, 60, block=16, batch_size=8, lr=1e-2, progress=False)
    after, ppl = gpt.evaluate(model, data, block=16, num_chars=256)
    assert after < 0.5 * before and ppl == pytest.approx(torch.tensor(after).exp().item())


def test_add_lora_without_a_match_leaves_the_model_trainable():
    model = small_gpt()
    with pytest.raises(ValueError, match="^add_lora: no nn.Linear named.*linear1"):  # lists them
        gpt.add_lora(model, targets=("q_proj",))
    assert all(p.requires_grad for p in model.parameters())
    assert not any(isinstance(m, gpt.LoRALinear) for m in model.modules())


def test_error_messages():  # the vocabulary's and batches' are in test_lm.py
    model = small_gpt()  # max_len=16
    with pytest.raises(ValueError, match="max_len=16"):
        gpt.evaluate(model, torch.arange(200) % 50, block=32)


def test_adapters_start_as_identity_and_sit_before_the_residual():
    model = small_gpt()  # d_model 32, 2 layers
    total = params.count_parameters(model)
    reference = copy.deepcopy(model)
    x = torch.randint(50, (2, 12))
    with torch.no_grad():
        before = model(x)
    gpt.add_adapters(model, bottleneck=3)
    d, m = 32, 3
    per_adapter = 2 * d * m + m + d  # W_down, b_down, W_up, b_up
    assert params.count_parameters(model, trainable=True) == 2 * 2 * per_adapter  # 2 per block
    assert params.count_parameters(model) == total + 4 * per_adapter
    assert all(
        p.requires_grad == (".down." in n or ".up." in n) for n, p in model.named_parameters()
    )
    with torch.no_grad():
        assert torch.equal(model(x), before)  # W_up = 0: the pretrained model, exactly
        for a in model.modules():
            if isinstance(a, gpt.BottleneckAdapter):
                a.up.weight.normal_()
                a.up.bias.normal_()
        # By hand, block 0 (pre-norm, (4.3)) with an adapter (11.5) on each sub-layer's
        # output, before its residual sum, using the unadapted reference's sub-layers.
        block, ref = model.blocks.layers[0], reference.blocks.layers[0]
        e = reference.embed(x)
        attn = block.self_attn.out_proj
        h = ref.self_attn(ref.norm1(e), is_causal=True)[0]
        y = e + h + attn.up(F.gelu(attn.down(h)))
        ff = block.ff.linear2
        h = ref.ff(ref.norm2(y))
        expected = y + h + ff.up(F.gelu(ff.down(h)))
        got = block(e, is_causal=True)
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    assert (got - ref(e, is_causal=True)).abs().max() > 1e-2  # the adapters do something


def test_adapters_bad_input():
    with pytest.raises(ValueError, match="bottleneck must be >= 1"):
        gpt.BottleneckAdapter(torch.nn.Linear(4, 4), bottleneck=0)
    model = small_gpt()
    with pytest.raises(ValueError, match="add_adapters: no nn.Linear named.*linear2"):
        gpt.add_adapters(model, targets=("v_proj",))
    assert all(p.requires_grad for p in model.parameters())


def test_next_token_probs_matches_transformers_warpers():
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    ids = torch.zeros(3, 1, dtype=torch.long)  # the warpers ignore the prefix
    for tau, k in ((1.0, None), (0.5, None), (1.7, 5), (0.8, 1), (1.0, 50)):
        z = TemperatureLogitsWarper(tau)(ids, logits.clone())
        if k is not None:
            z = TopKLogitsWarper(k)(ids, z)
        expected = torch.softmax(z, -1)
        got = gpt.next_token_probs(logits, tau, k)
        assert torch.allclose(got, expected, atol=1e-6), (tau, k)
    greedy = gpt.next_token_probs(logits, 0.0)
    assert torch.equal(greedy.argmax(-1), logits.argmax(-1)) and torch.equal(
        greedy.sum(-1), torch.ones(3)
    )
    with pytest.raises(ValueError, match="next_token_probs: top_k must be >= 1"):
        gpt.next_token_probs(logits, 1.0, top_k=0)


# ---------------------------------------------------------------------------
# Options the tests above leave at their defaults, and the edges of the checks
# ---------------------------------------------------------------------------


def _next_token_loss(model, data, block, n):
    """Mean cross-entropy of the first ``n`` targets, windows of ``block``, written out."""
    x = data[:n].view(-1, block)
    y = data[1 : n + 1].view(-1, block)
    with torch.no_grad():
        logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()


def test_evaluate_windows_and_rounding():
    """The first ``num_chars`` targets, rounded down to whole windows, and never more than
    the data has; ``block == max_len`` is allowed; ``PPL = exp(loss)``."""
    model = small_gpt()  # max_len 16
    data = torch.randint(50, (200,), generator=torch.Generator().manual_seed(1))
    loss, ppl = gpt.evaluate(model, data, block=16, num_chars=70)  # 4 windows: 64 targets
    assert loss == pytest.approx(_next_token_loss(model, data, 16, 64), rel=1e-5)
    assert ppl == pytest.approx(math.exp(loss), rel=1e-12)
    loss, _ = gpt.evaluate(model, data, block=8)  # default num_chars: all 199 targets -> 192
    assert loss == pytest.approx(_next_token_loss(model, data, 8, 192), rel=1e-5)
    loss, _ = gpt.evaluate(model, data[:33], block=8, num_chars=1000)  # 32 targets
    assert loss == pytest.approx(_next_token_loss(model, data, 8, 32), rel=1e-5)
    loss, _ = gpt.evaluate(model, data, num_chars=1000, block=16)
    assert loss == pytest.approx(_next_token_loss(model, data, 16, 192), rel=1e-5)
    with pytest.raises(
        ValueError, match="^evaluate: block=17 is longer than the model's max_len=16"
    ):
        gpt.evaluate(model, data, block=17)


def test_evaluate_default_block_is_64():
    torch.manual_seed(0)
    model = gpt.GPT(TransformerConfig(d_model=16, num_heads=2, num_layers=1, max_len=64), 7).eval()
    data = torch.randint(7, (300,), generator=torch.Generator().manual_seed(2))
    loss, _ = gpt.evaluate(model, data)
    assert loss == pytest.approx(_next_token_loss(model, data, 64, 256), rel=1e-5)
    with pytest.raises(ValueError, match="block=65"):
        gpt.evaluate(model, data, block=65)


def test_evaluate_model_without_a_learned_table():
    """A model without ``embed.max_len`` (no learned table) is evaluated at any block."""

    class Uniform(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return torch.zeros(*x.shape, 5) + self.w

    loss, ppl = gpt.evaluate(Uniform(), torch.arange(100) % 5, block=32, num_chars=64)
    assert loss == pytest.approx(math.log(5)) and ppl == pytest.approx(5.0)


def test_load_checkpoint_forwards_map_location_and_refuses_pickled_objects(tmp_path):
    model = small_gpt()
    gpt.save_checkpoint(model, tmp_path / "m.pt")
    seen = []

    def on_cpu(storage, location):
        seen.append(location)
        return storage

    loaded, extra = gpt.load_checkpoint(tmp_path / "m.pt", map_location=on_cpu)
    assert seen and set(seen) == {"cpu"} and extra == {}
    # weights only: a checkpoint carrying an arbitrary Python object is not unpickled
    gpt.save_checkpoint(model, tmp_path / "bad.pt", note=Path("x"))
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        gpt.load_checkpoint(tmp_path / "bad.pt")


def test_sampling_knob_errors_name_the_function():
    model = small_gpt()
    prompt = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="^sample: temperature must be >= 0, got -0.5"):
        gpt.sample(model, prompt, 1, temperature=-0.5)
    with pytest.raises(ValueError, match="^sample: top_k must be >= 1 or None, got 0"):
        gpt.sample(model, prompt, 1, top_k=0)
    with pytest.raises(ValueError, match="^next_token_probs: temperature must be >= 0"):
        gpt.next_token_probs(torch.zeros(3), -1.0)
    assert gpt.sample(model, prompt, 2, top_k=1).shape == (4,)  # top_k = 1 is valid


def test_next_token_probs_edges():
    logits = torch.tensor([[2.0, 1.0, 1.0, 0.0], [0.0, 3.0, -1.0, 3.0]])
    # a logit tied with the k-th largest is kept
    p = gpt.next_token_probs(logits, 1.0, top_k=2)
    e = math.e
    torch.testing.assert_close(p[0], torch.tensor([e, 1.0, 1.0, 0.0]) / (e + 2))
    torch.testing.assert_close(p[1], torch.tensor([0.0, 0.5, 0.0, 0.5]))
    # top_k as large as the vocabulary (or larger) keeps everything: plain softmax
    for k in (4, 9, None):
        torch.testing.assert_close(
            gpt.next_token_probs(logits, 0.5, k), torch.softmax(2 * logits, -1)
        )
    # default temperature 1, no top-k
    torch.testing.assert_close(gpt.next_token_probs(logits), torch.softmax(logits, -1))
    g = gpt.next_token_probs(logits.double(), 0)
    assert g.dtype == torch.float64 and g.tolist()[0] == [1.0, 0.0, 0.0, 0.0]


def test_sample_draws_from_next_token_probs():
    """Each step draws one token from ``next_token_probs`` of the last position's logits
    with a generator seeded by ``seed``; the context is the last ``max_len`` tokens; a
    batch of prompts gives a batch; the model's training mode comes back."""
    model = small_gpt().train()
    prompt = torch.randint(50, (2, 20), generator=torch.Generator().manual_seed(4))  # > max_len
    out = gpt.sample(model, prompt, 6, temperature=0.7, top_k=5, seed=11)
    assert model.training and out.shape == (2, 26) and torch.equal(out[:, :20], prompt)
    g = torch.Generator().manual_seed(11)
    tokens = prompt
    model.eval()
    with torch.no_grad():
        for _ in range(6):
            logits = model(tokens[:, -16:])[:, -1]
            probs = gpt.next_token_probs(logits, 0.7, 5)
            tokens = torch.cat([tokens, torch.multinomial(probs, 1, generator=g)], dim=1)
    assert torch.equal(out, tokens)
    assert not gpt.sample(model, prompt, 1).requires_grad  # no graph is built
    default = gpt.sample(model, prompt[0], 6)  # temperature 1, all tokens, seed 0
    g = torch.Generator().manual_seed(0)
    tokens = prompt[:1]
    with torch.no_grad():
        for _ in range(6):
            probs = torch.softmax(model(tokens[:, -16:])[:, -1], -1)
            tokens = torch.cat([tokens, torch.multinomial(probs, 1, generator=g)], dim=1)
    assert torch.equal(default, tokens[0])


def test_lora_linear_is_its_formula():
    """y = x W^T + b + (alpha / r) x A^T B^T, with the defaults r = 4, alpha = 8."""
    torch.manual_seed(0)
    base = nn.Linear(6, 5)
    for r, alpha, kw in ((4, 8.0, {}), (2, 3.0, dict(r=2, alpha=3.0))):
        lora = gpt.LoRALinear(base, **kw)
        assert lora.r == r and lora.scale == alpha / r
        assert lora.lora_A.shape == (r, 6) and lora.lora_B.shape == (5, r)
        assert torch.equal(lora.lora_B, torch.zeros(5, r))
        with torch.no_grad():
            lora.lora_B.normal_()
        x = torch.randn(3, 6)
        a, b, w = lora.lora_A.detach(), lora.lora_B.detach(), base.weight.detach()
        expected = x @ w.T + base.bias.detach() + alpha / r * x @ a.T @ b.T
        torch.testing.assert_close(lora(x), expected)
        torch.testing.assert_close(lora.weight, w + alpha / r * b @ a)
        assert lora.bias is base.bias
        merged = lora.merged()
        torch.testing.assert_close(merged(x), expected)
    assert not any(p.requires_grad for p in base.parameters())
    with pytest.raises(ValueError, match="^LoRALinear: r must be >= 1, got 0"):
        gpt.LoRALinear(nn.Linear(2, 2), r=0)


def test_lora_factors_initialisation_dtype_and_no_bias():
    """A ~ Kaiming uniform, bound 1/sqrt(in) (a = sqrt(5)); B = 0; dtype of the base; a base
    without bias merges to a layer without bias."""
    torch.manual_seed(0)
    base = nn.Linear(400, 3, bias=False, dtype=torch.float64)
    lora = gpt.LoRALinear(base, r=8)
    a = lora.lora_A.detach()
    bound = 1 / math.sqrt(400)
    assert a.dtype == lora.lora_B.dtype == torch.float64
    assert a.abs().max() <= bound and a.abs().max() > 0.95 * bound
    assert abs(a.std().item() / (bound / math.sqrt(3)) - 1) < 0.05  # 3200 draws
    assert lora.lora_A.requires_grad and lora.lora_B.requires_grad
    merged = lora.merged()
    assert merged.bias is None and merged.weight.dtype == torch.float64
    assert merged.in_features == 400 and merged.out_features == 3
    slice_lora = gpt.SliceLoRA(torch.zeros(3 * 400, 400, dtype=torch.float64), r=8)
    for s in "qv":
        a = slice_lora.lora_A[s].detach()
        assert a.dtype == torch.float64 and a.abs().max() <= bound
        assert abs(a.std().item() / (bound / math.sqrt(3)) - 1) < 0.05
        assert torch.equal(slice_lora.lora_B[s], torch.zeros(400, 8, dtype=torch.float64))
    assert set(slice_lora.lora_A) == {"q", "v"} and slice_lora.scale == 8.0 / 8


def test_add_lora_defaults_and_targets():
    model = small_gpt()
    gpt.add_lora(model)  # r = 4, alpha = 8: out_proj, linear1, linear2
    wrapped = {n: m for n, m in model.named_modules() if isinstance(m, gpt.LoRALinear)}
    assert sorted(n.rsplit(".", 1)[-1] for n in wrapped) == [
        "linear1",
        "linear1",
        "linear2",
        "linear2",
        "out_proj",
        "out_proj",
    ]
    assert all(m.r == 4 and m.scale == 2.0 for m in wrapped.values())
    model = small_gpt()
    gpt.add_lora(model, targets=("linear2",), r=1, alpha=1.0)
    wrapped = [n for n, m in model.named_modules() if isinstance(m, gpt.LoRALinear)]
    assert wrapped == ["blocks.layers.0.ff.linear2", "blocks.layers.1.ff.linear2"]
    assert all(model.get_submodule(n).scale == 1.0 for n in wrapped)
    model = small_gpt()
    gpt.add_lora(model, r=2, alpha=3.0)  # alpha reaches every wrapped layer
    assert {m.scale for m in model.modules() if isinstance(m, gpt.LoRALinear)} == {1.5}
    assert model.head.weight.requires_grad is False  # the whole model is frozen


def test_slice_lora_each_slice_and_checks():
    d = 4
    for slices in (("k",), ("q", "k", "v")):
        lora = gpt.SliceLoRA(torch.zeros(3 * d, d), r=2, alpha=2.0, slices=slices)
        with torch.no_grad():
            for s in slices:
                lora.lora_A[s].fill_(1.0)
                lora.lora_B[s].fill_(1.0)
        delta = lora(torch.zeros(3 * d, d)).chunk(3)
        for s, block in zip("qkv", delta, strict=True):
            assert torch.equal(block, torch.full((d, d), 2.0 if s in slices else 0.0))
    with pytest.raises(ValueError, match="^SliceLoRA: r must be >= 1, got 0"):
        gpt.SliceLoRA(torch.zeros(12, 4), r=0)
    with pytest.raises(ValueError, match="^SliceLoRA: slices must be a non-empty subset"):
        gpt.SliceLoRA(torch.zeros(12, 4), slices=())
    with pytest.raises(
        ValueError, match=r"^SliceLoRA: expected a fused \[3D, D\] weight, got \[4, 12\]"
    ):
        gpt.SliceLoRA(torch.zeros(4, 12))
    assert gpt.SliceLoRA(torch.zeros(12, 4), r=1).r == 1


def test_add_qv_lora_defaults_and_errors():
    model = small_gpt()
    gpt.add_qv_lora(model)
    loras = [m for m in model.modules() if isinstance(m, gpt.SliceLoRA)]
    assert len(loras) == 2 and all(
        m.r == 4 and m.scale == 2.0 and m.slices == ("q", "v") for m in loras
    )
    model = small_gpt()
    gpt.add_qv_lora(model, r=1, alpha=3.0, slices=("k",))
    lora = model.blocks.layers[0].self_attn.parametrizations.in_proj_weight[0]
    assert lora.r == 1 and lora.scale == 3.0 and lora.slices == ("k",)
    with pytest.raises(
        ValueError, match="^add_qv_lora: the model has no attention with a fused in_proj_weight"
    ):
        gpt.add_qv_lora(nn.Sequential(nn.Linear(2, 2)))


def test_merge_lora_keeps_the_updated_weight():
    model = small_gpt()
    gpt.add_qv_lora(model, r=2)
    attn = model.blocks.layers[1].self_attn
    with torch.no_grad():
        attn.parametrizations.in_proj_weight[0].lora_B["v"].normal_()
    updated = attn.in_proj_weight.detach().clone()
    gpt.merge_lora(model)
    assert isinstance(attn.in_proj_weight, nn.Parameter)
    assert torch.equal(attn.in_proj_weight, updated)


def test_adapter_options_and_checks():
    torch.manual_seed(0)
    base = nn.Linear(5, 6, dtype=torch.float64)
    adapter = gpt.BottleneckAdapter(base)  # bottleneck 8, GELU
    assert adapter.down.weight.shape == (8, 6) and adapter.up.weight.shape == (6, 8)
    assert adapter.down.weight.dtype == adapter.up.bias.dtype == torch.float64
    assert adapter.activation == "gelu" and not any(p.requires_grad for p in base.parameters())
    relu = gpt.BottleneckAdapter(base, bottleneck=3, activation="relu")
    with torch.no_grad():
        relu.up.weight.normal_()
        relu.up.bias.normal_()
    x = torch.randn(4, 5, dtype=torch.float64)
    h = base(x)
    torch.testing.assert_close(relu(x), h + relu.up(torch.relu(relu.down(h))))
    assert gpt.BottleneckAdapter(base, bottleneck=1).down.out_features == 1
    with pytest.raises(ValueError, match=r"^BottleneckAdapter: activation must be one of \("):
        gpt.BottleneckAdapter(base, activation="swish")


def test_add_adapters_defaults_and_options():
    model = small_gpt()
    gpt.add_adapters(model)  # bottleneck 8 after out_proj and linear2
    adapters = {
        n.rsplit(".", 1)[-1]: m
        for n, m in model.named_modules()
        if isinstance(m, gpt.BottleneckAdapter)
    }
    assert sorted(adapters) == ["linear2", "out_proj"]
    assert all(m.down.out_features == 8 and m.activation == "gelu" for m in adapters.values())
    model = small_gpt()
    gpt.add_adapters(model, bottleneck=2, targets=("linear1",), activation="relu")
    found = [
        (n, m.down.out_features, m.activation)
        for n, m in model.named_modules()
        if isinstance(m, gpt.BottleneckAdapter)
    ]
    assert found == [
        ("blocks.layers.0.ff.linear1", 2, "relu"),
        ("blocks.layers.1.ff.linear1", 2, "relu"),
    ]


def test_load_gpt2_weights_from_the_lm_head_model_and_missing_keys():
    """A ``GPT2LMHeadModel`` state dict (keys prefixed ``transformer.``) loads the same; a
    state dict without a block's weights is an error naming them."""
    from transformers import GPT2LMHeadModel

    cfg = _gpt2_config()
    torch.manual_seed(2)
    hf = GPT2LMHeadModel(cfg).eval()
    ours = gpt.load_gpt2_weights(small_gpt(), hf.state_dict())
    tokens = torch.randint(50, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf.transformer(tokens).last_hidden_state
        assert torch.allclose(ours.hidden_states(tokens), expected, atol=1e-5)
    adapted = gpt.add_adapters(small_gpt(), targets=("linear2",))  # weights GPT-2 lacks
    with pytest.raises(
        KeyError,
        match=r"load_gpt2_weights: no GPT-2 weight for \['blocks.layers.0.ff.linear2.base.weight'",
    ):
        gpt.load_gpt2_weights(adapted, hf.state_dict())


def test_next_token_probs_on_one_sequence_and_on_every_position():
    """[V] (one sequence) and [B, T, V] (every position) work along the last axis."""
    logits = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(5))
    for tau, k in ((1.0, None), (0.7, 2), (0.0, None)):
        full = gpt.next_token_probs(logits, tau, k)
        rows = torch.stack([gpt.next_token_probs(row, tau, k) for row in logits.flatten(0, 1)])
        torch.testing.assert_close(full.flatten(0, 1), rows)
        torch.testing.assert_close(full.sum(-1), torch.ones(2, 3))
    torch.testing.assert_close(gpt.next_token_probs(logits, 0.5), torch.softmax(logits / 0.5, -1))
    top2 = gpt.next_token_probs(logits, 1.0, 2)
    assert ((top2 > 0).sum(-1) == 2).all()
    assert torch.equal(gpt.next_token_probs(logits, 0).argmax(-1), logits.argmax(-1))


def test_merge_lora_leaves_other_parametrizations():
    """Only the LoRA of the fused projection is folded in; another parametrization stays."""
    model = small_gpt()
    head = torch.nn.utils.parametrizations.weight_norm(model.head)
    gpt.add_qv_lora(model)
    gpt.merge_lora(model)
    assert parametrize.is_parametrized(head, "weight")
    assert not parametrize.is_parametrized(model.blocks.layers[0].self_attn)


def test_adapters_and_lora_are_made_on_the_base_device():
    base = nn.Linear(4, 6, device="meta")
    adapter = gpt.BottleneckAdapter(base, bottleneck=2)
    assert {p.device.type for p in adapter.parameters()} == {"meta"}
    lora = gpt.LoRALinear(nn.Linear(4, 6, device="meta"))
    assert {p.device.type for p in lora.parameters()} == {"meta"}
    slice_lora = gpt.SliceLoRA(torch.zeros(12, 4, device="meta"))
    assert {p.device.type for p in slice_lora.parameters()} == {"meta"}


def test_slice_lora_defaults():
    """r = 4, alpha = 8 (scale 2), the query and value slices."""
    lora = gpt.SliceLoRA(torch.zeros(12, 4))
    assert lora.r == 4 and lora.scale == 2.0 and lora.slices == ("q", "v")
    assert lora.lora_A["q"].shape == (4, 4) and lora.lora_B["v"].shape == (4, 4)


def test_no_target_error_lists_the_layer_names():
    """The names are the last part of each nn.Linear's path, sorted, at most 8 then '...'."""
    expected = "its nn.Linear layers are named ['head', 'linear1', 'linear2', 'out_proj']$"
    with pytest.raises(
        ValueError,
        match=r"^add_adapters: no nn.Linear named \('q',\) .*" + re.escape(expected[:-1]) + "$",
    ):
        gpt.add_adapters(small_gpt(), targets=("q",))
    many = nn.ModuleDict({c: nn.Linear(2, 2) for c in "jihgfedcba"})
    with pytest.raises(
        ValueError, match=re.escape("['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'] ...") + "$"
    ):
        gpt.add_lora(many, targets=("z",))
    few = nn.ModuleDict({c: nn.Linear(2, 2) for c in "abcdefgh"})
    with pytest.raises(
        ValueError, match=re.escape("['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']") + "$"
    ):
        gpt.add_lora(few, targets=("z",))


def test_evaluate_default_num_chars_is_32768():
    """By default the first 32768 targets count (rounded down to whole windows: 32766 for
    windows of 3); a model sure of token 1 meets token 0 only after them."""

    class SureOfOne(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return torch.tensor([0.0, 10.0]).expand(*x.shape, 2) + self.w

    data = torch.ones(40_000, dtype=torch.long)
    data[32_767:] = 0  # targets 32767, 32768, ... are zeros
    loss, _ = gpt.evaluate(SureOfOne(), data, block=3)
    assert loss == pytest.approx(math.log1p(math.exp(-10.0)), rel=1e-3)
