"""Backbones with a clean split between ``body`` (features) and ``head`` (classifier)."""

from __future__ import annotations

from torch import nn

from ring_actors.models.resnet import ResNet18
from ring_actors.models.small_cnn import SmallCNN

BACKBONES = ("cnn", "resnet18")


def build_backbone(name: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """A fresh backbone by name for images of ``input_shape`` = (C, H, W)."""
    channels, height, _ = input_shape
    if name == "cnn":
        return SmallCNN(channels, height, num_classes)
    if name == "resnet18":
        return ResNet18(channels, num_classes)
    raise ValueError(f"unknown backbone {name!r}; allowed: {', '.join(BACKBONES)}")
