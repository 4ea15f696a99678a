"""Chapter 11: the GPT from the library's blocks, matched to GPT-2; sampling; checkpoints; LoRA."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2Model

from course_lib import gpt, lm, params
from course_lib.config import TransformerConfig


def small_gpt(seed=0):
    torch.manual_seed(seed)
    config = TransformerConfig(d_model=32, num_heads=4, num_layers=2, max_len=16, activation="gelu")
    return gpt.GPT(config, 50).eval()


def test_blocks_match_gpt2():
    cfg = GPT2Config(
        vocab_size=50,
        n_positions=16,
        n_embd=32,
        n_layer=2,
        n_head=4,
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
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
    with pytest.raises(ValueError, match="linear1"):  # the message lists the layers there are
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
