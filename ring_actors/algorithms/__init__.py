"""Learning methods by name; the runtime looks them up here and never branches on a name."""

from __future__ import annotations

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions, TaskSpec
from ring_actors.algorithms.dfedavg import DFedAvg
from ring_actors.algorithms.drdfl import DRDFL
from ring_actors.algorithms.local import Local

ALGORITHMS: dict[str, type[Algorithm]] = {
    "local": Local,
    "dfedavg": DFedAvg,
    "drdfl": DRDFL,
}

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmOptions", "TaskSpec"]
