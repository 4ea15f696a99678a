"""TGAT's functional time encoding (Chapter 14, eq. (14.6)), shared with Chapter 10.

A continuous-time sinusoidal encoding: the inner product of the encodings of two
times depends only on the time elapsed between them.  Chapter 14's temporal
graph attention (TGAT, Xu et al., 2020) introduces it; Chapter 10's
:class:`course_lib.timeseries.RelativeTimeBias` reads the difference between
irregular time stamps through it.  It sits beside neither chapter's module so
that neither imports the other.

Shapes (``book/notation.md``): ``d`` frequencies, any leading shape ``...``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_lib.shapes import expect_shape

__all__ = ["time_encoding"]


def time_encoding(t: Tensor, omega: Tensor) -> Tensor:
    """TGAT's functional time encoding, Chapter 14, eq. (14.6).

    ``Phi(t) = sqrt(1/d) [cos(w_1 t), sin(w_1 t), ..., cos(w_d t), sin(w_d t)]`` for
    times (or time differences) ``t`` [...] and learned frequencies ``omega`` [d];
    returns [..., 2d].  The inner product of two encodings is
    ``(1/d) sum_k cos(w_k (t_1 - t_2))``: it depends on the elapsed time only, as
    sinusoidal positions do on the offset (Chapter 7).  Each pair is Time2Vec's
    periodic part (Chapter 10, eq. (10.1)) with phases pi/2 and 0, without its
    linear term.
    """
    expect_shape("time_encoding", "omega", omega, [("d", None)])
    angles = t.to(omega.dtype).unsqueeze(-1) * omega  # w_k t                 [..., d]
    pairs = torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)  #     [..., d, 2]
    return pairs.flatten(-2) / omega.shape[0] ** 0.5  # (14.6)                [..., 2d]
