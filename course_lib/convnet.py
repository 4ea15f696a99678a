"""A small convolutional network: the baseline with an image prior (Chapter 13).

Chapter 13 trains a Vision Transformer on 8 x 8 digits and asks whether the
convolutional network's built-in assumptions help when images are few.  The
network here holds those assumptions and nothing more:

* **locality**: every output of a 3 x 3 convolution reads a 3 x 3 neighbourhood;
* **weight sharing**: the same kernel at every position, so the feature maps
  move with the image (translation equivariance);
* **pooling**: two 2 x 2 max pools, so a shift of a pixel changes the pooled
  maps little.

It keeps *where* a feature was found (the last maps are flattened, not
averaged), as LeNet did.

Shapes (``book/notation.md``): ``B`` batch, ``C`` image channels, ``height`` and
``width`` in pixels, ``w`` the width (channels) of the first convolution, ``K``
classes.
"""

from __future__ import annotations

from torch import Tensor, nn

from course_lib.shapes import fmt_shape

__all__ = ["ConvNet"]


class ConvNet(nn.Module):
    """Two 3 x 3 convolutions, each followed by ReLU and a 2 x 2 max pool, and a linear head.

    ``conv(C -> w), ReLU, maxpool, conv(w -> 2w), ReLU, maxpool``
    (:meth:`feature_maps`, ``[B, 2w, height/4, width/4]``; each convolution pads by
    one pixel, so only the pools change the size), then flattened to
    ``2w (height/4) (width/4)`` numbers and ``Linear(..., K)``:
    ``forward(images [B, C, height, width]) -> logits [B, K]``.  ``image_size``
    (height = width) must be a multiple of 4.
    """

    def __init__(
        self, image_size: int, num_classes: int, *, in_channels: int = 1, width: int = 16
    ) -> None:
        super().__init__()
        if min(num_classes, in_channels, width) < 1:
            raise ValueError(
                "ConvNet: num_classes, in_channels and width must be >= 1, got "
                f"{num_classes}, {in_channels}, {width}"
            )
        if image_size < 4 or image_size % 4:
            raise ValueError(f"ConvNet: image_size must be a multiple of 4, got {image_size}")
        self.image_size, self.in_channels = image_size, in_channels
        w = width
        self.convs = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1),  # [B, w, height, width]
            nn.ReLU(),
            nn.MaxPool2d(2),  # [B, w, height/2, width/2]
            nn.Conv2d(w, 2 * w, 3, padding=1),  # [B, 2w, height/2, width/2]
            nn.ReLU(),
            nn.MaxPool2d(2),  # [B, 2w, height/4, width/4]
        )
        self.head = nn.Linear(2 * w * (image_size // 4) ** 2, num_classes)

    def feature_maps(self, images: Tensor) -> Tensor:
        """The maps after the second pool, ``[B, 2w, height/4, width/4]``."""
        size = (self.image_size, self.image_size)
        if images.dim() != 4 or images.shape[1] != self.in_channels or images.shape[-2:] != size:
            raise ValueError(
                f"ConvNet: images must be [B, C={self.in_channels}, {self.image_size}, "
                f"{self.image_size}], got {fmt_shape(images.shape)}"
            )
        return self.convs(images)

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.feature_maps(images).flatten(1))  # [B, K]
