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
