"""Real client cores (their RingLaps, Inbox and Outbox) joined by a network whose every
message waits for a test's scheduler, which delivers, loses (the sender re-sends), duplicates or
reorders it, and crashes members: what the lap tests drive schedules through."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import replace

import torch

from ring_actors.client.core import ClientCore, ClientData
from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import Config, config_from_dict
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.transport import PeerGone, PeerUnavailable
from ring_actors.delivery.view import View
from tests.helpers.client_links import Reports
from tests.helpers.synthetic import separable

SHAPE = (1, 4, 4)  # a small network: every replay builds fresh cores
# A hop's timeout sets the retries and resends a schedule waits for; giving a lap up takes
# 3.6 s, which a thread starved by a loaded suite outlasted at 1.8 s ("member 0 gave up").
HOP_S = 0.2
GIVE_UP_S = 3.6
DATA = separable(16, 4, SHAPE)


class Net:
    """Every send waits here for the scheduler."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: list[tuple[int, Payload, Future]] = []
        self.cores: dict[int, ClientCore] = {}
        self.crashed: set[int] = set()
        self.delivered = 0

    def handle(self, target: int, sender: int) -> Handle:
        return Handle(self, target, sender)

    def step(self, action: str, pick: int) -> None:
        with self.lock:
            if not self.queue:
                return
            index = pick % len(self.queue)
            target, payload, answer = self.queue[index]
            if action != "duplicate":
                del self.queue[index]
        if target in self.crashed:
            settle(answer, error=PeerGone(f"client {target}"))
        elif action == "lose":  # no answer reached the sender: it sends again
            settle(answer, error=PeerUnavailable(f"client {target}"))
        else:  # a duplicate arrives twice: now, and again when delivered
            self.delivered += 1
            accepted = self.cores[target].receive(payload)
            if action != "duplicate":
                settle(answer, accepted)


def settle(answer: Future, value: bool = False, error: Exception | None = None) -> None:
    if answer.done():  # a duplicate's answer was given already
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(value)


class Handle:
    def __init__(self, net: Net, target: int, sender: int) -> None:
        self.net, self.target, self.sender = net, target, sender

    def receive(self, payload: Payload) -> Future:
        answer: Future = Future()
        with self.net.lock:
            if self.sender in self.net.crashed:  # a dead member sends nothing more
                answer.set_exception(PeerGone(f"client {self.sender}"))
            else:
                self.net.queue.append((self.target, payload, answer))
        return answer

    def lap_result(self, name: str, round_: int) -> Future:
        answer: Future = Future()
        if self.target in self.net.crashed:
            answer.set_exception(PeerGone(f"client {self.target}"))
        else:
            answer.set_result(self.net.cores[self.target].lap_result(name, round_))
        return answer


CONFIG = config_from_dict(
    {
        "clients": {"count": 4},
        "algorithm": {"name": "fedavg"},
        # Chunks wherever a lap is large enough, however few cores this machine has.
        "schedule": {"hop_timeout_s": HOP_S, "chunked_laps": "always"},
    }
)
METHODS = {m: build_algorithm(CONFIG, m, 4, SHAPE, torch.device("cpu")) for m in range(4)}


def ring(
    members: int, config: Config = CONFIG, chunked: bool = False, cores: int | None = None
) -> tuple[Net, View]:
    """``members`` client cores on ``cores`` CPUs (None: this machine's); with ``chunked``,
    every lap of three or more goes in chunks."""
    net = Net()
    view = View(1, tuple(range(members)), (0,) * members)
    data = ClientData(DATA, DATA, DATA)
    for m in range(members):
        net.cores[m] = ClientCore(m, config, METHODS[m], data, Reports(), cores=cores)
        give_up_after(net.cores[m], GIVE_UP_S)
        if chunked:
            net.cores[m].laps.chunk_min_bytes = 0
    for m in range(members):
        adopt(net, m, view)
    return net, view


def give_up_after(core: ClientCore, seconds: float) -> None:
    """``core`` abandons a lap ``seconds`` after it began, whatever its hop timeout."""
    core.timeouts = core.laps.timeouts = replace(core.timeouts, lap_give_up_s=seconds)


def adopt(net: Net, member: int, view: View) -> None:
    """``member`` takes ``view``, with a handle to each other member of it."""
    handles = {p: net.handle(p, member) for p in view.members if p != member}
    net.cores[member].set_view(view, handles)
