"""Attention for time series: temporal encodings, patching, a patch Transformer (Chapter 10).

Shapes (``book/notation.md``): ``B`` batch, ``T_in`` look-back window (past
steps the model reads, ``context``), ``T_out`` horizon (future steps it
predicts), ``C`` channels (variables of the series), ``P`` patch length,
``N_p`` patches of the series, ``N_x`` patches of the covariates, ``D`` model
width, ``C_x`` exogenous covariates, ``k`` periodic components of Time2Vec.

* :class:`Time2Vec`, eq. (10.1): one affine and ``k`` periodic components of time;
* :func:`calendar_features`, eq. (10.2): sine/cosine of the position in the year
  (and optionally the month as one-hot) from a ``pandas.DatetimeIndex``;
* :func:`patchify`, eq. (10.3): overlapping windows ``[B, C, T_in] -> [B, C, N_p, P]``
  with ``N_p = (T_in - P) // stride + 1`` (PatchTST's end padding optional);
* :class:`PatchForecaster`, eq. (10.4): a channel-independent PatchTST-style
  forecaster (instance normalisation, patch embedding, a pre-norm
  :class:`course_lib.transformer.Encoder`, a flatten-linear head);  with
  ``n_exog > 0`` its blocks are :class:`course_lib.blocks.DecoderBlock` without the
  causal mask, so the patch tokens *cross-attend* to embedded exogenous
  covariates (past and known future), eq. (10.7);
  ``exog_mode="concat"`` is the control without attention: the covariates are
  concatenated to the flattened encoder output before the head;
  ``exog_mode="horizon"`` adds one learned query per *future* step that
  cross-attends to the encoded history and to the covariates step by step,
  eq. (10.8) (the decoder of encoder-decoder forecasters such as the TFT);
* the baselines (naive, seasonal naive, NLinear, DLinear, ETS) live in
  :mod:`course_lib.forecasting`;
* :class:`RelativeTimeBias`, eq. (10.9): an attention bias that is a learned
  function of the time *difference* between query and key, for irregular time
  stamps; it reads the difference through TGAT's time encoding
  (:func:`course_lib.time_encoding.time_encoding`, Chapter 14, eq. (14.6)).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from course_lib.config import TransformerConfig, check_config
from course_lib.positional import sinusoidal_table
from course_lib.shapes import expect_shape
from course_lib.transformer import Decoder, Encoder

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Time2Vec",
    "calendar_features",
    "patchify",
    "num_patches",
    "RevIN",
    "PatchForecaster",
    "RelativeTimeBias",
]


# ---------------------------------------------------------------------------
# Temporal encodings, eqs. (10.1)-(10.2)
# ---------------------------------------------------------------------------


class Time2Vec(nn.Module):
    """Time2Vec (Kazemi et al., 2019), Chapter 10, eq. (10.1).

    ``t2v(tau)[0] = w_0 tau + b_0`` (affine: the trend) and
    ``t2v(tau)[i] = sin(w_i tau + b_i)`` for ``i = 1 .. k`` (periodic, period
    ``2 pi / w_i``, all learned).  ``forward(tau [...]) -> [..., k + 1]``; a
    scalar time per position (``in_features = 1``).  ``periods`` optionally
    initialises the ``k`` periodic frequencies as ``2 pi / period``.
    """

    def __init__(self, k: int, periods: list[float] | Tensor | None = None) -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"Time2Vec: k must be >= 1, got {k}")
        self.k = k
        self.w0 = nn.Parameter(torch.randn(()))
        self.b0 = nn.Parameter(torch.randn(()))
        if periods is None:
            w = torch.randn(k)
        else:
            periods = torch.as_tensor(periods, dtype=torch.float32)
            if periods.shape != (k,) or bool((periods <= 0).any()):
                raise ValueError(f"Time2Vec: periods must be {k} positive numbers")
            w = 2 * math.pi / periods
        self.w = nn.Parameter(w)  # [k]
        self.b = nn.Parameter(torch.rand(k) * 2 * math.pi)  # [k]

    def forward(self, tau: Tensor) -> Tensor:
        tau = tau.to(self.w.dtype).unsqueeze(-1)  # [..., 1]
        linear = self.w0 * tau + self.b0  # (10.1) affine component          [..., 1]
        periodic = torch.sin(tau * self.w + self.b)  # (10.1) periodic ones   [..., k]
        return torch.cat([linear, periodic], dim=-1)  # [..., k + 1]

    def extra_repr(self) -> str:
        return f"k={self.k}"


def _check_calendar(index: pd.DatetimeIndex, harmonics: int) -> None:
    """Raise unless ``index`` is a pandas.DatetimeIndex and ``harmonics`` >= 1."""
    if not hasattr(index, "day_of_year"):
        raise TypeError(
            f"calendar_features: needs a pandas.DatetimeIndex, got {type(index).__name__}"
        )
    if harmonics < 1:
        raise ValueError(f"calendar_features: harmonics must be >= 1, got {harmonics}")


def calendar_features(
    index: pd.DatetimeIndex, harmonics: int = 2, month_one_hot: bool = False
) -> Tensor:
    """Calendar features of a ``DatetimeIndex``, Chapter 10, eq. (10.2).

    For ``j = 1 .. harmonics``: ``sin(2 pi j a)`` and ``cos(2 pi j a)`` with
    ``a = (day of year - 1) / days in that year`` the fraction of the year
    elapsed; with ``month_one_hot`` twelve more 0/1 columns.  Returns float32
    ``[T, 2 * harmonics (+ 12)]``.  Known in advance for any future date.
    """
    _check_calendar(index, harmonics)
    days = np.where(index.is_leap_year, 366.0, 365.0)
    a = (np.asarray(index.day_of_year, dtype=np.float64) - 1.0) / days  # [T]
    cols = []
    for j in range(1, harmonics + 1):
        cols += [np.sin(2 * np.pi * j * a), np.cos(2 * np.pi * j * a)]
    if month_one_hot:
        cols += list(np.eye(12)[np.asarray(index.month) - 1].T)
    return torch.tensor(np.stack(cols, axis=-1), dtype=torch.float32)


# ---------------------------------------------------------------------------
# Patching, eq. (10.3)
# ---------------------------------------------------------------------------


def num_patches(length: int, patch_len: int, stride: int, pad_end: bool = False) -> int:
    """``N = (L - P) // S + 1`` (+1 with PatchTST's end padding of ``S`` steps)."""
    if min(patch_len, stride) < 1 or length < patch_len:
        raise ValueError(
            f"num_patches: need patch_len, stride >= 1 and length >= patch_len, got "
            f"L={length}, P={patch_len}, S={stride}"
        )
    return (length - patch_len) // stride + 1 + int(pad_end)


