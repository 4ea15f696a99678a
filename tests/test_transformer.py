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


# ---------------------------------------------------------------------------
# Options the tests above leave at their defaults: an explicit attention mask,
# the target's padding, the layer-norm epsilon, a post-norm stack's missing final
# norm, padded inputs, the configuration's type.
# ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_match_torch_with_masks_and_eps(norm_first):
    """An explicit ``mask`` for the encoder, the target's padding for the decoder, and a
    layer-norm epsilon far from torch's default: torch's stacks given the same."""
    eps = 0.3  # large enough that dropping it moves every output
    ref = nn.Transformer(
        D, H, 2, 2, FF, dropout=0.0, batch_first=True, norm_first=norm_first, layer_norm_eps=eps
    ).eval()
    _randomise_norms(ref)
    config = TransformerConfig(
        d_model=D, num_heads=H, num_layers=2, d_ff=FF, norm_first=norm_first, eps=eps
    )
    enc = Encoder(config, final_norm=True).eval()
    dec = Decoder(config, final_norm=True).eval()
    enc.load_state_dict(from_torch_state_dict(ref.encoder.state_dict()))
    dec.load_state_dict(from_torch_state_dict(ref.decoder.state_dict()))
    src, tgt = torch.randn(2, 7, D), torch.randn(2, 5, D)
    band = (torch.arange(7)[:, None] - torch.arange(7)[None, :]).abs() <= 2  # [S, S] True = attend
    tgt_kpm = padding_mask(torch.tensor([5, 3]), 5)  # key 0 is real: no row fully masked
    expected = ref(
        src,
        tgt,
        src_mask=to_torch_mask(band, "mha"),
        tgt_mask=to_torch_mask(causal_mask(5), "mha"),
        tgt_key_padding_mask=~tgt_kpm,
    )
    memory = enc(src, mask=band)
    got = dec(tgt, memory, tgt_key_padding_mask=tgt_kpm)
    assert _close(got, expected), (got - expected).abs().max()


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_post_norm_stack_has_no_final_norm_by_default():
    """Post-norm blocks end in a layer norm already (4.2): the stack adds none, and equals
    torch's ``nn.TransformerEncoder`` without a final norm; pre-norm adds one (4.3)."""
    config = TransformerConfig(d_model=D, num_heads=H, num_layers=2, d_ff=FF, norm_first=False)
    enc = Encoder(config).eval()
    assert enc.norm is None and Decoder(config).norm is None
    assert isinstance(Encoder(TransformerConfig(norm_first=True)).norm, nn.LayerNorm)
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True)
    ref = nn.TransformerEncoder(layer, 2, norm=None, enable_nested_tensor=False).eval()
    _randomise_norms(ref)
    enc.load_state_dict(from_torch_state_dict(ref.state_dict()))
    x = torch.randn(2, 6, D)
    assert _close(enc(x), ref(x))


def test_final_norm_uses_the_config_eps():
    config = TransformerConfig(d_model=D, num_heads=H, num_layers=1, d_ff=FF, eps=0.25)
    assert Encoder(config, final_norm=True).norm.eps == 0.25
    assert Decoder(config, final_norm=True).norm.eps == 0.25


def test_padding_is_the_same_as_a_shorter_input():
    """Padded keys are invisible: the real positions of a padded batch give what the
    unpadded, shorter sequence gives (source padding in the encoder-decoder's encoder and
    its cross-attention, token padding in the encoder-only model)."""
    config = TransformerConfig(d_model=16, num_heads=2, num_layers=2, d_ff=32)
    g = torch.Generator().manual_seed(3)
    src = torch.randint(0, 6, (1, 7), generator=g)
    kpm = padding_mask(torch.tensor([4]), 7)  # 4 real tokens, 3 pads
    model = EncoderDecoder(config, 6).eval()
    tgt = torch.randint(0, 7, (1, 5), generator=g)
    with torch.no_grad():
        memory = model.encode(src, kpm)
        short = model.encode(src[:, :4])
        assert _close(memory[:, :4], short)
        assert _close(
            model.decode(tgt, memory, memory_key_padding_mask=kpm), model.decode(tgt, short)
        )
        assert not _close(model.decode(tgt, memory), model.decode(tgt, short))  # the pads matter
        bert = EncoderOnly(config, 6, 3).eval()
        assert _close(bert(src, kpm)[:, :4], bert(src[:, :4]))
        assert not _close(bert(src)[:, :4], bert(src[:, :4]))


def test_encoder_decoder_target_vocabulary_has_one_bos_row():
    """The target embedding has ``num_symbols + 1`` rows, the last being BOS (as Seq2Seq)."""
    model = EncoderDecoder(TransformerConfig(d_model=16, num_heads=2, d_ff=32), 6)
    assert model.bos == 6
    assert model.tgt_embed.tok.weight.shape == (7, 16)
    assert model.src_embed.tok.weight.shape == (6, 16)
    assert model.out.weight.shape == (6, 16)


def test_positions_follow_the_tokens_device_not_the_default_one():
    """The position ids are made on the tokens' device: with torch's default device set
    elsewhere (``torch.set_default_device``), a CPU model on CPU tokens is unchanged."""
    model = DecoderOnly(TransformerConfig(d_model=16, num_heads=2, d_ff=32), 10).eval()
    tokens = torch.randint(0, 10, (2, 5))
    with torch.no_grad():
        expected = model(tokens)
        torch.set_default_device("meta")
        try:
            got = model(tokens)
        finally:
            torch.set_default_device(None)
    assert got.device == tokens.device and torch.equal(got, expected)


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (Encoder, ()),
        (Decoder, ()),
        (EncoderDecoder, (6,)),
        (EncoderOnly, (10, 10)),
        (DecoderOnly, (10,)),
    ],
)
def test_config_is_kept_and_a_wrong_one_is_named(cls, args):
    config = TransformerConfig(d_model=16, num_heads=2, d_ff=32)
    assert cls(config, *args).config is config
    with pytest.raises(
        TypeError,
        match=rf"^{cls.__name__}: the first argument is a course_lib.config.TransformerConfig, "
        rf"got int 16; build the model as {cls.__name__}\(TransformerConfig\(",
    ):
        cls(16, *args)
