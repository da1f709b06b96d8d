"""What a run would do, told before it starts: nothing here starts Ray."""

from __future__ import annotations

import os
import typing
from pathlib import Path

import torch

from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import Config, ConfigError, PartitionSection
from ring_actors.data.sources import DATASETS, DatasetError, dataset_facts
from ring_actors.faults.plan import plan_lines
from ring_actors.models import BACKBONES
from ring_actors.plugins.methods import PluginError, known_names, resolve_algorithm
from ring_actors.preflight.admission import CONTROL_PLANE_GB, client_gb, need_gb, node_memory
from ring_actors.preflight.capacity import fits, shortfall
from ring_actors.preflight.heterogeneity_plan import describe_heterogeneity
from ring_actors.runtime.slot_math import slot_limit, threads_per_slot
from topologies import TOPOLOGIES


def list_choices(paper_dir: Path) -> str:
    """Methods with their options and defaults, datasets, partitions, topologies, cells."""
    lines = ["methods (algorithm.name; installed packages' entry points included):"]
    for name in known_names():
        try:
            method = resolve_algorithm(name)
        except PluginError as err:  # a broken package must not hide the others
            lines.append(f"  {name:10s} (cannot be used: {err})")
            continue
        doc = (method.__doc__ or "").strip().splitlines()
        lines.append(f"  {name:10s} {doc[0] if doc else ''}")
        defaults = method.Options()
        options = ", ".join(f"{f}={getattr(defaults, f)!r}" for f in defaults.__dataclass_fields__)
        lines.append(f"             {options}")
    lines.append(
        f"backbones (algorithm.backbone): {', '.join(BACKBONES)} (a method may offer others: "
        "see its backbone= above), or module:Class of your own, an nn.Module built as "
        "Class(input_shape, num_classes) with body, head and feature_dim"
    )
    lines.append(
        f"datasets (data.dataset): {', '.join(DATASETS)}, or module:function of your own, "
        "load(root, download) returning a ring_actors.data.sources.DatasetArrays"
    )
    kinds = typing.get_args(typing.get_type_hints(PartitionSection)["kind"])
    lines.append(f"partitions (data.partition.kind): {', '.join(kinds)}")
    kinds = tuple(TOPOLOGIES)
    lines.append(f"topologies (topology.kind): {', '.join(kinds)}")
    lines.append(f"paper configs ({paper_dir}):")
    for path in sorted(paper_dir.glob("*.yaml")):
        first = path.read_text().splitlines()[0].lstrip("# ").strip()
        lines.append(f"  {path.name:42s} {first}")
    return "\n".join(lines)


def describe_plan(config: Config) -> str:
    """Validate against this machine: the data, the placement, slots, memory, bytes per hop."""
    data, clients, experiment = config.data, config.clients, config.experiment
    try:
        facts = dataset_facts(data.dataset, data.root, data.download)
    except DatasetError as err:  # a loader of one's own, run here for its facts
        raise ConfigError(str(err)) from err
    cores = os.cpu_count() or 1
    node = {"CPU": cores, "GPU": torch.cuda.device_count()}
    limit = slot_limit(clients.concurrency, clients.slots_per_gpu, clients.num_gpus, node)
    total = config.total_clients
    try:
        method = build_algorithm(
            config, 0, facts["num_classes"], facts["input_shape"], torch.device("cpu")
        )
    except PluginError as err:  # a backbone of one's own, first built for these images
        raise ConfigError(f"algorithm.backbone: {err}") from err
    shared = method.offer() if method.offer() is not None else method.shared_state()
    hop_bytes = _nbytes(shared)
    # A lap method pushes nothing: its traffic is the token, which carries the running total.
    lap_bytes = {name: _nbytes(method.contribute(name, 0)) for name in method.laps(0)}
    if not facts["present"] and not data.download:
        raise ConfigError(
            f"data.root: {data.dataset} is not at {facts['where']} and data.download is false"
        )
    data_line = "found" if facts["present"] else "missing: downloaded at launch"
    shape = "x".join(str(n) for n in facts["input_shape"])
    return "\n".join(
        [
            f"data:      {data.dataset} at {facts['where']} ({data_line}): "
            f"{facts['num_classes']} classes, images {shape}",
            f"clients:   {total} ({clients.count} at the start), each {clients.num_cpus:g} CPU "
            f"and {clients.num_gpus:g} GPU: {total * clients.num_cpus:g} CPUs and "
            f"{total * clients.num_gpus:g} GPUs asked of the cluster",
            f"this node: {cores} cores, {node['GPU']} GPUs; {limit} compute slots, "
            f"{threads_per_slot(limit, node)} torch threads per computing client",
            f"memory:    about {need_gb(config):.1f} GB ({client_gb(config):.2f} GB per client "
            f"process, {CONTROL_PLANE_GB} GB for Ray, the driver and the coordinator)"
            + _memory_here(),
            f"method:    {config.algorithm.name}, {hop_bytes / 1e6:.3f} MB per hop "
            f"({config.topology.kind} topology, {config.schedule.mode})",
            *(
                f"ring lap:  {name!r}, "
                + (
                    f"{size / 1e6:.3f} MB per token hop"
                    if size
                    else "token size known once a round has trained (it carries what training made)"
                )
                for name, size in lap_bytes.items()
            ),
            *describe_heterogeneity(config),
            "faults:    " + "; ".join(plan_lines(config.faults, experiment.rounds) or ["none"]),
        ]
    )


def _memory_here() -> str:
    memory = node_memory()
    if memory is None:
        return ""
    return f"; this node has {memory.usable_gb:.1f} GB usable before Ray's memory monitor acts"


def cannot_start_here(config: Config) -> str | None:
    """Why the run cannot start on this machine, or None. A run on a cluster
    (``ray.address`` or ``RAY_ADDRESS``) is judged there: its nodes, or an autoscaler, decide."""
    if config.ray.address or os.environ.get("RAY_ADDRESS"):
        return None
    node = {"CPU": os.cpu_count() or 1, "GPU": torch.cuda.device_count()}
    if fits(config, node):
        return None
    return shortfall(config, node, config.total_clients, waited=False)


def _nbytes(tensors: dict) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())
