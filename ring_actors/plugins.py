"""Methods from outside the package: ``algorithm.name=my_module:MyMethod`` (any importable
class implementing :class:`~ring_actors.algorithms.Algorithm`), or a name that an installed
package registers under the ``ring_actors.algorithms`` entry-point group."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from ring_actors.algorithms import ALGORITHMS, Algorithm

ENTRY_POINTS = "ring_actors.algorithms"


class PluginError(ValueError):
    """A method named in a config that cannot be found or is not a method."""


def resolve_algorithm(name: str) -> type[Algorithm]:
    """The method class ``name`` stands for: built in, ``module:Class``, or an entry point."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if ":" in name:
        module, _, attribute = name.partition(":")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as err:
            raise PluginError(f"cannot import {name!r}: {err}") from err
    else:
        registered = {e.name: e for e in entry_points(group=ENTRY_POINTS)}
        if name not in registered:
            raise PluginError(f"unknown method {name!r}")
        found = registered[name].load()
    if not (isinstance(found, type) and issubclass(found, Algorithm)):
        raise PluginError(f"{name!r} is not a subclass of ring_actors.algorithms.Algorithm")
    return found


def known_names() -> list[str]:
    """Built-in methods and those installed packages register."""
    return sorted({*ALGORITHMS, *(e.name for e in entry_points(group=ENTRY_POINTS))})
