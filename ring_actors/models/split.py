"""A backbone regrouped into a convolutional feature extractor and a fully connected classifier.

Layer-wise personalisation shares the two parts differently, so they must be addressable on
their own: ``feature`` is the body up to and including its flatten (every convolution, as in
"all convolutional layers form the extractor"), ``classifier`` is everything after it (the
hidden fully connected layers, if any, and the head). The regrouping reuses the backbone's
modules, so the parameters and their initial values are those of ``build_backbone``.
"""

from __future__ import annotations

import torch
from torch import nn


class FeatureClassifierNet(nn.Module):
    """``classifier(feature(x))``; state-dict keys start with ``feature.`` or ``classifier.``."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        body = list(backbone.body)
        flattens = [i for i, layer in enumerate(body) if isinstance(layer, nn.Flatten)]
        if not flattens:
            raise ValueError(f"{type(backbone).__name__}.body has no Flatten to split at")
        cut = flattens[-1] + 1
        self.feature = nn.Sequential(*body[:cut])
        self.classifier = nn.Sequential(*body[cut:], backbone.head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.feature(x))
