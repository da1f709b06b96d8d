"""Backbone shapes, the body/head split and the ResNet-18 size."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from ring_actors.models import BACKBONES, build_backbone
from ring_actors.models.resnet import ResNet18
from ring_actors.models.small_cnn import SmallCNN

SHAPES = [(1, 28, 28), (3, 32, 32)]


@functools.cache
def backbone(name: str, shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Built once per module: a ResNet-18 takes a while to initialise on two cores."""
    torch.manual_seed(0)
    return build_backbone(name, shape, num_classes).eval()


@pytest.mark.parametrize("name", BACKBONES)
@pytest.mark.parametrize("shape", SHAPES)
def test_output_shape_body_dim_and_head(name, shape):
    model = backbone(name, shape, 10)
    assert isinstance(model, SmallCNN if name == "cnn" else ResNet18)
    x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        features = model.body(x)
        logits = model(x)
    assert features.shape == (2, model.feature_dim)
    assert logits.shape == (2, 10)
    assert isinstance(model.head, nn.Linear)
    assert model.head.in_features == model.feature_dim
    assert model.head.out_features == 10
    torch.testing.assert_close(model.head(features), logits)


def test_small_cnn_rejects_a_mismatched_image_size():
    model = SmallCNN(1, 28, 10)
    with pytest.raises(RuntimeError):
        model(torch.randn(1, 1, 32, 32))


@pytest.mark.parametrize("channels", [1, 3])
def test_resnet18_has_about_11_2_million_parameters(channels):
    model = backbone("resnet18", (channels, 32, 32) if channels == 3 else (1, 28, 28), 10)
    count = sum(p.numel() for p in model.parameters())
    assert 11.0e6 <= count <= 11.3e6
    assert sum(p.numel() for p in model.head.parameters()) == 512 * 10 + 10


def test_resnet18_has_batchnorm_counters():
    model = backbone("resnet18", (3, 32, 32), 10)
    counters = [k for k in model.state_dict() if k.endswith("num_batches_tracked")]
    assert counters
    assert all(not model.state_dict()[k].is_floating_point() for k in counters)


def test_unknown_backbone_error_lists_allowed():
    with pytest.raises(ValueError, match=r"unknown backbone 'vgg'.*cnn, resnet18"):
        build_backbone("vgg", (3, 32, 32), 10)
