"""Acknowledged, fire-and-forget sends: a payload is kept until its receiver takes it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import ray
from ray.exceptions import RayActorError

from ring_actors.protocol import Payload


@dataclass(eq=False)
class InFlight:
    target: int
    payload: Payload
    ref: ray.ObjectRef
    sent_at: float
    reported: bool = False


class Outbox:
    """Every send of every exchange goes through here, so all are acknowledged alike.

    A send that fails or stays unanswered past the hop timeout is reported once (the
    coordinator then probes the target and bypasses it if it is gone); until a new view
    re-routes it, the payload stays here, so a failure never loses it.
    """

    def __init__(self, hop_timeout_s: float, report_unreachable: Callable[[int], None]) -> None:
        self.hop_timeout_s = hop_timeout_s
        self.report_unreachable = report_unreachable
        self.lock = threading.Lock()
        self.handles: dict[int, ray.actor.ActorHandle] = {}
        self.in_flight: list[InFlight] = []
        self.hops = 0  # acknowledged deliveries
        self.bytes_acked = 0
        self.bytes_dispatched = 0  # every byte put on the wire, re-sends included

    def set_handles(self, handles: dict[int, ray.actor.ActorHandle]) -> None:
        with self.lock:
            self.handles.update(handles)

    def send(self, target: int, payload: Payload) -> None:
        with self.lock:
            ref = self.handles[target].receive.remote(payload)
            self.in_flight.append(InFlight(target, payload, ref, time.monotonic()))
            self.bytes_dispatched += payload.nbytes

    def count_served(self, payload: Payload) -> None:
        """A payload returned to a puller: delivered and paid for, like a send."""
        with self.lock:
            self.hops += 1
            self.bytes_acked += payload.nbytes
            self.bytes_dispatched += payload.nbytes

    def reroute(self, members: set[int]) -> list[InFlight]:
        """Remove and return the sends whose target is no longer a member."""
        with self.lock:
            gone = [f for f in self.in_flight if f.target not in members]
            self.in_flight = [f for f in self.in_flight if f.target in members]
        return gone

    def poll(self) -> None:
        """Settle acknowledged sends; report dead or silent targets."""
        with self.lock:
            flights = list(self.in_flight)
        if not flights:
            return
        ready, _ = ray.wait([f.ref for f in flights], num_returns=len(flights), timeout=0)
        ready_ids = {r.hex() for r in ready}
        now = time.monotonic()
        for flight in flights:
            if flight.ref.hex() in ready_ids:
                try:
                    accepted = ray.get(flight.ref)
                except RayActorError:
                    self._suspect(flight)
                    continue
                with self.lock:
                    if flight in self.in_flight:
                        self.in_flight.remove(flight)
                    if accepted:
                        self.hops += 1
                        self.bytes_acked += flight.payload.nbytes
            elif now - flight.sent_at > self.hop_timeout_s:
                self._suspect(flight)

    def _suspect(self, flight: InFlight) -> None:
        if not flight.reported:
            flight.reported = True
            self.report_unreachable(flight.target)

    def drain(self, timeout_s: float) -> int:
        """Wait for the last acknowledgements; the payloads never acknowledged count as lost."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            with self.lock:
                if not self.in_flight:
                    return 0
            time.sleep(0.02)
        with self.lock:
            return len({id(f.payload) for f in self.in_flight})
