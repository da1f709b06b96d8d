"""Acknowledged, fire-and-forget sends: a payload is kept until its receiver takes it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.delivery.transport import ClientHandle, PeerGone, PeerUnavailable, Pending
from ring_actors.timeouts import Timeouts

log = logging.getLogger(__name__)


class NotKept(RuntimeError):
    """A receiver's answer to a payload it could not keep (its spool's write failed, as on a
    full disk): nothing of it was queued, and the sender sends it again."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason  # read through Ray's wrapper, whose str() is a traceback


class _Unsent:
    """The answer of a send that could not go out yet."""

    def done(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> bool:
        raise TimeoutError("not sent")


_NEVER = _Unsent()


@dataclass(eq=False)
class InFlight:
    target: int
    payload: Payload
    answer: Pending[bool]
    sent_at: float
    reported: bool = False
    gone_at: float | None = None  # when the target was found dead (it may be restarted)
    refused_since: float | None = None  # when the target first could not keep it
    refused_at: float | None = None  # its latest refusal: sent again a back-off later
    refusal: str = ""
    sends: int = 1

    def describe(self) -> str:
        return f"{self.payload.channel.value} round {self.payload.round} to {self.target}"


class Outbox:
    """Every send of every exchange goes through here, so all are acknowledged alike.

    A send whose target is gone or stays unanswered past the hop timeout is reported once
    (the coordinator then probes the target and bypasses it if it is gone); until a new
    view re-routes it, the payload stays here, so a failure never loses it. A send to a
    dead target is tried again now and then: a restarted member gets it once it is back.
    A receiver that raised on a payload is told apart from a dead one: the payload is
    dropped and reported, and the delivery thread goes on. A receiver that could not keep
    a payload (:class:`NotKept`) is sent it again now and then; one that has not kept it a
    hop timeout after its first refusal is given up: counted lost and reported.
    """

    def __init__(
        self,
        timeouts: Timeouts,
        report_unreachable: Callable[[int], None],
        report_event: Callable[[EventKind, int, str], None],
    ) -> None:
        self.hop_timeout_s = timeouts.hop_s
        self.retry_s = timeouts.resend_s
        self.report_unreachable = report_unreachable
        self.report_event = report_event  # a send failed or given up: the run's events
        self.lock = threading.Lock()
        self.handles: dict[int, ClientHandle] = {}
        self.in_flight: list[InFlight] = []
        self.hops = 0  # acknowledged deliveries
        self.bytes_acked = 0
        self.bytes_dispatched = 0  # every byte put on the wire, re-sends included
        self.given_up: list[str] = []  # the sends no receiver kept, one line each: lost

    def set_handles(self, handles: Mapping[int, ClientHandle]) -> None:
        with self.lock:
            self.handles.update(handles)

    def send(self, target: int, payload: Payload) -> None:
        """Send now; to a target without a handle yet, as soon as a view brings one."""
        now = time.monotonic()
        with self.lock:
            handle = self.handles.get(target)
            if handle is None:
                self.in_flight.append(InFlight(target, payload, _NEVER, now, gone_at=now))
                return
            self.in_flight.append(InFlight(target, payload, handle.receive(payload), now))
            self.bytes_dispatched += payload.nbytes

    def count_served(self, payload: Payload) -> None:
        """A payload returned to a puller: delivered and paid for, like a send."""
        with self.lock:
            self.hops += 1
            self.bytes_acked += payload.nbytes
            self.bytes_dispatched += payload.nbytes

    def count_collective(self, nbytes: int, members: int) -> None:
        """A lap summed by the collective engine, counted as a ring all-reduce moves it:
        2(N-1) steps, each sending 1/N of the ``nbytes`` summed, all delivered."""
        steps = 2 * (members - 1)
        with self.lock:
            self.hops += steps
            self.bytes_acked += steps * nbytes // members
            self.bytes_dispatched += steps * nbytes // members

    def reroute(self, members: set[int]) -> list[InFlight]:
        """Remove and return the sends a new view must route again: those to a target that
        is no longer a member, and those that failed (a member that was restarted gets
        them again; a duplicate of one that did arrive is dropped by its inbox)."""
        with self.lock:
            again = [f for f in self.in_flight if f.target not in members or f.reported]
            self.in_flight = [f for f in self.in_flight if f not in again]
        return again

    def poll(self) -> None:
        """Settle acknowledged sends; report dead or silent targets.

        Answers are read outside the lock (a view may re-route a send meanwhile); a send's
        fields change under the lock, and only while it is still here.
        """
        with self.lock:
            flights = list(self.in_flight)
        now = time.monotonic()
        suspects: list[int] = []
        for flight in flights:
            with self.lock:
                gone_at, refused_at = flight.gone_at, flight.refused_at
                refused_since = flight.refused_since
            if refused_at is not None and refused_since is not None:  # its last answer
                if now - refused_since > self.hop_timeout_s:
                    self._give_up(flight)
                elif now - refused_at > self.retry_s:
                    self._resend(flight, now)
                continue
            if gone_at is not None:
                if now - flight.sent_at > self.hop_timeout_s:
                    self._suspect(flight, suspects)
                if now - gone_at > self.retry_s:
                    self._resend(flight, now)
                continue
            if not flight.answer.done():
                if now - flight.sent_at > self.hop_timeout_s:
                    self._suspect(flight, suspects)
                continue
            gone, accepted = False, False
            try:
                accepted = flight.answer.result(0)
            except PeerGone:
                gone = True
            except PeerUnavailable:  # being restarted: try again soon, within the hop timeout
                with self.lock:
                    if flight in self.in_flight:
                        flight.gone_at = now
                continue
            except NotKept as err:  # alive, but it could not save it: send it again later
                with self.lock:
                    if flight in self.in_flight:
                        flight.refused_at, flight.refusal = now, err.reason
                        if flight.refused_since is None:
                            flight.refused_since = now
                continue
            except Exception as err:  # noqa: BLE001 - the receiver raised: drop, report
                log.warning("client %d failed on a payload: %r", flight.target, err)
                detail = f"client {flight.target} raised {err!r}"
                self.report_event(EventKind.DELIVERY_FAILED, flight.payload.round, detail)
            with self.lock:
                if flight not in self.in_flight:
                    continue  # re-routed by a new view meanwhile: no longer this poll's
                if gone:
                    flight.gone_at = now
                else:
                    self.in_flight.remove(flight)
                    if accepted:
                        self.hops += 1
                        self.bytes_acked += flight.payload.nbytes
            if gone:
                self._suspect(flight, suspects)
        for target in suspects:  # a call to the coordinator: made holding no lock
            self.report_unreachable(target)

    def _resend(self, flight: InFlight, now: float) -> None:
        with self.lock:
            if flight not in self.in_flight or flight.target not in self.handles:
                return
            flight.answer = self.handles[flight.target].receive(flight.payload)
            flight.gone_at = None  # sent_at stays: the hop timeout counts from the first try
            flight.refused_at = None
            flight.sends += 1
            self.bytes_dispatched += flight.payload.nbytes

    def _give_up(self, flight: InFlight) -> None:
        """Drop a send its target never kept, counted lost and reported by name."""
        with self.lock:
            if flight not in self.in_flight:
                return
            self.in_flight.remove(flight)
            line = (
                f"{flight.describe()} not kept after {flight.sends} sends in "
                f"{self.hop_timeout_s:g}s: {flight.refusal}"
            )
            self.given_up.append(line)
        log.warning("given up: %s", line)
        self.report_event(EventKind.PAYLOAD_NOT_KEPT, flight.payload.round, line)

    def _suspect(self, flight: InFlight, suspects: list[int]) -> None:
        """Report ``flight``'s target once, if the send is still here."""
        with self.lock:
            if flight.reported or flight not in self.in_flight:
                return
            flight.reported = True
        suspects.append(flight.target)

    def unacknowledged_payloads(self, channel: Channel) -> list[Payload]:
        """The payloads of one channel that some receiver has not yet acknowledged."""
        with self.lock:
            return [f.payload for f in self.in_flight if f.payload.channel == channel]

    def drain(self, timeout_s: float) -> int:
        """Wait for the last acknowledgements; the payloads never acknowledged count as lost,
        and so does every send given up before."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            with self.lock:
                if not self.in_flight:
                    return len(self.given_up)
            time.sleep(0.02)
        with self.lock:
            return len(self.given_up) + len({id(f.payload) for f in self.in_flight})

    def unacknowledged(self) -> list[str]:
        """What was given up or is still in flight, one line each, for the event that
        reports a loss."""
        with self.lock:
            return [*self.given_up, *(f"{f.describe()}{_why(f)}" for f in self.in_flight)]


def _why(flight: InFlight) -> str:
    if flight.gone_at is not None:
        return " (target gone)"
    return f" (not kept: {flight.refusal})" if flight.refused_at is not None else ""
