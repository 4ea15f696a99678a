"""Chapter 10: temporal encodings, patching, the patch forecaster and the baselines."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from torch import nn

from course_lib.timeseries import (
    PatchForecaster,
    Time2Vec,
    calendar_features,
    naive_forecast,
    num_patches,
    patchify,
    seasonal_naive_forecast,
    windows,
)


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
    model = PatchForecaster(48, 12, patch_len=8, stride=4, d_model=16, num_heads=2).eval()
    x = torch.randn(3, 48, 4) * 5 + 100
    y = model(x)
    assert y.shape == (3, 12, 4)
    perm = torch.tensor([2, 0, 3, 1])
    assert torch.allclose(model(x[..., perm]), y[..., perm], atol=1e-4)  # channels independent
    assert torch.allclose(model(x * 2 + 3), y * 2 + 3, atol=1e-3)  # RevIN: scale and shift out
    with pytest.raises(ValueError, match="T_in=48"):
        model(torch.randn(3, 40, 1))
    exo = PatchForecaster(48, 12, patch_len=8, stride=4, d_model=16, num_heads=2, n_exog=3)
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
    exo = PatchForecaster(48, 12, patch_len=8, stride=4, d_model=16, num_heads=2, n_exog=1).eval()
    x, e = torch.randn(2, 48, 1), torch.zeros(2, 60, 1)
    e2 = e.clone()
    e2[:, 55] = 1.0  # an event in the horizon
    assert not torch.allclose(exo(x, e), exo(x, e2))


def test_windows_and_baselines():
    series = torch.arange(20.0)
    x, y = windows(series, 6, 3, [0, 5])
    assert x.shape == (2, 6, 1) and y.shape == (2, 3, 1)
    assert torch.equal(y[1, :, 0], torch.tensor([11.0, 12.0, 13.0]))
    assert torch.equal(naive_forecast(x, 3)[1, :, 0], torch.tensor([10.0] * 3))
    season = seasonal_naive_forecast(x, 5, season=4)[1, :, 0]
    assert torch.equal(season, torch.tensor([7.0, 8.0, 9.0, 10.0, 7.0]))
    with pytest.raises(ValueError, match="start"):
        windows(series, 6, 3, [15])


def test_windows_error_names_the_valid_range():
    with pytest.raises(ValueError, match=r"L=6, H=3, so 0 <= s <= 11\); got starts from 5 to 15"):
        windows(torch.arange(20.0), 6, 3, [5, 15])
