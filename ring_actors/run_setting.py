"""A run's setting: the config keys that decide what it computes, so runs (seeds in one cell
of a report, a recorded reference, a resumed run) are compared on what matters and not on
where outputs go, how it is placed or what it is called."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ring_actors.config import config_from_dict

# Keys that say where or how a run ran, or what it is called, not what it computed.
NOT_SETTING = (
    "experiment.name",
    "experiment.seed",
    "data.root",  # where the files are read from, not which
    "data.download",
    "tracking.",
    "ray.",
    "clients.num_cpus",
    "clients.num_gpus",
    "clients.placement",
    "clients.concurrency",
    "clients.slots_per_gpu",
    "clients.start_timeout_s",
    "clients.on_launch_failure",  # what a failed start does, not what a run computes
    "schedule.max_payload_bytes",  # a guard against hostile payloads
)
METHOD = ("algorithm.",)  # left out where runs of several methods share one setting


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys; lists (the fault plan) stay whole values."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def setting_keys(config: Mapping[str, Any], ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """The dotted keys of a run's ``config.yaml`` that define its setting, less ``ignore``
    (``METHOD``: the setting several methods share)."""
    left_out = (*NOT_SETTING, *ignore)
    return {k: v for k, v in flatten(config).items() if not k.startswith(left_out)}


def unflatten(dotted: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys back into nested sections."""
    tree: dict[str, Any] = {}
    for key, value in dotted.items():
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def resolved_setting(recorded: dict[str, Any], ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """A recorded setting read through today's config: keys added since it was recorded take
    their defaults, so a reference stays comparable while the config grows."""
    return setting_keys(config_from_dict(unflatten(recorded)).to_dict(), ignore)
