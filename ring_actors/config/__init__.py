"""Typed experiment config: a YAML file plus dotted overrides, validated before any actor starts.

``sections`` holds the frozen dataclasses, ``coercion`` turns YAML values into their field
types, ``methods`` resolves the ``algorithm`` section, ``loading`` reads a file into a
:class:`Config`, and ``checks`` holds ``ConfigError`` and ``check``.

The sections declare fields of the ``faults`` and ``heterogeneity`` sections, and those
packages check their values with ``checks``. So that either side may be imported first, this
package imports none of its modules itself: each name below is imported from its module the
first time it is asked for, and ``ring_actors.config.checks`` loads neither package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what editors and type checkers read; at run time, ``__getattr__``
    from ring_actors.config.checks import ConfigError as ConfigError
    from ring_actors.config.coercion import apply_overrides as apply_overrides
    from ring_actors.config.coercion import parse_override as parse_override
    from ring_actors.config.loading import config_from_dict as config_from_dict
    from ring_actors.config.loading import load_config as load_config
    from ring_actors.config.methods import check_backbone_for as check_backbone_for
    from ring_actors.config.persistence import CheckpointSection as CheckpointSection
    from ring_actors.config.persistence import TrackingSection as TrackingSection
    from ring_actors.config.sections import AlgorithmSection as AlgorithmSection
    from ring_actors.config.sections import ClientsSection as ClientsSection
    from ring_actors.config.sections import Config as Config
    from ring_actors.config.sections import DataSection as DataSection
    from ring_actors.config.sections import EvalSection as EvalSection
    from ring_actors.config.sections import ExperimentSection as ExperimentSection
    from ring_actors.config.sections import PartitionSection as PartitionSection
    from ring_actors.config.sections import RaySection as RaySection
    from ring_actors.config.sections import ScheduleSection as ScheduleSection
    from ring_actors.config.sections import TopologySection as TopologySection
    from ring_actors.faults.plan import FAULT_ACTIONS as FAULT_ACTIONS
    from ring_actors.faults.plan import FaultSection as FaultSection

# Each public name by the module that defines it.
_PUBLIC = {
    "ring_actors.config.checks": ("ConfigError",),
    "ring_actors.config.coercion": ("apply_overrides", "parse_override"),
    "ring_actors.config.loading": ("config_from_dict", "load_config"),
    "ring_actors.config.methods": ("check_backbone_for",),
    "ring_actors.config.sections": (
        "AlgorithmSection",
        "ClientsSection",
        "Config",
        "DataSection",
        "EvalSection",
        "ExperimentSection",
        "PartitionSection",
        "RaySection",
        "ScheduleSection",
        "TopologySection",
    ),
    "ring_actors.config.persistence": ("CheckpointSection", "TrackingSection"),
    "ring_actors.faults.plan": ("FAULT_ACTIONS", "FaultSection"),
}
_HOMES = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use and kept here after."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
