"""Reading pickled state back without running what a file names: torch's weights-only loader
with an allowlist of classes, so a tampered checkpoint or spool file cannot call a function."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from ring_actors.storage.run_folder import CheckpointError

# What a file may name: classes only (a function such as ``os.system`` or one of the project's
# own could be called by the unpickler with arguments of the file's choosing), the project's
# own, torch's modules and generators, and subclasses of the bases a caller allows.
ALLOWED_MODULES = ("ring_actors.", "torch.nn.modules.")
ALLOWED_CLASSES = frozenset({"torch._C.Generator", "random.Random"})


def load_allowlisted(
    path: Path, device: torch.device, bases: tuple[type, ...] = ()
) -> dict[str, Any]:
    """Unpickle ``path`` with torch's weights-only loader, constructing only allowed classes.

    A file that names anything else is refused with the names it holds, before a byte of it
    is unpickled.
    """
    names = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    allowed = {name: _allowed_class(name, bases) for name in names}
    refused = [name for name, cls in allowed.items() if cls is None]
    if refused:
        raise CheckpointError(f"{path}: names {refused[:3]}, which no state file holds")
    with torch.serialization.safe_globals(list(allowed.values())):
        return torch.load(path, map_location=device, weights_only=True)


def _allowed_class(name: str, bases: tuple[type, ...]) -> type | None:
    """The class ``name`` stands for if a state file may hold it, else None.

    Only modules already imported are looked in: reading a file never imports one.
    """
    module_name, _, attribute = name.rpartition(".")
    module = sys.modules.get(module_name)
    found = getattr(module, attribute, None) if module is not None else None
    if not isinstance(found, type):
        return None
    if name in ALLOWED_CLASSES or name.startswith(ALLOWED_MODULES):
        return found
    return found if issubclass(found, (*bases, torch.nn.Module)) else None
