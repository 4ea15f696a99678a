"""The Transformer (Chapter 4): blocks and stacks against torch.nn, weights copied.

float32, atol 1e-5, dropout 0, eval mode.  The torch layers are run with
autograd on, so PyTorch takes its reference ("slow") path; under ``no_grad`` its
fast path returns zeros at padded positions instead (checked separately).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import record_attention
from course_lib.masks import causal_mask, padding_mask, to_torch_mask
from course_lib.seq2seq import evaluate, make_batch, seq2seq_loss
from course_lib.training import train
from course_lib.transformer import (
    Decoder,
    DecoderBlock,
    DecoderOnly,
    Encoder,
    EncoderBlock,
    EncoderDecoder,
    EncoderOnly,
    FeedForward,
    from_torch_state_dict,
)

ATOL = 1e-5
D, H, FF = 16, 4, 32


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> bool:
    return a.shape == b.shape and (a - b).abs().max().item() <= atol


# Seeded, one intra-op thread (fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("seed_and_one_thread")


def _randomise_norms(module: nn.Module) -> None:
    """LayerNorm starts as the identity map; random affine parameters make a swap visible."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.3)
                m.bias.normal_(0.0, 0.3)


def test_feed_forward_is_its_equation():
    ff = FeedForward(D, FF, activation="gelu")
    u = torch.randn(2, 3, D)
    expected = (
        F.gelu(u @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T + ff.linear2.bias
    )
    assert _close(ff(u), expected)
    with pytest.raises(
        ValueError, match=r"activation must be one of \('relu', 'gelu', 'gelu_tanh'\)"
    ):
        FeedForward(D, FF, activation="tanh")


def test_state_dict_renaming():
    sd = {"layers.0.linear1.weight": 1, "multihead_attn.in_proj_weight": 2, "norm1.bias": 3}
    assert from_torch_state_dict(sd) == {
        "layers.0.ff.linear1.weight": 1,
        "cross_attn.in_proj_weight": 2,
        "norm1.bias": 3,
    }


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_matches_torch(norm_first, activation):
    ref = nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    _randomise_norms(ref)
    ours = EncoderBlock.from_torch(ref).eval()
    assert ours.norm_first == norm_first
    x = torch.randn(3, 6, D)
    kpm = padding_mask(torch.tensor([6, 4, 2]), 6)
    assert _close(ours(x), ref(x))
    assert _close(
        ours(x, key_padding_mask=kpm), ref(x, src_key_padding_mask=to_torch_mask(kpm, "mha"))
    )
    causal = causal_mask(6)
    assert _close(ours(x, is_causal=True), ref(x, src_mask=to_torch_mask(causal, "mha")))
    assert _close(ours(x, mask=causal), ref(x, src_mask=~causal, is_causal=True))
    # the other norm placement, same weights, is a different function
    other = EncoderBlock(D, H, FF, norm_first=not norm_first, activation=activation).eval()
    other.load_state_dict(ours.state_dict())
    assert not _close(other(x), ref(x))


def test_encoder_block_matches_torch_fast_path_on_real_tokens():
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True).eval()
    ours = EncoderBlock.from_torch(ref).eval()
    x = torch.randn(2, 5, D)
    kpm = padding_mask(torch.tensor([5, 3]), 5)
    with torch.no_grad():
        theirs = ref(x, src_key_padding_mask=~kpm)
        mine = ours(x, key_padding_mask=kpm)
    assert _close(mine[kpm], theirs[kpm])