def patchify(x: Tensor, patch_len: int, stride: int, pad_end: bool = False) -> Tensor:
    """Cut each channel into overlapping patches, Chapter 10, eq. (10.3).

    ``x [B, C, T_in] -> [B, C, N_p, P]`` with patch ``n`` equal to
    ``x[..., n stride : n stride + P]`` and ``N_p = (T_in - P) // stride + 1``.  Channels are
    patched independently (PatchTST's *channel independence*).  With
    ``pad_end`` the last value is repeated ``S`` times first, as PatchTST does,
    which adds one patch.  Steps after the last full patch are dropped.
    """
    expect_shape("patchify", "x", x, [("B", None), ("C", None), ("T_in", None)])
    n = num_patches(x.shape[-1], patch_len, stride, pad_end)
    if pad_end:
        x = torch.cat([x, x[..., -1:].expand(*x.shape[:-1], stride)], dim=-1)
    starts = torch.arange(n, device=x.device) * stride  # [N_p]
    idx = starts[:, None] + torch.arange(patch_len, device=x.device)  # [N_p, P]
    return x[..., idx]  # (10.3) gather: [B, C, N_p, P]


# ---------------------------------------------------------------------------
# The forecaster, eqs. (10.4) and (10.7)
# ---------------------------------------------------------------------------


class RevIN(nn.Module):
    """Instance normalisation of each window (Kim et al., 2022), without affine weights.

    ``normalize(x [B, C, T_in])`` subtracts each channel's mean over the window and
    divides by its standard deviation (+ ``eps``), remembering both;
    ``denormalize(y [B, C, T_out])`` undoes it on the forecast.  It lets one model
    serve a series whose level drifts (a trend) far outside the training range.
    """

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self._stats: tuple[Tensor, Tensor] | None = None

    def normalize(self, x: Tensor) -> Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        std = x.std(dim=-1, keepdim=True, unbiased=False) + self.eps
        self._stats = (mean, std)
        return (x - mean) / std

    def denormalize(self, y: Tensor) -> Tensor:
        if self._stats is None:
            raise RuntimeError("RevIN.denormalize called before normalize")
        mean, std = self._stats
        return y * std + mean


