"""A coordinator core whose clients are handles a test scripts (alive, dead, restarting or
silent): the coordinator's logic driven in one process, with short times."""

from __future__ import annotations

from concurrent.futures import Future

from ring_actors.config import config_from_dict
from ring_actors.coordinator.core import CoordinatorCore
from ring_actors.coordinator.tracking import Tracker
from ring_actors.delivery.transport import PeerGone, PeerUnavailable


class ScriptedClient:
    """A client handle whose answers a test sets: alive, dead, or silent."""

    def __init__(self, client_id: int) -> None:
        self.id = client_id
        self.state = "alive"
        self.views: list = []
        self.started: list[tuple[int, object]] = []
        self.resumed = 0  # calls to resume (a resumed run's loop from its checkpoint)
        self.restored_at_most: list[int] = []  # what each call to restore named
        self.checkpoints: tuple[int, ...] = ()  # the rounds of its checkpoints on disk
        self.handed_to: list[tuple[int, int]] = []  # (joiner, round)

    def _answer(self, value) -> Future:
        future: Future = Future()
        if self.state == "dead":
            future.set_exception(PeerGone(f"client {self.id}"))
        elif self.state == "restarting":
            future.set_exception(PeerUnavailable(f"client {self.id}"))
        elif self.state == "alive":
            future.set_result(value)
        return future  # silent: never answers

    def ping(self) -> Future:
        return self._answer(-1)  # no round finished yet

    def journal(self) -> Future:
        return self._answer([])

    def saved_rounds(self) -> Future:
        return self._answer(self.checkpoints)

    def set_view(self, view, handles) -> None:
        self.views.append(view)

    def start(self, first_round: int = 0, joining=None) -> None:
        self.started.append((first_round, joining))

    def resume(self, struck_through: int = -1) -> None:
        self.resumed += 1

    def restore(self, at_most: int, restarts: dict[int, int]) -> Future:
        self.restarts = restarts
        self.restored_at_most.append(at_most)
        return self._answer(min(at_most, max(self.checkpoints)))

    def hand_off(self, joiner: int, handle, round_: int) -> None:
        self.handed_to.append((joiner, round_))


def make(tmp_path, clients=3, find=None, sections=None, tracker=None, **schedule):
    config = config_from_dict(
        {
            "experiment": {"rounds": 5},
            "clients": {"count": clients},
            "schedule": {"hop_timeout_s": 0.3, "heartbeat_s": 0.05, **schedule},
            **(sections or {}),
        }
    )
    handles = {c: ScriptedClient(c) for c in range(clients + 1)}
    core = CoordinatorCore(
        config,
        tmp_path,
        tracker or Tracker("unused", "t", "run"),
        find or (lambda c: handles.get(c)),
    )
    for c in range(clients):
        core.register(c, handles[c], "node")
    core.start_clients()
    return core, handles
