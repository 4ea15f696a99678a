"""Chapter 10: forecasting windows, the naive and seasonal baselines, the moving-average
decomposition, NLinear/DLinear and ETS.

Covers course_lib.forecasting; the patch forecaster is tested in test_timeseries.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from course_lib.forecasting import (
    DLinear,
    NLinear,
    ets_forecast,
    moving_average_decomposition,
    naive_forecast,
    seasonal_naive_drift_forecast,
    seasonal_naive_forecast,
    windows,
)


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


def test_seasonal_naive_drift_is_exact_on_trend_plus_season():
    t = torch.arange(200.0)
    series = 300 + 0.03 * t + torch.sin(2 * math.pi * t / 12)  # linear trend + period 12
    x, y = windows(series, 40, 30, [0, 17, 100])
    pred = seasonal_naive_drift_forecast(x, 30, season=12)
    assert torch.allclose(pred, y, atol=1e-3)  # the drift is the trend's growth per season
    assert not torch.allclose(seasonal_naive_forecast(x, 30, 12), y, atol=0.1)
    ref = torch.empty(3, 30)  # a loop over the definition
    for b in range(3):
        xb = x[b, :, 0]
        c = np.mean([float(xb[s] - xb[s - 12]) for s in range(12, 40)])
        for h in range(30):
            k = h // 12 + 1
            ref[b, h] = xb[40 + h - 12 * k] + k * c
    assert torch.allclose(pred[..., 0], ref, atol=1e-4)
    with pytest.raises(ValueError, match="at least 13 steps"):
        seasonal_naive_drift_forecast(x[:, :12], 5, 12)


@pytest.mark.parametrize("kernel", [1, 5, 25])
def test_moving_average_matches_pandas_rolling_mean(kernel):
    x = torch.randn(2, 3, 60, dtype=torch.float64)
    seasonal, trend = moving_average_decomposition(x, kernel)
    half = (kernel - 1) // 2
    for b in range(2):
        for c in range(3):
            values = x[b, c].numpy()
            inner = pd.Series(values).rolling(kernel, center=True).mean().to_numpy()
            ok = ~np.isnan(inner)  # the interior: no padding involved
            assert np.allclose(trend[b, c].numpy()[ok], inner[ok])
            padded = np.pad(values, half, mode="edge")  # DLinear's end padding
            full = pd.Series(padded).rolling(kernel, center=True).mean().to_numpy()
            assert np.allclose(trend[b, c].numpy(), full[half : half + 60])
    assert torch.allclose(seasonal + trend, x)


def test_moving_average_rejects_even_kernel():
    with pytest.raises(ValueError, match="odd.*got 26; use 27"):
        moving_average_decomposition(torch.randn(1, 1, 30), 25 + 1)


def test_nlinear_and_dlinear_match_their_equations():
    torch.manual_seed(0)
    x = torch.randn(4, 48, 2, dtype=torch.float64)
    nl = NLinear(48, 12).double()
    w, b = nl.linear.weight, nl.linear.bias
    last = x[:, -1:, :]
    ref = torch.einsum("ht,btc->bhc", w, x - last) + b[None, :, None] + last
    assert torch.allclose(nl(x), ref)
    assert torch.allclose(nl(x + 7.0), nl(x) + 7.0)  # a level shift passes through
    dl = DLinear(48, 12, kernel=9, normalize=False).double()
    s, r = moving_average_decomposition(x.transpose(1, 2), 9)
    ref = dl.seasonal(s) + dl.trend(r)
    assert torch.allclose(dl(x), ref.transpose(1, 2))
    dn = DLinear(48, 12, kernel=9).double()  # with RevIN: scale and shift pass through
    assert torch.allclose(dn(3 * x + 100), 3 * dn(x) + 100, atol=1e-6)
    assert dn(x).shape == (4, 12, 2)
    with pytest.raises(ValueError, match="T_in=48"):
        dl(torch.randn(4, 40, 2, dtype=torch.float64))


def test_ets_forecast_follows_statsmodels_and_recovers_a_clean_series():
    statsmodels = pytest.importorskip("statsmodels.tsa.holtwinters")
    t = np.arange(240.0)
    rng = np.random.default_rng(0)
    series = 10 + 0.05 * t + 2 * np.sin(2 * np.pi * t / 12) + 0.05 * rng.standard_normal(240)
    pred, weights = ets_forecast(series, 200, [200, 210, 220], 12, season=12)
    assert pred.shape == (3, 12, 1) and set(weights) == {"alpha", "beta", "gamma"}
    truth = torch.tensor(np.stack([series[o : o + 12] for o in (200, 210, 220)]))[..., None]
    assert (pred.double() - truth).abs().mean() < 0.15  # noise 0.05, trend and season known
    # from the first origin (the end of the fitting period) it is statsmodels' own forecast
    fit = statsmodels.ExponentialSmoothing(
        series[:200], trend="add", seasonal="add", seasonal_periods=12,
        initialization_method="estimated",
    ).fit()  # fmt: skip
    assert np.allclose(pred[0, :, 0].numpy(), fit.forecast(12), atol=1e-3)
    with pytest.raises(ValueError, match="train_end=200 <= o"):
        ets_forecast(series, 200, [190], 12, season=12)
