"""Methods from outside the package: ``algorithm.name=my_module:MyMethod`` (any importable
class implementing :class:`~ring_actors.algorithms.Algorithm`), or a name that an installed
package registers under the ``ring_actors.algorithms`` entry-point group.

The config check and the code that builds a client's method both resolve names here, so a
name that passes validation is the class every client runs. Backbones and datasets of one's
own are imported the same way (``plugins.paths``).
"""

from __future__ import annotations

import dataclasses
import inspect
from importlib.metadata import entry_points

from ring_actors.algorithms import ALGORITHMS, Algorithm, AlgorithmOptions
from ring_actors.plugins.paths import PluginError, import_path, is_plugin_path, load_plugin

ENTRY_POINTS = "ring_actors.algorithms"


def resolve_algorithm(name: str) -> type[Algorithm]:
    """The method class ``name`` stands for: built in, ``module:Class``, or an entry point."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if is_plugin_path(name):
        found = import_path(name)
    else:
        registered = {e.name: e for e in entry_points(group=ENTRY_POINTS)}
        if name not in registered:
            raise PluginError(f"unknown method {name!r}")
        found = load_plugin(name, registered[name].load)
    if not (isinstance(found, type) and issubclass(found, Algorithm)):
        raise PluginError(f"{name!r} is not a subclass of ring_actors.algorithms.Algorithm")
    if inspect.isabstract(found):
        raise PluginError(f"{name!r} is abstract: it leaves methods of Algorithm unimplemented")
    options = found.Options
    if not (dataclasses.is_dataclass(options) and issubclass(options, AlgorithmOptions)):
        raise PluginError(f"{name!r}: its Options must be a dataclass subclass of AlgorithmOptions")
    return found


def known_names() -> list[str]:
    """Built-in methods and those installed packages register."""
    return sorted({*ALGORITHMS, *(e.name for e in entry_points(group=ENTRY_POINTS))})
