"""course_lib.positional (Chapter 7) against its own equations.

Property tests: the sinusoidal table and its shift matrix, the learned table,
and clear errors.  Chapter 8's relative positions are tested in
``tests/test_relative.py``, the controls of the extrapolation experiment in
``tests/test_lm.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import positional as P
from course_lib import relative as R


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------
# Chapter 7: sinusoidal and learned tables
# ---------------------------------------------------------------------------


def test_sinusoidal_table_matches_the_formula():
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same), written independently."""
    length, dim = 50, 12
    table = P.sinusoidal_table(length, dim, dtype=torch.float64)
    for p in (0, 1, 7, 49):
        for i in range(dim // 2):
            angle = p / 10000 ** (2 * i / dim)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)


def test_sinusoidal_d4_example():
    """The d = 4 example of Chapter 7 (the notes' second and fourth entries are wrong)."""
    pe = P.sinusoidal_table(2, 4, dtype=torch.float64)
    expected = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert torch.allclose(pe[1], torch.tensor(expected, dtype=torch.float64))
    assert abs(pe[1, 1].item() - 0.995) > 0.4  # the notes' cos(0.1)


@pytest.mark.parametrize("k", [1, 3, 17, 250])
def test_shift_matrix_maps_every_position(k):
    """PE(p + k) = M_k PE(p) for all p, with one M_k."""
    dim, length = 16, 400
    pe = P.sinusoidal_table(length + k, dim, dtype=torch.float64)
    m = P.shift_matrix(k, dim)
    assert torch.allclose(pe[k:], pe[:length] @ m.T, atol=1e-9)


def test_shift_matrix_is_orthogonal_and_composes():
    dim = 10
    m3, m5, m8 = (P.shift_matrix(k, dim) for k in (3, 5, 8))
    assert torch.allclose(m3 @ m3.T, torch.eye(dim, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(m3 @ m5, m8, atol=1e-12)
    assert torch.allclose(P.shift_matrix(-3, dim), m3.T, atol=1e-12)  # M_(-k) = M_k^T


def test_learned_positions_stop_at_max_len():
    table = P.LearnedPositions(8, 4)
    assert table(8).shape == (8, 4)
    assert torch.equal(table(3, offset=5), table.weight[5:8])
    with pytest.raises(ValueError, match="position 8 has no row"):
        table(9)


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="even"):
        P.sinusoidal_table(4, 5)
    with pytest.raises(ValueError, match="even"):
        R.rope_permutation(7)
    with pytest.raises(ValueError, match=r"cos and sin must be \[T, d\]"):
        R.apply_rope(torch.zeros(2, 5, 8), *R.rope_cos_sin(4, 8))
    with pytest.raises(ValueError, match="odd number of rows"):
        q = torch.zeros(1, 3, 4)
        R.shaw_attention(q, q, q, torch.zeros(4, 4))
    with pytest.raises(ValueError, match=r"slopes must be \[h\]"):
        R.alibi_bias(torch.ones(2, 2), 3)


def test_errors_name_the_function_called():
    """A bad ``dim`` or ``base`` is reported by the function the caller used."""
    with pytest.raises(ValueError, match="^rope_cos_sin: dim must be even"):
        R.rope_cos_sin(4, 5)
    with pytest.raises(ValueError, match="^shift_matrix: dim must be even"):
        P.shift_matrix(1, 3)
    with pytest.raises(ValueError, match="^shift_matrix: base must be > 1"):
        P.shift_matrix(1, 4, base=1.0)
    with pytest.raises(ValueError, match="^sinusoidal_table: dim must be even"):
        P.sinusoidal_table(4, 5)
