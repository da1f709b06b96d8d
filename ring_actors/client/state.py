"""What several parts of a client share, each piece a small declared class: where its round
loop is, the membership it acts on, what it published, what a valid payload holds, and what
it told the coordinator. :class:`~ring_actors.client.core.ClientCore` builds one of each and
hands a part only the pieces it uses."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.journal import JournalEntry
from ring_actors.delivery.payload_checks import (
    Bounds,
    TensorSpec,
    derived_limit,
    model_bytes,
    specs,
)
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.transport import ClientHandle
from ring_actors.delivery.view import View

if TYPE_CHECKING:
    from ring_actors.algorithms import Algorithm
    from ring_actors.config import Config


class Events(Protocol):
    """Where a part reports what happened (the run's events, at the coordinator)."""

    def event(self, kind: EventKind, round_: int, detail: str = "", **measured: float) -> None: ...


@dataclass
class Progress:
    """Where the round loop is: the loop (or a restore) writes it, every part reads it."""

    first_round: int = 0
    round: int = -1  # the round in progress
    completed: int = -1  # the last round finished


class Membership:
    """The view the client acts on and the handles its peers are reached through."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.view = View(epoch=0, members=(), first_rounds=())
        self.handles: dict[int, ClientHandle] = {}

    @property
    def current(self) -> View:
        with self.lock:
            return self.view

    def handle(self, peer: int) -> ClientHandle | None:
        with self.lock:
            return self.handles.get(peer)

    def all_handles(self) -> dict[int, ClientHandle]:
        with self.lock:
            return dict(self.handles)


@dataclass
class Published:
    """What the client published: its state by round (peers pull from it), its pushes and
    whom they went to (a new view's out-neighbours get them too), and what a joiner starts
    from. Under the membership's lock: a push and the view it went out under change
    together."""

    lock: threading.Lock
    hand_off: dict[str, torch.Tensor]  # snapshotted each round
    hand_off_round: int = -1  # the round ``hand_off`` ended (-1: the state it started with)
    # Joiners asked for the state of a round not ended yet: (joiner, its handle, the round).
    waiting_joiners: list[tuple[int, ClientHandle, int]] = field(default_factory=list)
    by_round: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    last_push: Payload | None = None
    # Re-sent to a new out-neighbour, which may need the one before the newest.
    recent_pushes: list[Payload] = field(default_factory=list)
    pushed_to: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class PayloadSpecs:
    """What a valid payload holds on each channel, by name, shape and dtype, and its size
    limit. Every client runs the same method, so what ours publishes is what a valid payload
    holds; if it publishes nothing, nobody sends and nobody waits."""

    offers: bool  # the method offers first and peers pull what it decides
    expected: dict[str, tuple[int, ...]]  # what a peer's push holds: nothing, none awaited
    share: dict[str, TensorSpec]
    shared: dict[str, TensorSpec]
    init: dict[str, TensorSpec]
    max_payload_bytes: int
    bounds: Bounds

    @classmethod
    def of(
        cls, algorithm: Algorithm, hand_off: dict[str, torch.Tensor], config: Config
    ) -> PayloadSpecs:
        """The size limit, unless set, is what this method can send at most."""
        offer, shared = algorithm.offer(), algorithm.shared_state()
        limit = config.schedule.max_payload_bytes or derived_limit(
            model_bytes(algorithm, shared, hand_off), config.total_clients
        )
        return cls(
            offers=offer is not None,
            expected=_shapes(offer if offer is not None else shared),
            share=specs(offer if offer is not None else shared),
            shared=specs(shared),
            init=specs(hand_off),
            max_payload_bytes=limit,
            bounds=Bounds(config.experiment.rounds, epoch_lead=3 * config.total_clients + 8),
        )


class Journal:
    """Every report sent to the coordinator, for a restarted coordinator to replay."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: list[JournalEntry] = []

    def add(self, entry: JournalEntry) -> None:
        """A round reported again (scored once its budget ended) replaces its first report."""
        with self.lock:
            if entry.kind == "round":
                same = ("round", entry.round)
                self.entries = [e for e in self.entries if (e.kind, e.round) != same]
            self.entries.append(entry)

    def round_report(self, round_: int) -> dict[str, float] | None:
        with self.lock:
            kept = [e.metrics for e in self.entries if (e.kind, e.round) == ("round", round_)]
        return dict(kept[-1]) if kept else None

    def dicts(self) -> list[dict]:
        with self.lock:
            return [entry.to_dict() for entry in self.entries]

    def restore(self, dicts: list[dict]) -> list[JournalEntry]:
        with self.lock:
            self.entries = [JournalEntry.from_dict(e) for e in dicts]
            return list(self.entries)


def _shapes(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in tensors.items()}
