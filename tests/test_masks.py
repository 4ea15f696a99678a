"""Masks (Chapters 2-3): the library's convention (True = may attend), its additive
form, the translation to PyTorch's conventions and the masked softmax.

Covers course_lib.masks; attention that uses the masks is tested in test_attention.py.
The tests after the first group were written for the mutants that survived the others
(``mutmut run "course_lib.masks*"``, README "Mutation testing"): sizes zero, default
arguments, devices and dtypes. Devices are checked on the ``meta`` device, which every
machine has: a mask built on the wrong device is a CUDA failure that a CPU-only test
would otherwise never see.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.masks import (
    causal_mask,
    check_mask,
    from_torch_mask,
    masked_softmax,
    merge_masks,
    padding_mask,
    to_additive_mask,
    to_torch_mask,
    window_mask,
)

# Seeded, one intra-op thread (fixture in tests/conftest.py).
pytestmark = pytest.mark.usefixtures("seed_and_one_thread")


def test_causal_mask_is_true_on_and_below_the_diagonal():
    m = causal_mask(3)
    assert m.dtype == torch.bool
    assert m.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # T != S: aligned at the top-left corner, like is_causal=True in PyTorch
    assert causal_mask(2, 4).tolist() == [[True, False, False, False], [True, True, False, False]]


def test_padding_mask_marks_real_tokens():
    m = padding_mask(torch.tensor([3, 1, 0]), 4)
    assert m.tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [False, False, False, False],
    ]
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, 2\]"):
        padding_mask(torch.tensor([3]), 2)


def test_window_mask_local_m_and_given_centres():
    m = window_mask(4, 5, 1)  # p_i = i
    assert m.tolist()[0] == [True, True, False, False, False]
    assert m.tolist()[3] == [False, False, True, True, True]
    # real-valued centres, batched: |j - p| <= window
    m = window_mask(2, 5, 1, torch.tensor([[0.4, 3.6]]))
    assert m.shape == (1, 2, 5)
    assert m[0].tolist() == [[True, True, False, False, False], [False, False, False, True, True]]
    with pytest.raises(ValueError, match=r"centers must be \[T=3\] or \[B, T=3\], got \[4\]"):
        window_mask(3, 5, 1, torch.arange(4))
    with pytest.raises(ValueError, match=r"centers must be \[T=3\] or \[B, T=3\], got \[\]"):
        window_mask(3, 5, 1, torch.tensor(1))  # 0-d: the friendly message, not an IndexError


def test_check_mask_names_the_caller_and_the_expected_shapes():
    scores = torch.Size([2, 3, 4])
    check_mask("f", torch.ones(3, 4, dtype=torch.bool), scores)  # [T, S] broadcasts
    check_mask("f", torch.zeros(2, 1, 4), scores)  # additive, [B, 1, S]
    with pytest.raises(ValueError, match=r"f: mask of shape \[4, 3\] does not broadcast"):
        check_mask("f", torch.ones(4, 3, dtype=torch.bool), scores)
    with pytest.raises(ValueError, match=r"f: key_mask must be boolean .* got dtype torch.int64"):
        check_mask("f", torch.ones(3, 4, dtype=torch.long), scores, "key_mask")
    with pytest.raises(TypeError, match="f: mask must be a torch.Tensor, got list"):
        check_mask("f", [[True]], scores)


def test_additive_form_of_a_boolean_mask():
    m = torch.tensor([[True, False]])
    assert to_additive_mask(m).tolist() == [[0.0, float("-inf")]]
    add = torch.tensor([[0.5, -1.0]])
    assert to_additive_mask(add) is add
    with pytest.raises(ValueError, match="bool or floating"):
        to_additive_mask(torch.tensor([[1, 0]]))


def test_translation_to_and_from_torch_conventions():
    ours = causal_mask(4)
    assert torch.equal(to_torch_mask(ours, "sdpa"), ours)  # True = keep in both
    assert torch.equal(to_torch_mask(ours, "mha"), ~ours)  # MHA: True = masked out
    for api in ("sdpa", "mha"):
        assert torch.equal(from_torch_mask(to_torch_mask(ours, api), api), ours)
    add = to_additive_mask(ours)
    assert to_torch_mask(add, "mha") is add and from_torch_mask(add, "mha") is add
    assert to_torch_mask(None, "mha") is None
    with pytest.raises(ValueError, match=r"api must be one of \('sdpa', 'mha'\)"):
        to_torch_mask(ours, "nn")
    with pytest.raises(ValueError, match="api must be one of"):
        from_torch_mask(ours, "nn")


def test_masked_softmax_rows_sum_to_one_and_a_fully_masked_row_is_zero():
    scores = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.tensor([[True, True, False, True], [False] * 4, [True, False, False, False]])
    w = masked_softmax(scores, mask)
    assert not torch.isnan(w).any()
    assert torch.allclose(w.sum(-1), torch.tensor([[1.0, 0.0, 1.0]] * 2))
    assert (w[:, 0, 2] == 0).all() and (w[:, 2, 0] == 1).all()
    w.pow(2).sum().backward()  # gradients through a fully masked row stay finite
    assert torch.isfinite(scores.grad).all()
    # plain softmax would give NaN: the rule (3.5) is what makes the difference
    assert torch.isnan(torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)).any()


def test_merge_masks_allows_a_key_only_where_both_do():
    a = torch.tensor([[True, True, False], [True, False, False]])
    b = torch.tensor([True, False, True])
    assert torch.equal(merge_masks(a, b), a & b)
    assert merge_masks(None, b) is b and merge_masks(a, None) is a
    bias = torch.tensor([0.5, -1.0, 2.0])
    both = merge_masks(a, bias)  # a boolean and a bias: additive, the bias kept where allowed
    assert both.dtype == torch.float32
    assert torch.equal(both, torch.where(a, bias, torch.tensor(float("-inf"))))
    assert torch.equal(merge_masks(bias.double(), a), both.double())


def test_masked_softmax_keeps_one_buffer_when_no_row_is_fully_masked():
    """The weights are the softmax's own output (its backward keeps nothing else); only a
    fully masked row costs a second pass."""
    scores = torch.randn(2, 4, 5, requires_grad=True)
    mask = torch.rand(4, 5) > 0.5
    mask[:, 0] = True
    assert type(masked_softmax(scores, mask).grad_fn).__name__ == "SoftmaxBackward0"
    mask[2] = False
    assert type(masked_softmax(scores, mask).grad_fn).__name__ != "SoftmaxBackward0"


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
    """One key: its weight is 1, or 0 when masked (3.5). No key at all: an empty result."""
    scores = torch.randn(2, 1)
    w = masked_softmax(scores, torch.tensor([[True], [False]]))
    assert w.tolist() == [[1.0], [0.0]]
    for shape in [(2, 3, 0), (3, 0), (2, 0, 4)]:
        assert masked_softmax(torch.zeros(shape)).shape == shape
