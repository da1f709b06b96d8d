"""DRDFL's small generative modules: the encoders, decoder and adversary around the classifier."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

WIDTHS = (32, 64, 128)  # DCGAN-style channel widths; three stride-2 stages shrink by 8


def _padding(size: int) -> tuple[int, int]:
    """Zeros before and after one spatial axis to reach the next multiple of 8 (28 -> 32)."""
    extra = -size % 8
    return extra // 2, extra - extra // 2


class ConvEncoder(nn.Module):
    """x -> three k4 s2 conv stages (BN, LeakyReLU 0.2) -> flatten -> linear to ``out_features``.

    Inputs whose sides are not multiples of 8 are zero-padded (the mean pixel after
    normalisation), so 28x28 and 32x32 images share one architecture.
    """

    def __init__(self, input_shape: tuple[int, int, int], out_features: int) -> None:
        super().__init__()
        channels, height, width = input_shape
        top, bottom = _padding(height)
        left, right = _padding(width)
        self.pad = (left, right, top, bottom)
        layers: list[nn.Module] = []
        in_ch = channels
        for out_ch in WIDTHS:
            layers += [
                nn.Conv2d(in_ch, out_ch, 4, 2, 1, bias=False),
                nn.BatchNorm2d(out_ch),
                nn.LeakyReLU(0.2, inplace=True),
            ]
            in_ch = out_ch
        self.trunk = nn.Sequential(*layers, nn.Flatten())
        spatial = (height + top + bottom) // 8 * ((width + left + right) // 8)
        self.fc = nn.Linear(WIDTHS[-1] * spatial, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if any(self.pad):
            x = F.pad(x, self.pad)
        return self.fc(self.trunk(x))


class PersonaNet(ConvEncoder):
    """Private encoder ψ: the deterministic, class-discriminative latent z_p."""


class Learngene(ConvEncoder):
    """Shared encoder φ: mean and log-variance of the diagonal Gaussian q(z_l | x)."""

    def __init__(self, input_shape: tuple[int, int, int], latent: int) -> None:
        super().__init__(input_shape, 2 * latent)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, logvar = super().forward(x).chunk(2, dim=1)
        return mu, logvar


class Decoder(nn.Module):
    """Private decoder θ: concat(z_p, z_l) -> image in normalised space (linear output).

    Mirrors :class:`ConvEncoder`: linear to 128 x h/8 x w/8, three k4 s2 transposed convs, then
    the encoder's padding is cropped away so the output has the input's shape.
    """

    def __init__(self, input_shape: tuple[int, int, int], latent: int) -> None:
        super().__init__()
        channels, height, width = input_shape
        self.rows = _padding(height)
        self.cols = _padding(width)
        self.grid = ((height + sum(self.rows)) // 8, (width + sum(self.cols)) // 8)
        self.fc = nn.Sequential(
            nn.Linear(latent, WIDTHS[-1] * self.grid[0] * self.grid[1]), nn.ReLU(inplace=True)
        )
        layers: list[nn.Module] = []
        for in_ch, out_ch in zip(WIDTHS[:0:-1], WIDTHS[-2::-1], strict=True):  # 128 -> 64 -> 32
            layers += [
                nn.ConvTranspose2d(in_ch, out_ch, 4, 2, 1, bias=False),
                nn.BatchNorm2d(out_ch),
                nn.ReLU(inplace=True),
            ]
        layers.append(nn.ConvTranspose2d(WIDTHS[0], channels, 4, 2, 1))
        self.deconv = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.deconv(self.fc(z).view(-1, WIDTHS[-1], *self.grid))
        (top, bottom), (left, right) = self.rows, self.cols
        return x[..., top : x.shape[-2] - bottom, left : x.shape[-1] - right]


class Adversary(nn.Sequential):
    """Private adversarial classifier ϑ on z_l: d_l -> 128 -> K logits."""

    def __init__(self, latent: int, num_classes: int, hidden: int = 128) -> None:
        super().__init__(
            nn.Linear(latent, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, num_classes)
        )
