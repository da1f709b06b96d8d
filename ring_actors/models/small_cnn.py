"""The two-convolution CNN of the FedAvg paper, for 28x28 and 32x32 inputs."""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """conv5x5(32) -> pool -> conv5x5(64) -> pool -> fc(512) | fc(num_classes).

    ``body`` maps an image to a feature vector of size ``feature_dim``; ``head`` is the final
    linear classifier, so methods that share or keep the head private can address it directly.
    ``batch_norm`` puts a BatchNorm2d after each convolution (the ``cnn_bn`` backbone, for
    methods that treat normalisation layers apart); none follows the fully connected layer, so
    a last batch of one sample still trains.
    """

    def __init__(
        self,
        in_channels: int,
        image_size: int,
        num_classes: int,
        width: int = 32,
        batch_norm: bool = False,
    ):
        super().__init__()
        spatial = image_size // 4  # two 2x2 poolings after padded 5x5 convolutions
        self.feature_dim = 512

        def conv(cin: int, cout: int) -> list[nn.Module]:
            norm = [nn.BatchNorm2d(cout)] if batch_norm else []
            return [nn.Conv2d(cin, cout, 5, padding=2), *norm, nn.ReLU(inplace=True)]

        self.body = nn.Sequential(
            *conv(in_channels, width),
            nn.MaxPool2d(2),
            *conv(width, 2 * width),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(2 * width * spatial * spatial, self.feature_dim),
            nn.ReLU(inplace=True),
        )
        self.head = nn.Linear(self.feature_dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))
