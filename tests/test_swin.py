"""course_lib.swin: window attention, windowed form against masked full attention and Hugging Face."""

import pytest
import torch
from transformers import SwinConfig
from transformers.models.swin.modeling_swin import SwinLayer

from course_lib import swin
from course_lib.attention import scaled_dot_product_attention


@pytest.mark.parametrize(
    ("height", "width", "window", "shift"),
    [(8, 8, 4, 0), (8, 8, 4, 2), (12, 8, 4, 1), (14, 14, 7, 3)],
)
def test_windowed_equals_masked_full_attention(height, width, window, shift):
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 3, height * width, 5, dtype=torch.float64)
    mask = swin.window_attention_mask(height, width, window, shift)
    full = scaled_dot_product_attention(q, k, v, mask)
    windowed = swin.window_attention(q, k, v, height, width, window, shift)
    torch.testing.assert_close(windowed, full, atol=1e-12, rtol=0)
    # each token sees at most M^2 tokens, and exactly M^2 without a shift
    seen = mask.sum(-1)
    assert seen.max() == window**2 and (shift > 0 or seen.min() == window**2)


def test_windows_by_hand():
    ids = swin.window_ids(4, 4, 2).view(4, 4)
    assert ids.unique(return_counts=True)[1].tolist() == [4, 4, 4, 4]
    assert ids[0, 0] == ids[1, 1] != ids[0, 2]
    shifted = swin.window_ids(4, 4, 2, shift=1).view(4, 4)  # windows start at row/col 1
    assert shifted[1, 1] == shifted[2, 2] != shifted[0, 0]
    assert sorted(shifted.unique(return_counts=True)[1].tolist()) == [1, 1, 1, 1, 2, 2, 2, 2, 4]


@pytest.mark.parametrize(("size", "window", "shift"), [(8, 4, 2), (14, 7, 3), (12, 4, 1)])
def test_shifted_mask_matches_hugging_face(size, window, shift):
    """Hugging Face's shifted-window mask (after its cyclic shift, per window) allows the
    same pairs as ours, seen through the same roll."""
    config = SwinConfig(embed_dim=8, num_heads=[2], depths=[1], window_size=window)
    layer = SwinLayer(config, 8, (size, size), 2, shift_size=shift)
    hf = layer.get_attn_mask(size, size, torch.float32, torch.device("cpu"))  # [n_w, M^2, M^2]
    ids = swin.window_ids(size, size, window, shift)
    rolled = swin._roll(ids.view(1, 1, -1, 1), size, size, -shift)
    per_window = swin._to_windows(rolled, size, size, window)[0, 0, :, :, 0]  # [n_w, M^2]
    ours = per_window[:, :, None] == per_window[:, None, :]
    assert torch.equal(ours, hf == 0)


def test_errors():
    q = torch.randn(1, 1, 64, 4)
    with pytest.raises(ValueError, match="must be a multiple of the window size 3"):
        swin.window_attention(q, q, q, 8, 8, 3)
    with pytest.raises(ValueError, match=r"shift must be in \[0, window=4\), got 4"):
        swin.window_attention_mask(8, 8, 4, shift=4)
    with pytest.raises(ValueError, match=r"query must be \[B, h, N_p=16, d\], got \[1, 1, 64, 4\]"):
        swin.window_attention(q, q, q, 4, 4, 2)
    with pytest.raises(ValueError, match="key and value must have the query's shape"):
        swin.window_attention(q, q[..., :2], q, 8, 8, 4)