class PatchForecaster(nn.Module):
    """A channel-independent patch Transformer (PatchTST-style), Chapter 10, eq. (10.4).

    For each channel separately: normalise the window (:class:`RevIN`), cut it
    into ``N`` patches (:func:`patchify`), embed each patch linearly and add a
    learned position, run a pre-norm Transformer encoder, flatten the ``N x D``
    tokens and map them linearly to the ``H`` future values, then denormalise::

        z = Encoder(W_p patches + W_pos),    y_hat = W_h flatten(z) + b_h.

    ``PatchForecaster(config, context, horizon, ...)``: ``config`` sets the
    trunk (the chapter's is pre-norm, ReLU: ``TransformerConfig(d_model=32,
    d_ff=64)``); ``config.max_len`` is not read (the patch count is set by
    ``context``).  ``forward(x [B, T_in, C], exog=None) -> [B, T_out, C]``.

    Exogenous covariates, eq. (10.7): with ``n_exog = E > 0`` the forward pass
    takes ``exog [B, T_in + T_out, C_x]`` (the covariates over the context *and* the
    horizon, so they must be known in advance: calendar, holidays, planned
    events).  They are cut into patches like the series (``N_x`` windows of all
    ``E`` covariates, each embedded by ``Linear(E P, D)`` plus a learned
    position) and the blocks become
    :class:`course_lib.blocks.DecoderBlock` without a causal mask:
    self-attention among patches, then cross-attention from the patches
    (queries) to the covariate patches (keys and values), then the feed-forward.

    ``exog_mode="concat"`` is the control without cross-attention: the encoder
    is the plain one, and the head reads the flattened encoder output
    concatenated with the raw covariates over context and horizon,
    ``y_hat = W_h [flatten(z); flatten(u)] + b_h`` (``W_h [T_out, N_p D + (T_in + T_out) C_x]``).

    ``exog_mode="horizon"``, eq. (10.8): horizon queries.  The encoder is the plain
    one and its flatten-linear head stays; one query per *future* step
    ``h = 1 .. T_out``, ``q_h = e_h + tau_{T_in + h}`` (``e_h`` learned, zero at the
    start; ``tau`` Chapter 7's sinusoidal table, eq. (7.1), a time encoding shared
    with the keys), goes through ``horizon_layers`` pre-norm
    :class:`course_lib.blocks.DecoderBlock` (no causal mask) whose memory is
    the encoded history ``z`` *and* one token per covariate step,
    ``m_j = W_u u_j + tau_j`` (``j = 1 .. T_in + T_out``).  Each query's output
    ``o_h [D]`` adds one number to its own step:
    ``y_hat_h = (W_h flatten(z) + b_h)_h + w_o^T o_h + b_o``.
    """

    def __init__(
        self,
        config: TransformerConfig,
        context: int,
        horizon: int,
        patch_len: int = 16,
        stride: int = 8,
        n_exog: int = 0,
        pad_end: bool = False,
        exog_mode: str = "cross",
        horizon_layers: int = 1,
    ) -> None:
        super().__init__()
        self.config = c = check_config("PatchForecaster", config)
        d_model = c.d_model
        if horizon < 1 or n_exog < 0 or horizon_layers < 1:
            raise ValueError(
                f"PatchForecaster: need horizon >= 1, n_exog >= 0, horizon_layers >= 1; got "
                f"{horizon}, {n_exog}, {horizon_layers}"
            )
        if exog_mode not in ("cross", "concat", "horizon"):
            raise ValueError(
                f"PatchForecaster: exog_mode must be 'cross' (cross-attention from the patches, "
                f"eq. (10.7)), 'concat' (covariates concatenated before the head) or 'horizon' "
                f"(one query per future step, eq. (10.8)), got {exog_mode!r}"
            )
        self.context, self.horizon, self.n_exog = context, horizon, n_exog
        self.exog_mode = exog_mode if n_exog else None
        self.patch_len, self.stride, self.pad_end = patch_len, stride, pad_end
        self.n_patches = num_patches(context, patch_len, stride, pad_end)
        self.revin = RevIN()
        self.embed = nn.Linear(patch_len, d_model)  # W_p [D, P]
        self.pos = nn.Parameter(torch.randn(self.n_patches, d_model) * 0.02)  # W_pos [N_p, D]
        self.dropout = nn.Dropout(c.dropout)
        n_head_in = self.n_patches * d_model
        if self.exog_mode == "cross":  # covariates are patched: [B, C_x, N_x, P] -> [B, N_x, C_x P]
            self.n_exog_patches = num_patches(context + horizon, patch_len, stride)
            self.exog_embed = nn.Linear(n_exog * patch_len, d_model)  # [D, C_x P]
            self.exog_pos = nn.Parameter(torch.randn(self.n_exog_patches, d_model) * 0.02)
            self.backbone: nn.Module = Decoder(c)
        else:
            self.backbone = Encoder(c)
        if self.exog_mode == "concat":  # the control: raw covariates next to flatten(z)
            n_head_in += (context + horizon) * n_exog
        if self.exog_mode == "horizon":  # (10.8): one query per future step
            self.exog_embed = nn.Linear(n_exog, d_model)  # W_u [D, C_x]
            tau = sinusoidal_table(context + horizon, d_model)  # [T_in + T_out, D]
            self.register_buffer("tau", tau, persistent=False)
            self.queries = nn.Parameter(torch.zeros(horizon, d_model))  # e_h [T_out, D]
            self.horizon_decoder = Decoder(c.replace(num_layers=horizon_layers))
            self.query_head = nn.Linear(d_model, 1)  # w_o [1, D], b_o
        self.head = nn.Linear(n_head_in, horizon)  # W_h [T_out, N_p D (+ (T_in + T_out) C_x)]

    def _check_exog(self, b: int, exog: Tensor | None) -> None:
        if self.n_exog and exog is None:
            raise ValueError(
                f"PatchForecaster: this model was built with n_exog={self.n_exog}, so it "
                f"needs exog [B, T_in + T_out={self.context + self.horizon}, "
                f"C_x={self.n_exog}]: the covariates over the window and the horizon"
            )
        if self.n_exog:
            dims = [("B", b), ("T_in + T_out", self.context + self.horizon), ("C_x", self.n_exog)]
            expect_shape("PatchForecaster", "exog", exog, dims)
        elif exog is not None:
            raise ValueError("PatchForecaster: built with n_exog=0 but given exog")

    def forward(self, x: Tensor, exog: Tensor | None = None) -> Tensor:
        expect_shape("PatchForecaster", "x", x, [("B", None), ("T_in", self.context), ("C", None)])
        b, length, c = x.shape
        self._check_exog(b, exog)
        series = self.revin.normalize(x.transpose(1, 2))  # [B, C, T_in]
        patches = patchify(series, self.patch_len, self.stride, self.pad_end)  # [B, C, N_p, P]
        tokens = patches.reshape(b * c, self.n_patches, self.patch_len)  # channel independence
        z = self.dropout(self.embed(tokens) + self.pos)  # (10.4)        [B C, N_p, D]
        if self.exog_mode == "cross":
            cov = patchify(exog.transpose(1, 2), self.patch_len, self.stride)  # [B, C_x, N_x, P]
            cov = cov.transpose(1, 2).flatten(2)  # [B, N_x, C_x P]
            mem = self.exog_embed(cov) + self.exog_pos  # (10.7)           [B, N_x, D]
            mem = mem.repeat_interleave(c, dim=0)  # one copy per channel [B C, N_x, D]
            z = self.backbone(z, mem, causal=False)
        else:
            z = self.backbone(z)
        if self.exog_mode == "concat":
            u = exog.flatten(1).repeat_interleave(c, dim=0)  # [B C, (T_in + T_out) C_x]
            y = self.head(torch.cat([z.flatten(1), u], dim=1))  # [B C, T_out]
        else:
            y = self.head(z.flatten(1))  # (10.4)                        [B C, T_out]
        if self.exog_mode == "horizon":
            y = y + self._horizon_queries(z, exog, c)
        y = y.reshape(b, c, self.horizon)  # [B, C, T_out]
        return self.revin.denormalize(y).transpose(1, 2)  # [B, T_out, C]

    def _horizon_queries(self, z: Tensor, exog: Tensor, c: int) -> Tensor:
        """Eq. (10.8): ``w_o^T o_h + b_o`` for each future step ``h``, ``[B C, T_out]``."""
        u = (
            self.exog_embed(exog.to(z.dtype)) + self.tau
        )  # m_j = W_u u_j + tau_j [B, T_in + T_out, D]
        mem = torch.cat([z, u.repeat_interleave(c, dim=0)], dim=1)  # [B C, N_p + T_in + T_out, D]
        q = (self.queries + self.tau[self.context :]).expand(z.shape[0], -1, -1)  # [B C, T_out, D]
        o = self.horizon_decoder(q, mem, causal=False)  # (10.8)               [B C, T_out, D]
        return self.query_head(o)[..., 0]  # [B C, T_out]


