"""Chapter 14: TGAT's functional time encoding, eq. (14.6).

Covers course_lib.time_encoding.
"""

import pytest
import torch

from course_lib.time_encoding import time_encoding


def test_time_encoding_depends_on_elapsed_time_and_is_time2vec_without_its_trend():
    """TGAT's Phi (14.6): inner products depend on t1 - t2 only; each (cos, sin) pair is
    Time2Vec's periodic part with phases pi/2 and 0 (weights copied)."""
    from course_lib.timeseries import Time2Vec

    torch.manual_seed(0)
    omega = torch.rand(6) * 3
    t = torch.tensor([0.0, 1.5, 4.0, 7.25])
    phi = time_encoding(t, omega)
    assert phi.shape == (4, 12)
    assert torch.allclose(phi.norm(dim=-1), torch.ones(4))  # |Phi(t)| = 1
    shifted = time_encoding(t + 3.7, omega)
    assert torch.allclose(phi @ phi.T, shifted @ shifted.T, atol=1e-5)  # only t1 - t2 counts
    expected = torch.cos(omega * (t[1] - t[2])).mean()
    assert torch.allclose(phi[1] @ phi[2], expected, atol=1e-6)
    t2v = Time2Vec(12)
    with torch.no_grad():
        t2v.w.copy_(omega.repeat_interleave(2))
        t2v.b.copy_(torch.tensor([torch.pi / 2, 0.0]).repeat(6))
    assert torch.allclose(t2v(t)[..., 1:] / 6**0.5, phi, atol=1e-6)
    with pytest.raises(ValueError, match=r"time_encoding: omega"):
        time_encoding(t, omega[None])
