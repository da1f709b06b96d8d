"""``module:Name`` values: code of one's own named in a config, imported the same way for
methods (``plugins.py``), backbones and dataset loaders.

Every failure is a :class:`PluginError` naming the value; the config check turns it into an
error naming its key, so a broken plug-in stops the run before any actor starts.

**Backbone** (``algorithm.backbone=my_module:MyNet``): an ``nn.Module`` subclass built as
``MyNet(input_shape, num_classes)``, ``input_shape`` being (C, H, W). The methods address its
parts, so an instance must have

- ``body``: an ``nn.Sequential`` from images (N, C, H, W) to features (N, ``feature_dim``)
  that holds an ``nn.Flatten`` (UA-PDFL splits the body after its last one: the layers before
  it are the extractor, those after join the classifier);
- ``head``: the final classifier, features to logits (N, num_classes) (FedRep and DFedPGP
  keep it personal and share the body);
- ``feature_dim``: an int, the width of the features (pFedGM's class Gaussians live there);
- ``forward(x)`` equal to ``head(body(x))``.

**Dataset** (``data.dataset=my_module:load``): a callable ``load(root: Path, download: bool)``
returning a :class:`ring_actors.data.sources.DatasetArrays`; ``root`` is the data root
(``data.root``, else ``$RING_ACTORS_DATA``, else the user cache). The driver calls it once
and checks what it returns (``sources.load_dataset``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a backbone is built: the control plane never needs torch
    import torch
    from torch import nn


class PluginError(ValueError):
    """A ``module:Name`` in a config that cannot be imported or does not keep its contract."""


@dataclass(frozen=True)
class OrPlugin:
    """Marks a config field (``Annotated[Literal[...], OrPlugin(...)]``) whose value may also
    be ``module:Name``: ``what`` says what it names, ``resolve`` imports and checks it."""

    what: str
    resolve: Callable[[str], object]


def is_plugin_path(value: object) -> bool:
    """Whether ``value`` is written as ``module:Name`` (no built-in name has a colon)."""
    return isinstance(value, str) and ":" in value


def load_plugin(name: str, load: Callable[[], object]) -> object:
    """Run the user's import; whatever it raises becomes a PluginError naming ``name``."""
    try:
        return load()
    except Exception as err:  # a user's module may fail to import in any way
        raise PluginError(f"cannot import {name!r}: {type(err).__name__}: {err}") from err


def import_path(path: str) -> object:
    """The object ``module:Name`` stands for."""
    module, _, attribute = path.partition(":")
    return load_plugin(path, lambda: getattr(importlib.import_module(module), attribute))


def _callable_as(path: str, found: Callable, args: tuple, contract: str) -> None:
    """Refuse ``found`` when its signature cannot take ``args``: the call would fail later."""
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):  # some builtins have none; the call itself will tell
        return
    try:
        signature.bind(*args)
    except TypeError as err:
        raise PluginError(f"{path!r} cannot be called as {contract}: {err}") from err


def resolve_backbone(path: str) -> type[nn.Module]:
    """The backbone class ``path`` names, checked as far as it can be without building it."""
    from torch import nn

    found = import_path(path)
    if not (isinstance(found, type) and issubclass(found, nn.Module)):
        raise PluginError(f"{path!r} is not a subclass of torch.nn.Module")
    _callable_as(path, found, ((1, 28, 28), 10), f"{found.__name__}(input_shape, num_classes)")
    return found


def build_plugin_backbone(
    path: str, input_shape: tuple[int, int, int], num_classes: int
) -> nn.Module:
    """A fresh backbone of the class ``path`` names, refused unless it keeps the contract."""
    cls = resolve_backbone(path)
    try:
        model = cls(input_shape, num_classes)
    except Exception as err:  # the user's constructor may fail in any way
        raise PluginError(
            f"{path!r} cannot be built for input_shape={input_shape}, "
            f"num_classes={num_classes}: {type(err).__name__}: {err}"
        ) from err
    check_backbone(path, model, input_shape, num_classes)
    return model


def check_backbone(
    path: str, model: nn.Module, input_shape: tuple[int, int, int], num_classes: int
) -> None:
    """Raise PluginError unless ``model`` has the parts and shapes the methods rely on."""
    import torch
    from torch import nn

    body, head = getattr(model, "body", None), getattr(model, "head", None)
    dim = getattr(model, "feature_dim", None)
    if not isinstance(body, nn.Sequential) or not any(isinstance(m, nn.Flatten) for m in body):
        raise PluginError(f"{path!r}: .body must be an nn.Sequential holding an nn.Flatten")
    if not isinstance(head, nn.Module):
        raise PluginError(f"{path!r}: .head must be an nn.Module (the final classifier)")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise PluginError(f"{path!r}: .feature_dim must be an int >= 1, got {dim!r}")
    features, logits, whole = _probe(path, model, input_shape)
    if tuple(features.shape) != (2, dim):
        raise PluginError(
            f"{path!r}: .body gives features of shape {tuple(features.shape)} for 2 images, "
            f"not (2, feature_dim={dim})"
        )
    if tuple(logits.shape) != (2, num_classes):
        raise PluginError(
            f"{path!r}: .head gives logits of shape {tuple(logits.shape)} for 2 images, "
            f"not (2, num_classes={num_classes})"
        )
    if whole.shape != logits.shape or not torch.allclose(whole, logits, atol=1e-5):
        raise PluginError(f"{path!r}: forward(x) must equal head(body(x))")


def _probe(
    path: str, model: nn.Module, input_shape: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """body(x), head(body(x)) and model(x) for two seeded images, in eval mode, on the CPU."""
    import torch

    x = torch.randn(2, *input_shape, generator=torch.Generator().manual_seed(0))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            features = model.body(x)
            return features, model.head(features), model(x)
    except Exception as err:  # a user's layers may fail in any way
        raise PluginError(
            f"{path!r} fails on images of shape {tuple(x.shape)}: {type(err).__name__}: {err}"
        ) from err
    finally:
        model.train(was_training)


def resolve_dataset(path: str) -> Callable[[Path, bool], object]:
    """The loader ``path`` names, refused unless it can be called as load(root, download)."""
    found = import_path(path)
    if not callable(found):
        raise PluginError(f"{path!r} is not callable")
    _callable_as(path, found, (Path("."), True), "load(root, download)")
    return found


BACKBONE_PLUGIN = OrPlugin(
    "module:Class of your own backbone (an nn.Module with body, head and feature_dim)",
    resolve_backbone,
)