# ---------------------------------------------------------------------------
# Relative temporal encoding: a bias on time differences, eq. (10.9)
# ---------------------------------------------------------------------------


class RelativeTimeBias(nn.Module):
    """An attention bias that is a learned function of elapsed time, Chapter 10, eq. (10.9).

    For query times ``t_q [B, T]`` and key times ``t_k [B, S]`` (any real numbers:
    irregular sampling is the point), head ``r``'s bias is

        ``bias[b, r, i, j] = a_r^T Phi(t_q[b, i] - t_k[b, j]) + c_r``

    with ``Phi`` TGAT's time encoding (:func:`course_lib.time_encoding.time_encoding`,
    Chapter 14, eq. (14.6)) at frequencies ``omega = 2 pi / periods``, fixed
    unless ``learn_frequencies``; ``a_r [2d]``, ``c_r`` learned.  It depends on the
    differences only, so shifting every time stamp changes nothing; add it to the
    attention scores (a float ``mask`` of :class:`course_lib.attention.MultiHeadAttention`),
    as ALiBi adds a penalty on the *index* distance (Chapter 8, eq. (8.5)).
    ``forward(t_q [B, T], t_k [B, S]) -> [B, h, T, S]``.
    """

    def __init__(
        self, num_heads: int, periods: list[float] | Tensor, learn_frequencies: bool = False
    ) -> None:
        super().__init__()
        periods = torch.as_tensor(periods, dtype=torch.float32)
        if periods.dim() != 1 or len(periods) == 0 or bool((periods <= 0).any()):
            raise ValueError("RelativeTimeBias: periods must be a 1-D list of positive numbers")
        omega = 2 * math.pi / periods  # [d]
        if learn_frequencies:
            self.omega = nn.Parameter(omega)
        else:
            self.register_buffer("omega", omega)
        self.proj = nn.Linear(2 * len(periods), num_heads)  # a_r (rows), c_r   [h, 2d]

    def forward(self, t_q: Tensor, t_k: Tensor) -> Tensor:
        expect_shape("RelativeTimeBias", "t_q", t_q, [("B", None), ("T", None)])
        expect_shape("RelativeTimeBias", "t_k", t_k, [("B", t_q.shape[0]), ("S", None)])
        # beta(t_q - t_k) = a^T Phi(t_q - t_k) + c, Phi = time_encoding (Chapter 14, eq. (14.6)),
        # whose entries alternate cos(w_k dt) and sin(w_k dt).  With cos(x - y) = cos x cos y +
        # sin x sin y and sin(x - y) = sin x cos y - cos x sin y it is the product of a vector
        # per query time and one per key time: no [B, T, S, 2d] encoding of every pair.
        d = len(self.omega)
        a = self.proj.weight.unflatten(1, (d, 2)) / d**0.5  # cos and sin read-outs  [h, d, 2]
        a_cos, a_sin = a[:, None, :, 0], a[:, None, :, 1]  # [h, 1, d]

        def cos_sin(t: Tensor) -> tuple[Tensor, Tensor]:  # [B, n] -> [B, 1, n, d] twice
            angles = (t.double().unsqueeze(-1) * self.omega.double()).unsqueeze(1)  # float64:
            return angles.cos().to(a.dtype), angles.sin().to(a.dtype)  # large times stay exact

        (cq, sq), (ck, sk) = cos_sin(t_q), cos_sin(t_k)
        query = torch.cat([a_cos * cq + a_sin * sq, a_cos * sq - a_sin * cq], -1)  # [B, h, T, 2d]
        key = torch.cat([ck, sk], -1)  # [B, 1, S, 2d]
        return query @ key.transpose(-1, -2) + self.proj.bias[:, None, None]  # (10.9) [B, h, T, S]
