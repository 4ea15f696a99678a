"""course_lib.masks at its edges: sizes zero, default arguments, devices and dtypes.

The masks' main behaviour is tested with attention in ``tests/test_attention.py``;
these tests were written for the mutants that survived it (``mutmut run
"course_lib.masks*"``, README "Mutation testing"). Devices are checked on the
``meta`` device, which every machine has: a mask built on the wrong device is a
CUDA failure that a CPU-only test would otherwise never see.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.masks import (
    causal_mask,
    check_mask,
    masked_softmax,
    merge_masks,
    padding_mask,
    to_additive_mask,
    window_mask,
)


def test_causal_mask_accepts_empty_sizes_and_refuses_negative_ones():
    assert causal_mask(0).shape == (0, 0)
    assert causal_mask(2, 0).shape == (2, 0)
    assert causal_mask(0, 3).shape == (0, 3)
    for t, s in [(-1, 2), (2, -1), (-1, None)]:
        with pytest.raises(ValueError, match="sizes must be >= 0"):
            causal_mask(t, s)


def test_masks_are_built_on_the_requested_device():
    assert causal_mask(3, device="meta").device.type == "meta"
    assert window_mask(3, 4, 1, device="meta").device.type == "meta"
    # centres given: the keys follow the centres' device
    assert window_mask(2, 4, 1, torch.zeros(2, device="meta")).device.type == "meta"
    assert to_additive_mask(torch.ones(2, 3, dtype=torch.bool, device="meta")).device.type == "meta"


def test_padding_mask_builds_its_positions_on_the_lengths_device(monkeypatch):
    """lengths.max() needs values, so the meta device cannot run padding_mask: check
    instead that the positions are asked for on the lengths' device."""
    asked = []
    arange = torch.arange

    def spy(*args, **kwargs):
        asked.append(kwargs.get("device"))
        return arange(*args, **kwargs)

    monkeypatch.setattr(torch, "arange", spy)
    lengths = torch.tensor([2, 1])
    padding_mask(lengths, 3)
    assert asked == [lengths.device]


def test_padding_mask_defaults_to_the_longest_length():
    m = padding_mask(torch.tensor([2, 4, 1]))
    assert m.shape == (3, 4)
    assert m.sum(-1).tolist() == [2, 4, 1]


def test_window_zero_keeps_only_the_aligned_key():
    assert torch.equal(window_mask(3, 3, 0), torch.eye(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="window must be >= 0, got -1"):
        window_mask(3, 3, -1)


def test_merge_masks_keeps_the_additive_masks_dtype():
    """A boolean mask merged with a float16 (or bfloat16) bias: the result is in the
    bias's dtype, not float32 (which would promote the scores it is added to)."""
    keep = torch.tensor([[True, False]])
    for dtype in (torch.float16, torch.bfloat16):
        bias = torch.tensor([[0.5, 0.0]], dtype=dtype)
        for merged in (merge_masks(keep, bias), merge_masks(bias, keep)):
            assert merged.dtype == dtype
            assert merged.tolist() == [[0.5, float("-inf")]]


def test_check_mask_reports_the_query_and_key_sizes_of_any_scores():
    """[T, S] are the scores' last two sizes, whatever their number of dims."""
    for scores in (torch.Size([3, 5]), torch.Size([2, 3, 5]), torch.Size([2, 4, 3, 5])):
        with pytest.raises(ValueError, match=r"expected \[T=3, S=5\]"):
            check_mask("f", torch.ones(4, 4, dtype=torch.bool), scores)


def test_masked_softmax_with_one_key_or_none():
    """One key: its weight is 1, or 0 when masked (3.6). No key at all: an empty result."""
    scores = torch.randn(2, 1)
    w = masked_softmax(scores, torch.tensor([[True], [False]]))
    assert w.tolist() == [[1.0], [0.0]]
    for shape in [(2, 3, 0), (3, 0), (2, 0, 4)]:
        assert masked_softmax(torch.zeros(shape)).shape == shape
