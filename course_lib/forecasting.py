"""Forecasting baselines: data windows, naive forecasts, linear forecasters, ETS (Chapter 10).

Shapes as in :mod:`course_lib.timeseries`: ``B`` windows, ``T_in`` look-back
(``context``), ``T_out`` horizon, ``C`` channels.  A forecaster is only as good as
the simplest thing it beats; these are the simple things.

* :func:`windows`: the sliding-window data set used to train and evaluate;
* :func:`naive_forecast`, :func:`seasonal_naive_forecast`,
  :func:`seasonal_naive_drift_forecast`: forecasts that need no training;
* :func:`moving_average_decomposition`, :class:`NLinear`, :class:`DLinear`,
  eqs. (10.5)-(10.6): the linear forecasters of Zeng et al. (2023), one linear map
  from the (normalised or decomposed) window to the horizon;
* :func:`ets_forecast`: Holt-Winters exponential smoothing (additive trend and
  season), ``statsmodels``' ``ExponentialSmoothing``, fitted once on the training
  period and run forward from each forecast origin with those parameters.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from course_lib.shapes import expect_shape
from course_lib.timeseries import RevIN

__all__ = [
    "windows",
    "naive_forecast",
    "seasonal_naive_forecast",
    "seasonal_naive_drift_forecast",
    "moving_average_decomposition",
    "NLinear",
    "DLinear",
    "ets_forecast",
]

# ---------------------------------------------------------------------------
# Data windows and baselines
# ---------------------------------------------------------------------------


def windows(
    series: Tensor, context: int, horizon: int, starts: Tensor | list[int]
) -> tuple[Tensor, Tensor]:
    """Cut ``(context, target)`` pairs from ``series [T, C]`` (or ``[T]``).

    Window ``i`` reads ``series[s : s + T_in]`` and targets ``series[s + T_in : s + T_in + T_out]``
    with ``s = starts[i]``.  Returns ``x [B, T_in, C]`` and ``y [B, T_out, C]``.
    """
    if series.dim() == 1:
        series = series[:, None]
    starts = torch.as_tensor(starts, dtype=torch.long)
    if len(starts) and (
        int(starts.min()) < 0 or int(starts.max()) + context + horizon > len(series)
    ):
        raise ValueError(
            f"windows: every start must satisfy 0 <= s and s + L + H <= T={len(series)} "
            f"(L={context}, H={horizon}, so 0 <= s <= {len(series) - context - horizon}); "
            f"got starts from {int(starts.min())} to {int(starts.max())}"
        )
    idx = starts[:, None] + torch.arange(context + horizon)  # [B, T_in + T_out]
    both = series[idx]  # [B, T_in + T_out, C]
    return both[:, :context], both[:, context:]


def naive_forecast(x: Tensor, horizon: int) -> Tensor:
    """Repeat the last observed value: ``x [B, T_in, C] -> [B, T_out, C]``."""
    return x[:, -1:].expand(-1, horizon, -1)


def seasonal_naive_forecast(x: Tensor, horizon: int, season: int) -> Tensor:
    """Repeat the last full season: ``y_hat[t + h] = x[t + h - m k]``, the smallest k >= 1.

    ``x [B, T_in, C] -> [B, T_out, C]``; needs ``T_in >= season``.
    """
    if x.shape[1] < season:
        raise ValueError(f"seasonal_naive_forecast: context {x.shape[1]} < season {season}")
    last = x[:, -season:]  # [B, m, C]
    reps = math.ceil(horizon / season)
    return last.repeat(1, reps, 1)[:, :horizon]


def seasonal_naive_drift_forecast(x: Tensor, horizon: int, season: int) -> Tensor:
    """Seasonal naive with drift: ``y_hat[t + h] = x[t + h - m k] + k c``, k the smallest k >= 1.

    ``c`` is the mean seasonal difference ``x[s] - x[s - m]`` over the window (the
    growth over one season), per window and channel: the forecast of a seasonal
    random walk with drift.  ``x [B, T_in, C] -> [B, T_out, C]``; needs ``T_in > season``.
    """
    if x.shape[1] <= season:
        raise ValueError(
            f"seasonal_naive_drift_forecast: context {x.shape[1]} must be longer than the "
            f"season {season} to estimate the drift (give at least {season + 1} steps)"
        )
    drift = (x[:, season:] - x[:, :-season]).mean(dim=1, keepdim=True)  # c     [B, 1, C]
    k = torch.arange(horizon, device=x.device) // season + 1  # seasons back   [T_out]
    return seasonal_naive_forecast(x, horizon, season) + k[None, :, None] * drift


# ---------------------------------------------------------------------------
# Linear forecasters (Zeng et al., 2023), eqs. (10.5)-(10.6)
# ---------------------------------------------------------------------------


def moving_average_decomposition(x: Tensor, kernel: int) -> tuple[Tensor, Tensor]:
    """Split ``x [B, C, T_in]`` into ``(seasonal, trend)``, both ``[B, C, T_in]``, eq. (10.6).

    The trend is a centred moving average of ``kernel`` (odd) steps; DLinear pads
    each end by repeating the first and last values ``(kernel - 1) // 2`` times so
    the trend keeps the window's length.  ``seasonal = x - trend``.
    """
    expect_shape("moving_average_decomposition", "x", x, [("B", None), ("C", None), ("T_in", None)])
    if kernel < 1 or kernel % 2 == 0:
        raise ValueError(
            f"moving_average_decomposition: kernel must be odd and >= 1 (a centred average), "
            f"got {kernel}; use {kernel + 1 if kernel > 0 else 1}"
        )
    half = (kernel - 1) // 2
    padded = torch.cat(
        [x[..., :1].expand(*x.shape[:-1], half), x, x[..., -1:].expand(*x.shape[:-1], half)], -1
    )  # [B, C, T_in + kernel - 1]
    trend = padded.unfold(-1, kernel, 1).mean(-1)  # [B, C, T_in]
    return x - trend, trend


class NLinear(nn.Module):
    """NLinear (Zeng et al., 2023), Chapter 10, eq. (10.5): one linear map on the shifted window.

    Per channel, with shared weights: ``y_hat = W (x - x_last) + b + x_last`` with
    ``W [T_out, T_in]``: subtracting the last value is the normalisation.
    ``forward(x [B, T_in, C]) -> [B, T_out, C]``.
    """

    def __init__(self, context: int, horizon: int) -> None:
        super().__init__()
        self.context = context
        self.linear = nn.Linear(context, horizon)  # W [T_out, T_in], b [T_out]

    def forward(self, x: Tensor) -> Tensor:
        expect_shape("NLinear", "x", x, [("B", None), ("T_in", self.context), ("C", None)])
        last = x[:, -1:]  # [B, 1, C]
        y = self.linear((x - last).transpose(1, 2))  # (10.5)   [B, C, T_out]
        return y.transpose(1, 2) + last  # [B, T_out, C]


class DLinear(nn.Module):
    """DLinear (Zeng et al., 2023), Chapter 10, eq. (10.6): linear maps of trend and remainder.

    ``(s, r) = moving_average_decomposition(x, kernel)`` and
    ``y_hat = W_s s + W_r r + b`` (``W_s, W_r [T_out, T_in]``), per channel with shared
    weights.  With ``normalize`` (default) the window goes through :class:`RevIN`
    first, as in the patch forecaster, so both models see the same normalised
    windows; the paper's DLinear has no normalisation.
    ``forward(x [B, T_in, C]) -> [B, T_out, C]``.
    """

    def __init__(
        self, context: int, horizon: int, kernel: int = 25, normalize: bool = True
    ) -> None:
        super().__init__()
        self.context, self.kernel = context, kernel
        self.revin = RevIN() if normalize else None
        self.seasonal = nn.Linear(context, horizon)  # W_s [T_out, T_in]
        self.trend = nn.Linear(context, horizon, bias=False)  # W_r [T_out, T_in]

    def forward(self, x: Tensor) -> Tensor:
        expect_shape("DLinear", "x", x, [("B", None), ("T_in", self.context), ("C", None)])
        series = x.transpose(1, 2)  # [B, C, T_in]
        if self.revin is not None:
            series = self.revin.normalize(series)
        s, r = moving_average_decomposition(series, self.kernel)  # (10.6)   [B, C, T_in] each
        y = self.seasonal(s) + self.trend(r)  # (10.6)  [B, C, T_out]
        if self.revin is not None:
            y = self.revin.denormalize(y)
        return y.transpose(1, 2)  # [B, T_out, C]


# ---------------------------------------------------------------------------
# Exponential smoothing (statsmodels)
# ---------------------------------------------------------------------------


def ets_forecast(
    series: Tensor | np.ndarray, train_end: int, origins: Tensor | list[int], horizon: int,
    season: int,
) -> tuple[Tensor, dict[str, float]]:  # fmt: skip
    """Holt-Winters forecasts (additive trend and season) from several origins.

    ``statsmodels.tsa.holtwinters.ExponentialSmoothing(trend="add", seasonal="add",
    seasonal_periods=season)`` is fitted once, by maximum likelihood, on
    ``series[:train_end]`` (smoothing weights and initial states).  From each
    origin ``o`` (``train_end <= o``), the same model with those parameters fixed
    filters ``series[:o]`` and forecasts ``series[o : o + horizon]``, as the
    trained forecasters do from their windows.  ``series [T]``; returns the
    forecasts ``[len(origins), horizon, 1]`` and the fitted smoothing weights
    ``{"alpha", "beta", "gamma"}``.
    """
    from statsmodels.tsa.holtwinters import ExponentialSmoothing  # only this function needs it

    values = np.asarray(series, dtype=np.float64).reshape(-1)
    origins = [int(o) for o in torch.as_tensor(origins).reshape(-1)]
    if not origins or min(origins) < train_end or max(origins) + horizon > len(values):
        raise ValueError(
            f"ets_forecast: every origin o needs train_end={train_end} <= o and "
            f"o + horizon <= {len(values)} (horizon={horizon}); got {origins}"
        )
    if train_end < 2 * season:
        raise ValueError(f"ets_forecast: need at least two seasons ({2 * season}) to fit")
    kw = dict(trend="add", seasonal="add", seasonal_periods=season)
    fitted = ExponentialSmoothing(values[:train_end], initialization_method="estimated", **kw).fit()
    p = fitted.params
    fixed = dict(
        smoothing_level=p["smoothing_level"], smoothing_trend=p["smoothing_trend"],
        smoothing_seasonal=p["smoothing_seasonal"],
    )  # fmt: skip
    known = dict(
        initialization_method="known", initial_level=p["initial_level"],
        initial_trend=p["initial_trend"], initial_seasonal=p["initial_seasons"],
    )  # fmt: skip
    preds = []
    for o in origins:  # the same parameters, filtered up to each origin
        model = ExponentialSmoothing(values[:o], **kw, **known)
        preds.append(model.fit(**fixed, optimized=False).forecast(horizon))
    weights = {"alpha": fixed["smoothing_level"], "beta": fixed["smoothing_trend"],
               "gamma": fixed["smoothing_seasonal"]}  # fmt: skip
    return torch.tensor(np.stack(preds), dtype=torch.float32)[..., None], weights
