"""Refuse, before anything starts, a plan that would run this node out of memory.

Ray's memory monitor kills processes once the node passes its threshold, and a launch past it
loses clients in their constructors, then the slot pool and the coordinator (RESULTS.md, the
50-client scale point). The figures below are measured; the check compares them with what
``/proc/meminfo`` says is available now.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ring_actors.config import Config

# Growth of the whole process tree's PSS per client, 8 -> 16 -> 32 clients of the small CNN
# (FedAvg 0.405-0.414 GB, DRDFL 0.392-0.405 GB; benchmarks/RESULTS.md, "Scale curve"), with
# torch's CUDA build, which is what ``pip install torch`` gives on Linux x86_64.
CLIENT_GB = 0.42
# The same with torch's CPU build, whose import keeps less private memory in every process
# (16 -> 32 clients: DRDFL 0.275 GB, FedAvg 0.295 GB; RESULTS.md, "Fifty clients on one node").
CLIENT_GB_CPU_BUILD = 0.30
# The same lines' intercept: Ray's own processes, the driver, the coordinator and the slot pool
# (FedAvg 1.89 GB, DRDFL 1.67 GB).
CONTROL_PLANE_GB = 1.9
# A larger backbone adds its parameters about four times per client (the weights, their
# gradients, the optimiser's momentum and a received model): an estimate, not yet measured.
PARAMETER_COPIES = 4
MEASURED_BACKBONES = ("cnn", "cnn_bn")
# Ray's memory monitor kills workers above this fraction of the node's memory.
RAY_THRESHOLD_ENV = "RAY_memory_usage_threshold"
RAY_DEFAULT_THRESHOLD = 0.95


class AdmissionError(RuntimeError):
    """The plan needs more memory than this node has available."""


@dataclass(frozen=True)
class NodeMemory:
    """What ``/proc/meminfo`` says, in GB."""

    available_gb: float
    total_gb: float

    @property
    def usable_gb(self) -> float:
        """Available memory less what Ray's memory monitor keeps free."""
        threshold = float(os.environ.get(RAY_THRESHOLD_ENV, RAY_DEFAULT_THRESHOLD))
        return self.available_gb - (1 - threshold) * self.total_gb


def node_memory() -> NodeMemory | None:
    """This machine's available and total memory; None where ``/proc/meminfo`` is missing."""
    try:
        with open("/proc/meminfo") as handle:
            fields = {line.split(":")[0]: int(line.split()[1]) for line in handle}
    except (OSError, ValueError, IndexError):
        return None
    if "MemAvailable" not in fields:
        return None
    return NodeMemory(fields["MemAvailable"] / 2**20, fields["MemTotal"] / 2**20)


def torch_has_cuda(torch_dir: Path | None = None) -> bool:
    """Whether the installed torch is a CUDA build (its CUDA library ships in ``torch/lib``),
    read from its files: the answer costs no import of torch."""
    if torch_dir is None:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return True  # unknown: assume the larger figure
        torch_dir = Path(spec.submodule_search_locations[0])
    return any((torch_dir / "lib").glob("libtorch_cuda*"))


def client_gb(config: Config, cuda_build: bool | None = None) -> float:
    """Memory one client process adds: measured for the small CNN with either build of
    torch (``cuda_build``: this node's, unless given), estimated above it for the shared
    backbones; a method's own network (``fedpac_cnn``) counts as measured."""
    from ring_actors.models import BACKBONES, build_backbone

    cuda_build = torch_has_cuda() if cuda_build is None else cuda_build
    base = CLIENT_GB if cuda_build else CLIENT_GB_CPU_BUILD
    backbone = getattr(config.algorithm.options, "backbone", "cnn")
    if backbone in MEASURED_BACKBONES or backbone not in BACKBONES:
        return base
    import torch

    with torch.device("meta"):  # counts parameters without allocating them
        extra = build_backbone(backbone, (3, 32, 32), 100)
        small = build_backbone("cnn", (3, 32, 32), 100)
    nbytes = sum(p.numel() * p.element_size() for p in extra.parameters())
    nbytes -= sum(p.numel() * p.element_size() for p in small.parameters())
    return base + PARAMETER_COPIES * max(0, nbytes) / 1e9


def need_gb(config: Config) -> float:
    """The whole plan on one node: every client (joiners included) and the control plane."""
    return config.total_clients * client_gb(config) + CONTROL_PLANE_GB


def check_memory(config: Config, memory: NodeMemory | None) -> None:
    """Raise :class:`AdmissionError` with the numbers when the plan does not fit ``memory``."""
    if memory is None:
        return
    per_client, total = client_gb(config), config.total_clients
    need = need_gb(config)
    if need <= memory.usable_gb:
        return
    fits = max(0, math.floor((memory.usable_gb - CONTROL_PLANE_GB) / per_client))
    raise AdmissionError(
        f"not enough memory on this node for {total} clients: they need about {need:.1f} GB "
        f"({total} x {per_client:.2f} GB per client process + {CONTROL_PLANE_GB} GB for Ray, "
        f"the driver and the coordinator), and this node has {memory.available_gb:.1f} GB "
        f"available of {memory.total_gb:.1f} GB, {memory.usable_gb:.1f} GB below the point "
        f"where Ray's memory monitor kills processes. About {fits} clients fit here: lower "
        "clients.count (with clients.reserve and the fault plan's joins), or run on a cluster "
        "of more nodes (ray.address) so each node hosts fewer clients."
    )
