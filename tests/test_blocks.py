"""The Transformer's blocks (Chapter 4) against torch.nn, weights copied.

float32, atol 1e-5, dropout 0, eval mode.  The torch layers are run with
autograd on, so PyTorch takes its reference ("slow") path; under ``no_grad`` its
fast path returns zeros at padded positions instead (checked separately).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.blocks import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    from_torch_state_dict,
)
from course_lib.masks import causal_mask, padding_mask, to_torch_mask

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
