"""A client's checkpoint, read as data and never code.

A client's private state is a torch file read with torch's weights-only loader and an allowlist
of classes (the project's own, torch's modules, a plug-in's method and model; never a function),
so a checkpoint directory on a shared filesystem is not a way into every node.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions
from ring_actors.run_folder import CheckpointError

# What a client checkpoint may name: classes only (a function such as ``os.system`` or one of
# the project's own could be called by the unpickler with arguments of the file's choosing),
# the project's own, torch's modules and generators, and a plug-in's method, options and models.
CLIENT_CLASS_MODULES = ("ring_actors.", "torch.nn.modules.")
CLIENT_CLASSES = frozenset({"torch._C.Generator", "random.Random"})


def load_client_state(path: Path, device: torch.device) -> dict[str, Any]:
    """A client checkpoint, unpickled with torch's weights-only loader and an allowlist.

    The loader constructs only the classes allowed here; a file that names anything else is
    refused with the names it holds, before a byte of it is unpickled.
    """
    names = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    allowed = {name: _allowed_class(name) for name in names}
    refused = [name for name, cls in allowed.items() if cls is None]
    if refused:
        raise CheckpointError(f"{path}: names {refused[:3]}, which no client checkpoint holds")
    with torch.serialization.safe_globals(list(allowed.values())):
        return torch.load(path, map_location=device, weights_only=True)


def _allowed_class(name: str) -> type | None:
    """The class ``name`` stands for if a client checkpoint may hold it, else None.

    Only modules already imported are looked in: reading a file never imports one (the
    client imported a plug-in's module when it built its method).
    """
    module_name, _, attribute = name.rpartition(".")
    module = sys.modules.get(module_name)
    found = getattr(module, attribute, None) if module is not None else None
    if not isinstance(found, type):
        return None
    if name in CLIENT_CLASSES or name.startswith(CLIENT_CLASS_MODULES):
        return found
    return found if issubclass(found, (Algorithm, AlgorithmOptions, torch.nn.Module)) else None
