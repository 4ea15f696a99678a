"""Swin's window attention: attention inside non-overlapping windows of patches (Chapter 13).

Liu et al. (2021) restore locality to the Vision Transformer: the ``height x width``
grid of patch tokens is cut into ``window x window`` windows, and each token attends only
to the tokens of its own window.  The next layer moves the windows by
``shift = window // 2`` tokens, so that information crosses the old window borders.

Two ways to compute the same thing:

* as **full attention with a mask** (:func:`window_attention_mask`): token ``i``
  may attend to token ``j`` iff they lie in the same window; simple, but it still
  computes all ``N_p^2`` scores (``N_p = height * width``);
* as **a batch of small attentions** (:func:`window_attention`): the windows are
  cut out of the grid and attention runs inside each one, ``N_p window^2`` scores in all,
  linear in the number of tokens.  A shifted layer rolls the grid by ``-shift``
  first (Swin's "cyclic shift"), so that every window is again a full
  ``window x window`` block, and masks the pairs that the roll brought together from opposite edges.

With ``shift = s`` the windows start at rows and columns ``s, s + window, ...``; the
first ``s`` rows (and columns) form a smaller window of their own, as do the
cut-off last ones.  Shapes (``book/notation.md``): ``B`` batch, ``h`` heads,
``N_p = height * width`` patch tokens in row-major order, ``d`` head width; the
window size is written out as ``window`` (``M`` in the Swin paper, a letter the
course keeps for masks).
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_lib.masks import masked_softmax
from course_lib.shapes import fmt_shape

__all__ = ["window_ids", "window_attention_mask", "window_attention"]


def _check_grid(where: str, height: int, width: int, window: int, shift: int) -> None:
    if window < 1 or height % window or width % window:
        raise ValueError(
            f"{where}: the grid {height}x{width} must be a multiple of the window size "
            f"{window} (pad the grid, or pick a window that divides it)"
        )
    if not 0 <= shift < window:
        raise ValueError(f"{where}: shift must be in [0, window={window}), got {shift}")


def window_ids(
    height: int,
    width: int,
    window: int,
    shift: int = 0,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """The window each token belongs to, ``[N_p]`` (row-major), windows offset by ``shift``.

    Row ``r`` lies in window row ``floor((r - shift) / window)`` (``-1`` for the first
    ``shift`` rows), columns likewise; the id is unique per (window row, window column).
    """
    _check_grid("window_ids", height, width, window, shift)
    rows = torch.div(torch.arange(height, device=device) - shift, window, rounding_mode="floor")
    cols = torch.div(torch.arange(width, device=device) - shift, window, rounding_mode="floor")
    per_row = width // window + 1  # window columns -1 .. width/window - 1
    return ((rows[:, None] + 1) * per_row + (cols[None, :] + 1)).flatten()  # [N_p]


def window_attention_mask(
    height: int,
    width: int,
    window: int,
    shift: int = 0,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """The mask ``[N_p, N_p]`` (True = may attend) of window attention: the same window."""
    ids = window_ids(height, width, window, shift, device=device)
    return ids[:, None] == ids[None, :]


def _to_windows(x: Tensor, height: int, width: int, window: int) -> Tensor:
    """``[B, h, N_p, d]`` -> ``[B, h, n_w, window^2, d]``, each window's tokens row by row."""
    b, heads, _, d = x.shape
    m = window
    x = x.reshape(b, heads, height // m, m, width // m, m, d)
    x = x.permute(0, 1, 2, 4, 3, 5, 6)  # [B, h, height/window, width/window, window, window, d]
    return x.reshape(b, heads, (height // m) * (width // m), m * m, d)


def _from_windows(x: Tensor, height: int, width: int, window: int) -> Tensor:
    """The inverse of :func:`_to_windows`: ``[B, h, n_w, window^2, d]`` -> ``[B, h, N_p, d]``."""
    b, heads, _, _, d = x.shape
    m = window
    x = x.reshape(b, heads, height // m, width // m, m, m, d)
    x = x.permute(0, 1, 2, 4, 3, 5, 6)  # [B, h, height/window, window, width/window, window, d]
    return x.reshape(b, heads, height * width, d)


def _roll(x: Tensor, height: int, width: int, by: int) -> Tensor:
    """Roll the token grid of ``x`` [B, h, N_p, d] by ``by`` rows and columns (cyclically)."""
    grid = x.reshape(*x.shape[:2], height, width, x.shape[-1])
    return grid.roll((by, by), dims=(2, 3)).reshape(x.shape)


def _check_windows(
    query: Tensor, key: Tensor, value: Tensor, height: int, width: int, window: int, shift: int
) -> None:
    """Raise unless :func:`window_attention`'s grid splits into windows and ``query``, ``key``
    and ``value`` are [B, h, N_p = height * width, d]."""
    _check_grid("window_attention", height, width, window, shift)
    if query.dim() != 4 or query.shape[-2] != height * width:
        raise ValueError(
            f"window_attention: query must be [B, h, N_p={height * width}, d], "
            f"got {fmt_shape(query.shape)}"
        )
    if key.shape != query.shape or value.shape != query.shape:
        raise ValueError(
            f"window_attention: key and value must have the query's shape {fmt_shape(query.shape)}, "
            f"got {fmt_shape(key.shape)} and {fmt_shape(value.shape)}"
        )


def window_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    height: int,
    width: int,
    window: int,
    shift: int = 0,
) -> Tensor:
    """Scaled dot-product attention inside ``window x window`` windows, cost linear in ``N_p``.

    ``query``, ``key``, ``value`` [B, h, N_p, d] with ``N_p = height * width`` tokens
    in row-major order.  Equal to full attention (Chapter 3, eq. (3.2)) under
    :func:`window_attention_mask` ``(height, width, window, shift)``, but computes
    only ``N_p window^2`` scores: ``[B, h, n_w, window^2, window^2]`` for the
    ``n_w = N_p / window^2`` windows.  Returns ``[B, h, N_p, d]``.
    """
    _check_windows(query, key, value, height, width, window, shift)
    q, k, v = (_roll(t, height, width, -shift) for t in (query, key, value))  # cyclic shift
    q, k, v = (_to_windows(t, height, width, window) for t in (q, k, v))  # [B, h, n_w, window^2, d]
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # [B, h, n_w, window^2, window^2]
    mask = None
    if shift:  # the tokens' true windows, rolled like the grid: pairs from different ones masked
        ids = window_ids(height, width, window, shift, device=query.device)  # [N_p]
        ids = _roll(ids.view(1, 1, -1, 1), height, width, -shift)
        ids = _to_windows(ids, height, width, window)[0, 0, :, :, 0]  # [n_w, window^2]
        mask = ids[:, :, None] == ids[:, None, :]  # [n_w, window^2, window^2]
    out = masked_softmax(scores, mask) @ v  # [B, h, n_w, window^2, d]
    out = _from_windows(out, height, width, window)  # [B, h, N_p, d]
    return _roll(out, height, width, shift)  # undo the cyclic shift
