"""Error messages of course_lib.embeddings (Chapter 5); the numerics are in test_tokenization."""

from __future__ import annotations

import pytest
import torch

from course_lib import embeddings as E


def test_one_hot_rejects_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"one_hot: ids must lie in 0..5 \(vocab_size=6\)"):
        E.one_hot(torch.tensor([1, 6]), 6)
    with pytest.raises(ValueError, match=r"got values in -1..2"):
        E.one_hot(torch.tensor([-1, 2]), 6)
    assert E.one_hot(torch.tensor([], dtype=torch.long), 6).shape == (0, 6)


@pytest.mark.parametrize("dtype", [torch.int16, torch.uint8, torch.float32])
def test_lookup_names_the_accepted_id_dtypes(dtype):
    with pytest.raises(ValueError, match=r"ids must be int64 or int32 \(use ids.long\(\)\)"):
        E.embedding_lookup(torch.zeros(6, 3), torch.tensor([1, 2], dtype=dtype))


def test_ppmi_of_counts_is_finite_and_nonnegative():
    counts = E.cooccurrence_matrix(torch.tensor([0, 1, 2, 0, 1, 3]), 5, window=1)
    p = E.ppmi(counts)
    assert torch.isfinite(p).all() and (p >= 0).all()
    assert p[4].abs().sum() == 0  # a word never seen: a zero row


def test_shape_errors_name_the_expected_shapes():
    with pytest.raises(ValueError, match=r"nearest_neighbours: query must be \[D=3\], got \[4\]"):
        E.nearest_neighbours(torch.randn(5, 3), torch.randn(4))
    with pytest.raises(ValueError, match=r"cooccurrence_matrix: ids must be \[T\], got \[2, 3\]"):
        E.cooccurrence_matrix(torch.zeros(2, 3, dtype=torch.long), 4)
