"""course_lib.convnet: the CNN baseline of Chapter 13 and the priors it is built from."""

import pytest
import torch
from torch import nn

from course_lib import convnet


def test_matches_the_layers_it_names():
    """The forward pass is conv-ReLU-pool twice, flattened, then linear."""
    torch.manual_seed(0)
    model = convnet.ConvNet(8, 10, width=4).double()
    images = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    c1, c2 = (m for m in model.convs if isinstance(m, nn.Conv2d))
    f = nn.functional
    x = f.max_pool2d(f.relu(f.conv2d(images, c1.weight, c1.bias, padding=1)), 2)
    x = f.max_pool2d(f.relu(f.conv2d(x, c2.weight, c2.bias, padding=1)), 2)
    assert model.feature_maps(images).shape == (3, 8, 2, 2)
    expected = x.flatten(1) @ model.head.weight.T + model.head.bias
    torch.testing.assert_close(model(images), expected, atol=1e-12, rtol=0)


def test_a_shift_moves_the_maps():
    """Locality and weight sharing: a digit moved by 4 pixels inside an empty frame moves the
    feature maps by 1 cell (after the two 2x2 pools), unchanged."""
    torch.manual_seed(1)
    model = convnet.ConvNet(24, 10, width=4).double().eval()
    images = torch.zeros(2, 1, 24, 24, dtype=torch.float64)  # far enough from the padding
    images[:, :, 9:13, 9:13] = torch.rand(2, 1, 4, 4, dtype=torch.float64)
    moved = images.roll((4, 4), dims=(2, 3))
    maps, maps_moved = model.feature_maps(images), model.feature_maps(moved)  # [2, 8, 6, 6]
    torch.testing.assert_close(maps_moved[..., 2:5, 2:5], maps[..., 1:4, 1:4])


def test_errors():
    with pytest.raises(ValueError, match=r"images must be \[B, C=1, 8, 8\], got \[2, 3, 8, 8\]"):
        convnet.ConvNet(8, 10)(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"images must be \[B, C=1, 8, 8\], got \[2, 1, 12, 12\]"):
        convnet.ConvNet(8, 10)(torch.rand(2, 1, 12, 12))
    with pytest.raises(ValueError, match="image_size must be a multiple of 4, got 6"):
        convnet.ConvNet(6, 10)
    with pytest.raises(ValueError, match="must be >= 1"):
        convnet.ConvNet(8, 10, width=0)
