"""Learning methods by name; the runtime looks them up here and never branches on a name."""

from __future__ import annotations

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions, TaskSpec
from ring_actors.algorithms.dfedavg import DFedAvg
from ring_actors.algorithms.drdfl import DRDFL
from ring_actors.algorithms.fedavg import FedAvg
from ring_actors.algorithms.gene_fl import GeneFL
from ring_actors.algorithms.local import Local
from ring_actors.algorithms.pfedgm import PFedGM
from ring_actors.algorithms.ua_pdfl import UAPDFL

ALGORITHMS: dict[str, type[Algorithm]] = {
    "local": Local,
    "dfedavg": DFedAvg,
    "drdfl": DRDFL,
    "fedavg": FedAvg,
    "ua_pdfl": UAPDFL,
    "pfedgm": PFedGM,
    "gene_fl": GeneFL,
}

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmOptions", "TaskSpec"]
