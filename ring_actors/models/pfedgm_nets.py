"""The small CNN feature extractors of FedPAC and pFedFDA, which pFedGM reuses as its generator."""

from __future__ import annotations

import torch
from torch import nn


def _block(in_channels: int, out_channels: int, kernel: int, padding: int) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, kernel, padding=padding),
        nn.LeakyReLU(0.01),
        nn.MaxPool2d(2),
    ]


class FedPACCNN(nn.Module):
    """Convolutions, then one linear layer to a ``feature_dim`` vector; there is no classifier.

    Images of 32 pixels or more (CIFAR) get three convolution blocks (16, 32, 64 channels);
    smaller ones (EMNIST's 28x28) get the first two. Every activation is a leaky ReLU and
    there is no BatchNorm, so plain parameter averaging is the whole aggregation.
    """

    def __init__(self, in_channels: int, image_size: int, feature_dim: int = 128):
        super().__init__()
        self.feature_dim = feature_dim
        layers = _block(in_channels, 16, 5, 0) + _block(16, 32, 5, 1)
        if image_size >= 32:
            layers += _block(32, 64, 3, 1)
        convs = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = convs(torch.zeros(1, in_channels, image_size, image_size)).shape[1]
        self.body = nn.Sequential(*convs, nn.Linear(flat, feature_dim), nn.LeakyReLU(0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)
