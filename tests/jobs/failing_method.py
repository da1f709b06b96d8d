"""A method of one's own that fails when it trains: a user's bug, met at run time."""

from __future__ import annotations

from ring_actors.algorithms.dfedavg import DFedAvg
from ring_actors.data.images import LabelledImages


class FailsToTrain(DFedAvg):
    """DFedAvg whose first round raises, as a plug-in with a bug would."""

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        raise ValueError("the plug-in's own bug")


class FailsToBuild(DFedAvg):
    """DFedAvg whose constructor raises in every client."""

    def __init__(self, *args, **kwargs) -> None:
        raise RuntimeError("the plug-in cannot be built")
