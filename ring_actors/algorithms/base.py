"""The one interface every learning method implements; pure PyTorch, no Ray."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

import torch

from ring_actors.algorithms import optim
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Payload
from ring_actors.plugins.paths import BACKBONE_PLUGIN


@dataclass(frozen=True)
class AlgorithmOptions:
    """Hyperparameters every method shares; methods subclass this with their own keys."""

    lr: float = 1e-3
    # A built-in name, or module:Class of one's own (its contract: ring_actors.plugins.paths).
    backbone: Annotated[Literal["cnn", "resnet18"], BACKBONE_PLUGIN] = "cnn"
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = 0.9
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr: must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay: must be >= 0, got {self.weight_decay}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum: must be in [0, 1), got {self.momentum}")


@dataclass(frozen=True)
class TaskSpec:
    """What a client's algorithm needs to know about its task and hardware."""

    num_classes: int
    input_shape: tuple[int, int, int]
    local_epochs: int
    batch_size: int
    device: torch.device
    seed: int
    shared_seed: int


class Algorithm(ABC):
    """A federated method as seen by one client.

    Every method uses the same round, and the runtime carries every exchange the same way:

    1. **merge** what the in-neighbours sent after the previous round. By default they pushed
       their whole ``shared_state()``. A method whose ``offer()`` returns a summary has it
       pushed instead; ``decide`` then names the keys to pull from each offering peer, and
       ``merge`` gets the pulled parts (offer/decide: bytes are only spent where asked for).
    2. **train_round** on the private data.
    3. **ring laps**: for each name in ``laps(round)`` a token travels once around the live
       ring, every client adds ``contribute(...)`` into it key by key, and a second lap hands
       the total to everyone through ``apply_lap``. Sums with weights give exact averages;
       disjoint keys give an all-gather.
    4. **evaluate** every few rounds, then publish ``shared_state()`` (push or offer).

    A late joiner is initialised once with ``init_from`` on what its predecessor's
    ``hand_off_state()`` held. Nothing here knows about Ray, so methods are unit-testable
    on their own.
    """

    Options: ClassVar[type[AlgorithmOptions]] = AlgorithmOptions

    def __init__(self, options: AlgorithmOptions, task: TaskSpec) -> None:
        self.options = options
        self.task = task
        self.device = task.device

    @abstractmethod
    def shared_state(self) -> dict[str, torch.Tensor]:
        """Tensors that leave this client; an empty dict means nothing is sent."""

    current_round = -1  # the round in progress, for a merge that weighs states by age

    def begin_round(self, round_: int) -> None:
        """The runtime starts ``round_`` (before ``merge``): a payload's ``round`` against
        it is how stale the payload is."""
        self.current_round = round_

    @abstractmethod
    def merge(self, received: list[Payload]) -> None:
        """Combine payloads from in-neighbours into the local state."""

    @abstractmethod
    def train_round(self, data: LabelledImages) -> dict[str, float]:
        """Run the round's local epochs on ``data``; return mean losses by name."""

    @abstractmethod
    def predict(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits of every prediction path, keyed by metric name; ``acc`` is the primary one."""

    def offer(self) -> dict[str, torch.Tensor] | None:
        """A small summary pushed instead of the whole shared state, or None to push it all."""
        return None

    def decide(self, offers: list[Payload]) -> dict[int, tuple[str, ...]]:
        """Keys of ``shared_state()`` to pull from each offering sender (by sender id).

        Only called for methods whose ``offer`` is not None; senders left out cost nothing.
        """
        return {p.sender: () for p in offers}

    def laps(self, round_: int) -> tuple[str, ...]:
        """Names of the ring laps after training in ``round_``; the same on every client."""
        return ()

    def contribute(self, lap: str, round_: int) -> dict[str, torch.Tensor]:
        """What this client adds into the lap's token; keys new to the token are inserted.

        Returning pre-weighted sums with their weights under other keys (for example
        ``w*theta`` and ``w``) makes the total an exact weighted average over contributors.
        An empty dict takes part without contributing (a client not sampled this round).
        """
        return {}

    def apply_lap(
        self, lap: str, round_: int, total: dict[str, torch.Tensor], contributors: list[int]
    ) -> None:
        """Use the lap's key-wise total over ``contributors`` (every client gets the same)."""
        raise NotImplementedError(f"{type(self).__name__} runs laps but does not apply them")

    def hand_off_state(self) -> dict[str, torch.Tensor]:
        """What a newcomer spliced in after this client is handed (default: the shared state)."""
        return self.shared_state()

    def set_shared(self, tensors: dict[str, torch.Tensor]) -> None:
        """Overwrite the shared part with ``tensors`` (a newcomer copies what it is handed)."""
        state = self.shared_state()
        missing = set(state) - set(tensors)
        if missing:
            raise KeyError(f"received state lacks {sorted(missing)}")
        with torch.no_grad():
            for name, value in state.items():
                value.copy_(tensors[name].to(value.device))

    def joining(self, first_round: int) -> None:
        """This client is spliced into a running ring before ``first_round``, whether or not
        a hand-off follows: a method whose roles depend on when a client arrived hears it
        here (the default needs nothing)."""
        return None

    def init_from(self, received: Payload) -> None:
        """A late joiner's first state: the shared part copied, the private part left fresh."""
        self.set_shared(received.tensors)

    @torch.no_grad()
    def evaluate(self, data: LabelledImages) -> dict[str, float]:
        """Accuracy of every prediction path on ``data``."""
        correct: dict[str, int] = {}
        for x, y in data.batches(max(256, self.task.batch_size), shuffle=False):
            for name, logits in self.predict(x).items():
                correct[name] = correct.get(name, 0) + int((logits.argmax(1) == y).sum())
        return {name: hits / max(1, len(data)) for name, hits in correct.items()}

    def diagnostics(self, data: LabelledImages) -> dict[str, float]:
        """Measurements beside accuracy on ``data`` that tell how a method works (none here)."""
        return {}

    def make_optimizer(self, params) -> optim.SGD | optim.Adam:
        """The configured optimizer over ``params`` (torch.optim's rules, see ``optim``)."""
        opts = self.options
        if opts.optimizer == "sgd":
            return optim.SGD(
                params, lr=opts.lr, momentum=opts.momentum, weight_decay=opts.weight_decay
            )
        return optim.Adam(params, lr=opts.lr, weight_decay=opts.weight_decay)
