"""Backbones with a clean split between ``body`` (features) and ``head`` (classifier)."""

from __future__ import annotations

from torch import nn

from ring_actors.models.resnet import ResNet18
from ring_actors.models.small_cnn import SmallCNN
from ring_actors.plugins.paths import build_plugin_backbone, is_plugin_path

BACKBONES = ("cnn", "resnet18")  # every method's choices (AlgorithmOptions.backbone)
# Offered by the methods that need them: the small CNN with BatchNorm, for FedBN.
EXTRA_BACKBONES = ("cnn_bn",)


def build_backbone(name: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """A fresh backbone by name for images of ``input_shape`` = (C, H, W).

    ``name`` may be ``module:Class``, a backbone of one's own: it is checked against the
    contract every method relies on (``plugin_paths``) whenever it is built.
    """
    if is_plugin_path(name):
        return build_plugin_backbone(name, input_shape, num_classes)
    channels, height, _ = input_shape
    if name in ("cnn", "cnn_bn"):
        return SmallCNN(channels, height, num_classes, batch_norm=name == "cnn_bn")
    if name == "resnet18":
        return ResNet18(channels, num_classes)
    allowed = ", ".join((*BACKBONES, *EXTRA_BACKBONES))
    raise ValueError(f"unknown backbone {name!r}; allowed: {allowed}, or module:Class")
