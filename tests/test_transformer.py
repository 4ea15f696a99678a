"""The Transformer (Chapter 4): stacks against torch.nn, weights copied; the three families.

The blocks are tested in ``tests/test_blocks.py``.

float32, atol 1e-5, dropout 0, eval mode.  The torch layers are run with
autograd on, so PyTorch takes its reference ("slow") path; under ``no_grad`` its
fast path returns zeros at padded positions instead (checked separately).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.attention import record_attention
from course_lib.blocks import from_torch_state_dict
from course_lib.config import TransformerConfig
from course_lib.masks import causal_mask, padding_mask, to_torch_mask
from course_lib.seq2seq import evaluate, make_batch, seq2seq_loss
from course_lib.training import train
from course_lib.transformer import (
    Decoder,
    DecoderOnly,
    Encoder,
    EncoderDecoder,
    EncoderOnly,
)
from tests.test_blocks import FF, D, H, _close, _randomise_norms

# Seeded, one intra-op thread (fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("seed_and_one_thread")


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_match_torch_transformer(norm_first):
    ref = nn.Transformer(
        D, H, 2, 2, FF, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    _randomise_norms(ref)
    # nn.Transformer ends both stacks with a LayerNorm, for either placement
    config = TransformerConfig(d_model=D, num_heads=H, num_layers=2, d_ff=FF, norm_first=norm_first)
    enc = Encoder(config, final_norm=True).eval()
    dec = Decoder(config, final_norm=True).eval()
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


# ---------------------------------------------------------------------------
# The three families.
# ---------------------------------------------------------------------------


def test_decoder_only_is_causal_and_encoder_only_is_not():
    tokens = torch.randint(0, 10, (2, 6))
    changed = tokens.clone()
    changed[:, 4] = (changed[:, 4] + 1) % 10  # change a late token
    config = TransformerConfig()
    gpt, bert = DecoderOnly(config, 10).eval(), EncoderOnly(config, 10, 10).eval()
    with torch.no_grad():
        a, b = gpt(tokens), gpt(changed)
        assert _close(a[:, :4], b[:, :4]) and not _close(a[:, 4:], b[:, 4:])
        a, b = bert(tokens), bert(changed)
        assert not _close(a[:, :4], b[:, :4])  # earlier positions see the later token


def test_encoder_only_and_decoder_only_have_the_same_parameters():
    config = TransformerConfig(d_model=32, num_heads=4, num_layers=3, d_ff=64)
    gpt, bert = DecoderOnly(config, 50), EncoderOnly(config, 50, 50)
    shapes = {k.replace("blocks.", ""): v.shape for k, v in gpt.state_dict().items()}
    assert shapes == {k.replace("blocks.", ""): v.shape for k, v in bert.state_dict().items()}


def test_decoder_only_generate_and_length_limit():
    gpt = DecoderOnly(TransformerConfig(max_len=8), 10).eval()
    out = gpt.generate(torch.randint(0, 10, (2, 3)), 7)
    assert out.shape == (2, 10)
    with pytest.raises(
        ValueError, match="sequence length 9 exceeds max_len=8: build the model with max_len >= 9"
    ):
        gpt(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must be \[B, T\].*tokens\[None\]"):
        gpt(torch.zeros(9, dtype=torch.long))


def test_encoder_decoder_greedy_decoding_and_causality():
    model = EncoderDecoder(TransformerConfig(d_model=16, num_heads=2, d_ff=32), 6).eval()
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
    model = EncoderDecoder(TransformerConfig(d_model=32, num_heads=2, num_layers=1, d_ff=64), 5)
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
