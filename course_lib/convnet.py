"""A small convolutional network: the baseline with an image prior (Chapter 13).

Chapter 13 trains a Vision Transformer on 8 x 8 digits and asks whether the
convolutional network's built-in assumptions help when images are few.  The
network here holds those assumptions and nothing more:

* **locality**: every output of a 3 x 3 convolution reads a 3 x 3 neighbourhood;
* **weight sharing**: the same kernel at every position, so the feature maps
  move with the image (translation equivariance);
* **pooling**: a 2 x 2 max pool and a global average over the last map, so a
  small shift of the digit changes the class scores little or not at all.

Shapes (``book/notation.md``): ``B`` batch, ``C`` image channels, ``height`` and
``width`` in pixels, ``w`` the width (channels) of the first convolution, ``K``
classes.
"""

from __future__ import annotations

from torch import Tensor, nn

from course_lib.shapes import fmt_shape

__all__ = ["ConvNet"]


class ConvNet(nn.Module):
    """Three 3 x 3 convolutions, a max pool and a linear head.

    ``conv(C -> w), ReLU, conv(w -> 2w), ReLU, maxpool 2 x 2, conv(2w -> 2w), ReLU``
    (:meth:`feature_maps`, ``[B, 2w, height/2, width/2]``; every convolution pads
    by one pixel, so only the pool changes the size), then the mean over
    positions and ``Linear(2w, K)``: ``forward(images [B, C, height, width]) ->
    logits [B, K]``.  Height and width must be even.
    """

    def __init__(self, num_classes: int, *, in_channels: int = 1, width: int = 8) -> None:
        super().__init__()
        if min(num_classes, in_channels, width) < 1:
            raise ValueError(
                "ConvNet: num_classes, in_channels and width must be >= 1, got "
                f"{num_classes}, {in_channels}, {width}"
            )
        self.in_channels = in_channels
        w = width
        self.convs = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1),  # [B, w, height, width]
            nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, padding=1),  # [B, 2w, height, width]
            nn.ReLU(),
            nn.MaxPool2d(2),  # [B, 2w, height/2, width/2]
            nn.Conv2d(2 * w, 2 * w, 3, padding=1),  # [B, 2w, height/2, width/2]
            nn.ReLU(),
        )
        self.head = nn.Linear(2 * w, num_classes)

    def feature_maps(self, images: Tensor) -> Tensor:
        """The last convolution's output, ``[B, 2w, height/2, width/2]``."""
        ok = images.dim() == 4 and images.shape[1] == self.in_channels
        if not ok or images.shape[-1] % 2 or images.shape[-2] % 2:
            raise ValueError(
                f"ConvNet: images must be [B, C={self.in_channels}, height, width] with even "
                f"height and width, got {fmt_shape(images.shape)}"
            )
        return self.convs(images)

    def forward(self, images: Tensor) -> Tensor:
        pooled = self.feature_maps(images).mean(dim=(-2, -1))  # global average      [B, 2w]
        return self.head(pooled)  # [B, K]