def test_encoder_block_in_train_mode_with_dropout_zero_matches_eval():
    ours = EncoderBlock(D, H, FF, dropout=0.0)
    x = torch.randn(2, 4, D)
    assert _close(ours.train()(x), ours.eval()(x))
    noisy = EncoderBlock(D, H, FF, dropout=0.5).train()
    assert not _close(noisy(x), noisy.eval()(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_torch(norm_first):
    ref = nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    _randomise_norms(ref)
    ours = DecoderBlock.from_torch(ref).eval()
    x, mem = torch.randn(3, 6, D), torch.randn(3, 5, D)
    mem_kpm = padding_mask(torch.tensor([5, 3, 1]), 5)
    tgt_kpm = padding_mask(torch.tensor([6, 6, 4]), 6)
    expected = ref(
        x,
        mem,
        tgt_mask=to_torch_mask(causal_mask(6), "mha"),
        memory_key_padding_mask=to_torch_mask(mem_kpm, "mha"),
        tgt_key_padding_mask=to_torch_mask(tgt_kpm, "mha"),
    )
    got = ours(
        x, mem, tgt_is_causal=True, memory_key_padding_mask=mem_kpm, tgt_key_padding_mask=tgt_kpm
    )
    assert _close(got, expected)
    assert _close(ours(x, mem), ref(x, mem))
    memory_mask = torch.rand(6, 5) > 0.3
    memory_mask[:, 0] = True
    assert _close(ours(x, mem, memory_mask=memory_mask), ref(x, mem, memory_mask=~memory_mask))
    # forgetting the causal mask is caught
    assert not _close(ours(x, mem, memory_key_padding_mask=mem_kpm), expected)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_match_torch_transformer(norm_first):
    ref = nn.Transformer(
        D, H, 2, 2, FF, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    _randomise_norms(ref)
    # nn.Transformer ends both stacks with a LayerNorm, for either placement
    enc = Encoder(2, D, H, FF, norm_first=norm_first, final_norm=True).eval()
    dec = Decoder(2, D, H, FF, norm_first=norm_first, final_norm=True).eval()
    enc.load_state_dict(from_torch_state_dict(ref.encoder.state_dict()))
    dec.load_state_dict(from_torch_state_dict(ref.decoder.state_dict()))
    src, tgt = torch.randn(2, 7, D), torch.randn(2, 5, D)
    src_kpm = padding_mask(torch.tensor([7, 4]), 7)
    expected = ref(
        src,
        tgt,
        tgt_mask=to_torch_mask(causal_mask(5), "mha"),
        src_key_padding_mask=~src_kpm,
        memory_key_padding_mask=~src_kpm,
    )
    memory = enc(src, key_padding_mask=src_kpm)
    assert _close(dec(tgt, memory, memory_key_padding_mask=src_kpm), expected)


def test_block_errors_name_the_expected_shapes():
    enc, dec = EncoderBlock(D, H, FF), DecoderBlock(D, H, FF)
    with pytest.raises(
        ValueError, match=r"EncoderBlock: x must be \[B, T, D=16\], got \[2, 5, 8\]"
    ):
        enc(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match=r"memory must be \[B=2, S, D=16\], got \[3, 4, 16\]"):
        dec(torch.randn(2, 5, D), torch.randn(3, 4, D))
    with pytest.raises(ValueError, match=r"key_padding_mask must be \[B=2, S=5\]"):
        enc(torch.randn(2, 5, D), key_padding_mask=torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="must use batch_first=True"):
        EncoderBlock.from_torch(nn.TransformerEncoderLayer(D, H, FF))


# ---------------------------------------------------------------------------
# The three families.
# ---------------------------------------------------------------------------


def test_decoder_only_is_causal_and_encoder_only_is_not():
    tokens = torch.randint(0, 10, (2, 6))
    changed = tokens.clone()
    changed[:, 4] = (changed[:, 4] + 1) % 10  # change a late token
    gpt, bert = DecoderOnly(10).eval(), EncoderOnly(10, 10).eval()
    with torch.no_grad():
        a, b = gpt(tokens), gpt(changed)
        assert _close(a[:, :4], b[:, :4]) and not _close(a[:, 4:], b[:, 4:])
        a, b = bert(tokens), bert(changed)
        assert not _close(a[:, :4], b[:, :4])  # earlier positions see the later token


def test_encoder_only_and_decoder_only_have_the_same_parameters():
    gpt, bert = DecoderOnly(50, 32, 4, 3, 64), EncoderOnly(50, 50, 32, 4, 3, 64)
    shapes = {k.replace("blocks.", ""): v.shape for k, v in gpt.state_dict().items()}
    assert shapes == {k.replace("blocks.", ""): v.shape for k, v in bert.state_dict().items()}


def test_decoder_only_generate_and_length_limit():
    gpt = DecoderOnly(10, max_len=8).eval()
    out = gpt.generate(torch.randint(0, 10, (2, 3)), 7)
    assert out.shape == (2, 10)
    with pytest.raises(
        ValueError, match="sequence length 9 exceeds max_len=8: build the model with max_len >= 9"
    ):
        gpt(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must be \[B, T\].*tokens\[None\]"):
        gpt(torch.zeros(9, dtype=torch.long))


def test_encoder_decoder_greedy_decoding_and_causality():
    model = EncoderDecoder(6, 16, 2, 2, 32).eval()
    b = make_batch(4, 5, 6, generator=torch.Generator().manual_seed(0))
    pred = model.greedy_decode(b.src, 5)
    assert pred.shape == (4, 5)
    bos = torch.full((4, 1), model.bos)
    with torch.no_grad():
        logits = model(b.src, torch.cat([bos, pred[:, :-1]], 1))
        assert torch.equal(logits.argmax(-1), pred)
        changed = b.tgt_in.clone()
        changed[:, 3] = (changed[:, 3] + 1) % 6
        a, c = model(b.src, b.tgt_in), model(b.src, changed)
    assert _close(a[:, :3], c[:, :3]) and not _close(a[:, 3:], c[:, 3:])
    with record_attention(model) as maps:
        model(b.src, b.tgt_in)
    assert maps["encoder.layers.1.self_attn"].shape == (4, 2, 5, 5)
    assert maps["decoder.layers.0.cross_attn"].shape == (4, 2, 5, 5)
    assert (maps["decoder.layers.0.self_attn"][..., 0, 1:] == 0).all()


def test_encoder_decoder_learns_to_reverse():
    model = EncoderDecoder(5, 32, 2, 1, 64)
    gen = torch.Generator().manual_seed(0)
    train(
        model,
        lambda: make_batch(32, 5, 5, task="reverse", generator=gen),
        seq2seq_loss,
        steps=200,
        lr=3e-3,
        progress=False,
    )
    tok, _ = evaluate(
        model, make_batch(300, 5, 5, task="reverse", generator=torch.Generator().manual_seed(9))
    )
    assert tok > 0.9, tok


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
@pytest.mark.parametrize("activation", ["relu", "gelu", nn.GELU(), nn.GELU(approximate="tanh")])
def test_from_torch_keeps_dtype_and_activation_exactly(kind, activation):
    """A float64 torch layer gives a float64 block equal to it to rounding, whatever the
    activation (tanh-approximated GELU included); before the fix the block came back in
    float32 and tanh-GELU became exact GELU."""
    torch.manual_seed(0)
    layer_cls = nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer
    block_cls = EncoderBlock if kind == "encoder" else DecoderBlock
    layer = layer_cls(8, 2, 16, dropout=0.0, batch_first=True, activation=activation)
    layer = layer.double().eval()
    block = block_cls.from_torch(layer).eval()
    assert all(p.dtype == torch.float64 for p in block.parameters())
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    args = (x,) if kind == "encoder" else (x, torch.randn(2, 4, 8, dtype=torch.float64))
    # With gradients on, torch runs the layer's own Python path.  (Under no_grad its fused
    # "fast path" computes exact GELU even for nn.GELU(approximate="tanh").)
    assert (block(*args) - layer(*args)).abs().max() < 1e-12


def test_from_torch_refuses_an_activation_it_cannot_reproduce():
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation=nn.SiLU())
    with pytest.raises(ValueError, match="unsupported activation SiLU"):
        EncoderBlock.from_torch(layer)
