"""Chapter 10: temporal encodings, patching and the patch forecaster; the baselines are
tested in test_forecasting.py."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from torch import nn

from course_lib.attention import record_attention
from course_lib.config import TransformerConfig
from course_lib.positional import sinusoidal_table
from course_lib.time_encoding import time_encoding
from course_lib.timeseries import (
    PatchForecaster,
    RelativeTimeBias,
    Time2Vec,
    calendar_features,
    num_patches,
    patchify,
)

#: the forecaster's trunk in these tests (pre-norm, ReLU)
SMALL = TransformerConfig(d_model=16, num_heads=2, d_ff=64)


@pytest.mark.parametrize(("length", "p", "s"), [(64, 16, 8), (65, 16, 8), (30, 5, 5), (10, 10, 3)])
def test_patchify_matches_unfold(length, p, s):
    x = torch.randn(3, 2, length)
    patches = patchify(x, p, s)
    assert torch.equal(patches, x.unfold(-1, p, s))
    assert patches.shape == (3, 2, (length - p) // s + 1, p) == (3, 2, num_patches(length, p, s), p)
    last = patches.shape[2] - 1  # patch n is x[n S : n S + P]
    assert torch.equal(patches[1, 0, last], x[1, 0, last * s : last * s + p])


def test_patchify_end_padding_is_patchtst():
    x = torch.randn(2, 3, 336)
    ref = nn.ReplicationPad1d((0, 8))(x).unfold(-1, 16, 8)  # PatchTST's padding_patch="end"
    assert torch.equal(patchify(x, 16, 8, pad_end=True), ref) and ref.shape[2] == 42
    with pytest.raises(ValueError, match=r"\[B, C, T_in\]"):
        patchify(torch.randn(5, 8), 4, 2)
    with pytest.raises(ValueError, match="length >= patch_len"):
        patchify(torch.randn(1, 1, 3), 4, 2)


def test_time2vec_affine_and_periodic():
    torch.manual_seed(0)
    t2v = Time2Vec(4, periods=[7.0, 12.0, 52.0, 365.25])
    tau = torch.linspace(-20, 20, 41)
    out = t2v(tau)
    assert out.shape == (41, 5)
    lin = out[:, 0]
    assert torch.allclose(lin[2:] - 2 * lin[1:-1] + lin[:-2], torch.zeros(39), atol=1e-5)  # affine
    assert torch.allclose(lin, t2v.w0 * tau + t2v.b0, atol=1e-6)
    for i in range(1, 5):  # component i repeats after its period 2 pi / w_i
        period = 2 * math.pi / t2v.w[i - 1]
        assert torch.allclose(t2v(tau + period)[:, i], out[:, i], atol=1e-4)
        assert not torch.allclose(t2v(tau + period / 2)[:, i], out[:, i], atol=1e-2)
    assert not torch.allclose(
        t2v(tau + 7.0)[:, 0], lin, atol=1e-3
    )  # the affine part is not periodic
    with pytest.raises(ValueError):
        Time2Vec(2, periods=[1.0])


def test_calendar_features():
    idx = pd.DatetimeIndex(["2001-01-01", "2001-07-02", "2003-01-01", "2003-07-02"])
    f = calendar_features(idx, harmonics=2, month_one_hot=True)
    assert f.shape == (4, 16)
    assert torch.allclose(f[0], f[2]) and torch.allclose(f[1], f[3])  # same day, other year
    assert f[0, 0] == 0 and f[0, 1] == 1  # sin, cos of 0
    assert f[1, 1] < -0.99  # half a year later: cos(pi) (181 of 365 days)
    assert f[1, 4 + 6] == 1 and f[1, 4:].sum() == 1  # July, one-hot
    with pytest.raises(TypeError, match="DatetimeIndex"):
        calendar_features(pd.RangeIndex(3))


def test_forecaster_shapes_channel_independence_and_errors():
    torch.manual_seed(0)
    model = PatchForecaster(SMALL, 48, 12, patch_len=8, stride=4).eval()
    x = torch.randn(3, 48, 4) * 5 + 100
    y = model(x)
    assert y.shape == (3, 12, 4)
    perm = torch.tensor([2, 0, 3, 1])
    assert torch.allclose(model(x[..., perm]), y[..., perm], atol=1e-4)  # channels independent
    assert torch.allclose(model(x * 2 + 3), y * 2 + 3, atol=1e-3)  # RevIN: scale and shift out
    with pytest.raises(ValueError, match="T_in=48"):
        model(torch.randn(3, 40, 1))
    exo = PatchForecaster(SMALL, 48, 12, patch_len=8, stride=4, n_exog=3)
    assert exo(x, torch.randn(3, 60, 3)).shape == (3, 12, 4)
    with pytest.raises(ValueError, match=r"exog must be \[B=3, T_in \+ T_out=60, C_x=3\]"):
        exo(x, torch.randn(3, 48, 3))
    with pytest.raises(
        ValueError, match=r"built with n_exog=3, so it needs exog \[B, T_in \+ T_out=60"
    ):
        exo(x)
    with pytest.raises(ValueError, match="n_exog=0"):
        model(x, torch.randn(3, 60, 3))


def test_exogenous_covariates_change_the_forecast():
    torch.manual_seed(0)
    exo = PatchForecaster(SMALL, 48, 12, patch_len=8, stride=4, n_exog=1).eval()
    x, e = torch.randn(2, 48, 1), torch.zeros(2, 60, 1)
    e2 = e.clone()
    e2[:, 55] = 1.0  # an event in the horizon
    assert not torch.allclose(exo(x, e), exo(x, e2))


def test_relative_time_bias_matches_a_loop_and_is_translation_invariant():
    torch.manual_seed(0)
    bias = RelativeTimeBias(3, periods=[2.0, 7.0, 52.0, 365.0]).double()
    t_q = torch.rand(2, 5, dtype=torch.float64) * 100
    t_k = torch.sort(torch.rand(2, 9, dtype=torch.float64) * 100).values  # irregular stamps
    out = bias(t_q, t_k)
    assert out.shape == (2, 3, 5, 9)
    a, c = bias.proj.weight, bias.proj.bias  # [h, 2d], [h]
    ref = torch.empty(2, 3, 5, 9, dtype=torch.float64)
    for b_ in range(2):
        for i in range(5):
            for j in range(9):
                dt = float(t_q[b_, i] - t_k[b_, j])
                phi = []
                for w in bias.omega.tolist():
                    phi += [math.cos(w * dt), math.sin(w * dt)]
                phi = torch.tensor(phi, dtype=torch.float64) / 2.0  # sqrt(1/d), d = 4
                ref[b_, :, i, j] = a @ phi + c
    assert torch.allclose(out, ref, atol=1e-10)
    assert torch.allclose(bias(t_q + 1234.5, t_k + 1234.5), out, atol=1e-9)  # shift: no change
    dt = (t_q[:, :, None] - t_k[:, None, :]).unsqueeze(1)  # as chapter 14's time encoding
    assert torch.allclose(
        out, bias.proj(time_encoding(dt, bias.omega)).squeeze(1).permute(0, 3, 1, 2)
    )
    assert not torch.allclose(bias(t_q, t_k + 1.0), out)
    learned = RelativeTimeBias(2, periods=[5.0, 10.0], learn_frequencies=True)
    assert isinstance(learned.omega, nn.Parameter) and "omega" in dict(bias.named_buffers())
    with pytest.raises(ValueError, match="positive"):
        RelativeTimeBias(2, periods=[5.0, -1.0])
    with pytest.raises(ValueError, match=r"t_k must be \[B=2"):
        bias(t_q, torch.rand(3, 9, dtype=torch.float64))


def test_concat_control_reads_the_covariates_without_cross_attention():
    torch.manual_seed(0)
    kw = dict(patch_len=8, stride=4, n_exog=2)
    cat = PatchForecaster(SMALL, 48, 12, exog_mode="concat", **kw).eval()
    assert not any("cross_attn" in name for name, _ in cat.named_modules())
    assert cat.head.in_features == cat.n_patches * 16 + 60 * 2
    x, e = torch.randn(3, 48, 2), torch.randn(3, 60, 2)
    assert cat(x, e).shape == (3, 12, 2)
    e2 = e.clone()
    e2[:, 55, 0] += 1.0  # a change in the horizon's covariates moves the forecast linearly
    delta = cat(x, e2) - cat(x, e)
    w = cat.head.weight[:, cat.n_patches * 16 + 55 * 2]  # [T_out]: the head's column for it
    std = x.std(dim=1, unbiased=False) + cat.revin.eps  # RevIN's scale   [B, C]
    assert torch.allclose(delta, w[None, :, None] * std[:, None, :], atol=1e-5)
    with pytest.raises(ValueError, match="exog_mode must be 'cross'.*'horizon'"):
        PatchForecaster(SMALL, 48, 12, exog_mode="add", **kw)


def test_horizon_queries_match_their_equation():
    """Eq. (10.8): the plain encoder and head, plus one query per future step."""
    torch.manual_seed(0)
    kw = dict(patch_len=8, stride=4, n_exog=2)
    config = SMALL.replace(num_layers=1, d_ff=32)
    model = PatchForecaster(config, 48, 12, exog_mode="horizon", **kw).double().eval()
    nn.init.normal_(model.queries, std=0.3)  # e_h starts at zero: make it do something
    x = torch.randn(3, 48, 2, dtype=torch.float64) * 4 + 50
    e = torch.randn(3, 60, 2, dtype=torch.float64)
    with record_attention(model) as maps:
        out = model(x, e)
    assert out.shape == (3, 12, 2)
    weights = maps["horizon_decoder.layers.0.cross_attn"]  # [B C, h, T_out, N_p + T_in + T_out]
    assert weights.shape == (6, 2, 12, model.n_patches + 60)
    # by hand: RevIN, patches, encoder, flatten head; queries over [z; W_u u + tau]
    mean, std = x.mean(1, keepdim=True), x.std(1, unbiased=False, keepdim=True) + 1e-5
    xn = ((x - mean) / std).transpose(1, 2).reshape(6, 48)
    z = model.backbone(model.embed(xn.unfold(-1, 8, 4)) + model.pos)  # [B C, N_p, D]
    tau = sinusoidal_table(60, 16, dtype=torch.float64)
    mem = torch.cat([z, (model.exog_embed(e) + tau).repeat_interleave(2, dim=0)], dim=1)
    q = (model.queries + tau[48:]).expand(6, -1, -1)
    o = model.horizon_decoder(q, mem, causal=False)
    y = model.head(z.flatten(1)) + model.query_head(o)[..., 0]  # [B C, T_out]
    ref = y.reshape(3, 2, 12) * std.transpose(1, 2) + mean.transpose(1, 2)
    assert torch.allclose(out, ref.transpose(1, 2), atol=1e-10)
    e2 = e.clone()
    e2[:, 55] += 1.0  # a covariate inside the horizon moves the forecast
    assert not torch.allclose(model(x, e2), out)
    with pytest.raises(ValueError, match="horizon_layers >= 1"):
        PatchForecaster(config, 48, 12, exog_mode="horizon", horizon_layers=0, **kw)


def test_horizon_query_can_find_its_own_step():
    """The time encoding shared by queries and covariate keys lets a query pick out its
    own step: with W_Q = W_K = identity (scaled) and no layer norm before the
    cross-attention, query h's largest weight among the covariate keys is on T_in + h."""
    torch.manual_seed(0)
    config = TransformerConfig(d_model=32, num_heads=1, num_layers=1, d_ff=32)
    model = PatchForecaster(config, 48, 12, patch_len=8, stride=4, n_exog=1, exog_mode="horizon")
    model = model.eval()
    block = model.horizon_decoder.layers[0]
    block.norm2 = nn.Identity()
    with torch.no_grad():
        eye = torch.eye(32) * 3.0
        block.cross_attn.in_proj_weight[:64] = torch.cat([eye, eye])  # W_Q, W_K
        block.cross_attn.in_proj_bias.zero_()
        for p in [
            model.exog_embed.weight,
            model.exog_embed.bias,
            *block.self_attn.out_proj.parameters(),
        ]:
            p.zero_()  # keys m_j = tau_j; the queries leave self-attention unchanged
    with record_attention(model) as maps:
        model(torch.randn(2, 48, 1), torch.randn(2, 60, 1))
    w = maps["horizon_decoder.layers.0.cross_attn"][0, 0, :, model.n_patches :]  # [T_out, 60]
    assert torch.equal(w.argmax(-1), torch.arange(48, 60))
