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


# ---------------------------------------------------------------------------
# Options the tests above leave at their defaults: the base, the dtypes, the
# edges of the argument checks, the learned table's initialisation, and the
# names re-exported from Chapter 8's modules.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("dim", "base"), [(8, 10000.0), (6, 100.0), (2, 1.5)])
def test_sinusoidal_frequencies_and_table_with_any_base(dim, base):
    """omega_i = base^(-2i/d) in float64 [d/2], and the table's columns use them."""
    omega = P.sinusoidal_frequencies(dim, base)
    assert omega.dtype == torch.float64 and omega.shape == (dim // 2,)
    assert omega.tolist() == pytest.approx([base ** (-2 * i / dim) for i in range(dim // 2)])
    table = P.sinusoidal_table(5, dim, base, dtype=torch.float64)
    for p in range(5):
        for i in range(dim // 2):
            angle = p * base ** (-2 * i / dim)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    m = P.shift_matrix(3, dim, base)  # PE(p + 3) = M_3 PE(p) with the same base
    pe = P.sinusoidal_table(10, dim, base, dtype=torch.float64)
    assert torch.allclose(pe[3:], pe[:7] @ m.T, atol=1e-12)


def test_default_base_is_10000():
    """Vaswani et al.'s base 10000 is the default of the frequencies (and of the table)."""
    expected = [10000.0 ** (-2 * i / 8) for i in range(4)]
    assert P.sinusoidal_frequencies(8).tolist() == pytest.approx(expected, rel=1e-15)
    assert torch.equal(P.sinusoidal_table(5, 8), P.sinusoidal_table(5, 8, 10000.0))


def test_dtypes_and_device():
    """The table is float32 unless asked (computed in float64); M_k is float64 unless asked."""
    assert P.sinusoidal_table(3, 4).dtype == torch.float32
    table = P.sinusoidal_table(3, 4, dtype=torch.bfloat16, device="meta")
    assert table.dtype == torch.bfloat16 and table.device.type == "meta"
    assert P.shift_matrix(2, 4).dtype == torch.float64
    m32 = P.shift_matrix(2, 4, dtype=torch.float32)
    assert m32.dtype == torch.float32 and torch.equal(m32, P.shift_matrix(2, 4).float())
    # far positions keep their precision: the float32 table is the float64 one rounded
    far = P.sinusoidal_table(100_000, 8)
    assert torch.equal(far, P.sinusoidal_table(100_000, 8, dtype=torch.float64).float())


def test_argument_checks_at_their_edges():
    """dim 2 and base just above 1 are valid; base 1, dim 0 or odd, num_positions 0 are not."""
    assert P.sinusoidal_table(1, 2, base=1.0001).shape == (1, 2)
    assert P.shift_matrix(1, 2, base=1.0001).shape == (2, 2)
    for fn in (P.sinusoidal_frequencies, lambda d, base: P.sinusoidal_table(3, d, base)):
        with pytest.raises(ValueError, match=r"base must be > 1, got 1.0"):
            fn(4, base=1.0)
        with pytest.raises(ValueError, match=r"base must be > 1, got 0.5"):
            fn(4, base=0.5)
        with pytest.raises(ValueError, match=r"dim must be a positive int, got 0"):
            fn(0, base=10.0)
        with pytest.raises(ValueError, match=r"dim must be even .* got 7"):
            fn(7, base=10.0)
    with pytest.raises(ValueError, match=r"^sinusoidal_frequencies: base must be > 1"):
        P.sinusoidal_frequencies(4, base=1.0)
    with pytest.raises(ValueError, match=r"^sinusoidal_table: num_positions must be a positive"):
        P.sinusoidal_table(0, 4)


def test_learned_positions_rows_and_edges():
    table = P.LearnedPositions(6, 3)
    assert table.max_len == 6 and table.dim == 3 and table.weight.shape == (6, 3)
    assert table(0).shape == (0, 3)  # no position asked: no row
    assert torch.equal(table(1, offset=5), table.weight[5:6])  # the last row exists
    assert torch.equal(table(6), table.weight)
    with pytest.raises(ValueError, match="position 6 has no row.*max_len=6 \\(positions 0..5\\)"):
        table(1, offset=6)
    with pytest.raises(ValueError, match="length and offset must be >= 0, got -1, 0"):
        table(-1)
    with pytest.raises(ValueError, match="length and offset must be >= 0, got 2, -1"):
        table(2, offset=-1)
    with pytest.raises(ValueError, match="^LearnedPositions: max_len must be a positive"):
        P.LearnedPositions(0, 3)
    with pytest.raises(ValueError, match="^LearnedPositions: dim must be a positive"):
        P.LearnedPositions(3, 0)


@pytest.mark.parametrize("init_std", [None, 0.1])
def test_learned_positions_start_from_n0_std(init_std):
    """P ~ N(0, init_std^2), init_std 0.02 by default: mean and spread of 64k draws."""
    torch.manual_seed(0)
    if init_std is None:
        table, std = P.LearnedPositions(1024, 64), 0.02
    else:
        table, std = P.LearnedPositions(1024, 64, init_std=init_std), init_std
    w = table.weight.detach()
    assert table.weight.requires_grad
    assert abs(w.std().item() / std - 1) < 0.02  # 65536 draws: relative s.e. ~0.3%
    assert abs(w.mean().item()) < 0.02 * std


def test_chapter_8_names_are_reachable_from_here():
    """``positional.apply_rope`` and friends are the objects of relative / position_hooks."""
    from course_lib import position_hooks as H

    assert P.apply_rope is R.apply_rope and P.alibi_slopes is R.alibi_slopes
    assert P.RoPE is H.RoPE and P.position_hook is H.position_hook
    assert {"apply_rope", "RoPE", "sinusoidal_table", "shift_matrix"} <= set(dir(P))
    assert dir(P) == sorted(dir(P))
    with pytest.raises(
        AttributeError, match="^module 'course_lib.positional' has no attribute 'nope'$"
    ):
        P.nope  # noqa: B018


def test_a_dunder_lookup_never_imports_chapter_8(monkeypatch):
    """Every ``from course_lib.positional import x`` asks the module for ``__path__``:
    answering a dunder without importing relative / position_hooks is what keeps their
    import (which imports this module) from cycling."""

    def import_chapter_8():
        raise RuntimeError("the moved names were looked up")

    monkeypatch.setattr(P, "_moved", import_chapter_8)
    assert not hasattr(P, "__path__")
    with pytest.raises(
        AttributeError, match="^module 'course_lib.positional' has no attribute '__wrapped__'$"
    ):
        P.__wrapped__  # noqa: B018
    with pytest.raises(RuntimeError, match="moved names"):
        P.apply_rope  # noqa: B018  (a plain name is looked up there)
