"""Learning methods by name; the runtime looks them up here and never branches on a name."""

from __future__ import annotations

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions, TaskSpec
from ring_actors.algorithms.dfedavg import DFedAvg
from ring_actors.algorithms.dfedpgp import DFedPGP
from ring_actors.algorithms.dispfl import DisPFL
from ring_actors.algorithms.drdfl import DRDFL
from ring_actors.algorithms.fedavg import FedAvg
from ring_actors.algorithms.fedbn import FedBN
from ring_actors.algorithms.fednova import FedNova
from ring_actors.algorithms.fedrep import FedRep
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
    "fedrep": FedRep,
    "fedbn": FedBN,
    "fednova": FedNova,
    "dfedpgp": DFedPGP,
    "dispfl": DisPFL,
}

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmOptions", "TaskSpec"]
