"""course_lib.convnet: the CNN baseline of Chapter 13 and the priors it is built from."""

import pytest
import torch
from torch import nn

from course_lib import convnet


def test_matches_the_layers_it_names():
    """The forward pass is conv-ReLU-conv-ReLU-maxpool-conv-ReLU, mean over positions, linear."""
    torch.manual_seed(0)
    model = convnet.ConvNet(10, width=4).double()
    images = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    c1, c2, c3 = (m for m in model.convs if isinstance(m, nn.Conv2d))
    f = nn.functional
    x = f.relu(f.conv2d(images, c1.weight, c1.bias, padding=1))
    x = f.max_pool2d(f.relu(f.conv2d(x, c2.weight, c2.bias, padding=1)), 2)
    x = f.relu(f.conv2d(x, c3.weight, c3.bias, padding=1))
    assert model.feature_maps(images).shape == (3, 8, 4, 4)
    expected = x.mean((-2, -1)) @ model.head.weight.T + model.head.bias
    torch.testing.assert_close(model(images), expected, atol=1e-12, rtol=0)


def test_a_shift_moves_the_maps_and_leaves_the_scores():
    """Locality and weight sharing: a digit moved by 2 pixels inside an empty frame moves the
    feature maps by 1 cell (after the 2x2 pool) and leaves the class scores unchanged."""
    torch.manual_seed(1)
    model = convnet.ConvNet(10, width=4).double().eval()
    images = torch.zeros(2, 1, 24, 24, dtype=torch.float64)  # far enough from the padding
    images[:, :, 9:13, 9:13] = torch.rand(2, 1, 4, 4, dtype=torch.float64)
    moved = images.roll((2, 2), dims=(2, 3))
    maps, maps_moved = model.feature_maps(images), model.feature_maps(moved)
    torch.testing.assert_close(maps_moved[..., 3:10, 3:10], maps[..., 2:9, 2:9])
    torch.testing.assert_close(model(moved), model(images))
    # the flattened pixels of the two images are far apart: an SVM on pixels sees no shift
    assert (moved - images).flatten(1).norm(dim=1).min() > 0.5 * images.flatten(1).norm(dim=1).min()


def test_errors():
    with pytest.raises(ValueError, match=r"images must be \[B, C=1, height, width\] with even"):
        convnet.ConvNet(10)(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"with even height and width, got \[2, 1, 7, 8\]"):
        convnet.ConvNet(10)(torch.rand(2, 1, 7, 8))
    with pytest.raises(ValueError, match="must be >= 1"):
        convnet.ConvNet(10, width=0)
