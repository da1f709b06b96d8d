"""A run's setting: the config keys that decide what it computes, so runs (and recorded
references) are compared on what matters and not on where outputs go or how it is placed."""

from __future__ import annotations

from typing import Any

from ring_actors.config import config_from_dict

# Keys that do not change what a run computes, or that tell the runs of one sweep apart.
NOT_SETTING = (
    "experiment.name",
    "experiment.seed",
    "data.root",  # where the files are read from, not which
    "data.download",
    "algorithm.",
    "tracking.",
    "ray.",
    "clients.num_cpus",
    "clients.num_gpus",
    "clients.placement",
    "clients.concurrency",
    "clients.slots_per_gpu",
    "clients.on_launch_failure",  # what a failed start does, not what a run computes
    "schedule.max_payload_bytes",  # a guard against hostile payloads
)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys; lists (the fault plan) stay whole values."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def setting_keys(config: dict[str, Any]) -> dict[str, Any]:
    """The dotted keys of a run's ``config.yaml`` that define its setting."""
    return {k: v for k, v in flatten(config).items() if not k.startswith(NOT_SETTING)}


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


def resolved_setting(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded setting read through today's config: keys added since it was recorded take
    their defaults, so a reference stays comparable while the config grows."""
    return setting_keys(config_from_dict(unflatten(recorded)).to_dict())
