"""A client's answers to its peers and the coordinator: take a payload, serve a pull, adopt a
view, hand a joiner its start. They run on the transport's threads and return at once, while
the round loop trains on its own thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from ring_actors.client.checkpoint import PushSpool
from ring_actors.client.lap_host import LapResult, is_lap
from ring_actors.client.ring_lap import RingLaps
from ring_actors.client.state import Events, Membership, PayloadSpecs, Progress, Published
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.outbox import NotKept, Outbox
from ring_actors.delivery.payload_checks import (
    check_known_tensors,
    check_tensors,
    expected_for,
)
from ring_actors.delivery.payloads import Channel, Payload, PayloadError
from ring_actors.delivery.transport import ClientHandle
from ring_actors.delivery.view import View
from ring_actors.delivery.wire import WirePayload, from_wire
from ring_actors.heterogeneity.model import Heterogeneity
from topologies import Topology

log = logging.getLogger(__name__)


@dataclass(eq=False)
class PeerAnswers:
    """The calls a client answers, which :class:`~ring_actors.client.core.ClientCore`
    forwards here; it counts the payloads it rejected."""

    id: int
    specs: PayloadSpecs
    progress: Progress
    membership: Membership
    published: Published
    inbox: Inbox
    kept: PushSpool
    outbox: Outbox
    laps: RingLaps
    topology: Topology
    hetero: Heterogeneity  # slow links wrap the handles peers are reached through
    num_samples: int
    host: Events
    rejected: int = field(default=0, init=False)
    # receives run on several threads at once
    lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def receive(self, payload: Payload | WirePayload) -> bool:
        """Validate and enqueue (or, for a ring lap, pass on); never blocks on training.

        True acknowledges the delivery (a duplicate re-send is acknowledged but not queued
        twice); False means rejected: malformed, non-finite, or from a bypassed member.
        :class:`NotKept` is raised for a push its spool could not save: the sender sends it
        again.
        """
        limit = self.specs.max_payload_bytes
        try:
            if isinstance(payload, WirePayload):  # from another process: its tensors as bytes
                payload = from_wire(payload, limit)
            if not isinstance(payload, Payload):
                raise PayloadError(f"expected a Payload, got {type(payload).__name__}")
            payload.validate(None, limit)
            self.specs.bounds.check(payload, self.membership.current.epoch)
            if payload.channel == Channel.PULLED:
                raise PayloadError("pulled state comes only as the answer to a pull")
            expected = expected_for(payload.channel, self.specs.share, self.specs.init)
            if expected is not None:
                if not payload.tensors:
                    raise PayloadError(f"{payload.channel.value} payload with no tensors")
                if payload.channel == Channel.INIT:
                    check_known_tensors(payload, expected)
                else:
                    check_tensors(payload, expected)
            return self._accept(payload)
        except PayloadError as err:
            return self.reject(str(err))
        except NotKept as err:
            log.warning("client %d could not keep a payload: %s", self.id, err.reason)
            raise
        except Exception as err:  # noqa: BLE001 - one bad payload never harms the receiver
            log.exception("client %d could not take a payload", self.id)
            return self.reject(f"could not be taken: {err!r}")

    def _accept(self, payload: Payload) -> bool:
        view = self.membership.current
        if payload.sender not in view.members and payload.epoch < view.epoch:
            detail = f"from {payload.sender}"
            self.host.event(EventKind.STALE_PAYLOAD_DROPPED, self.progress.round, detail)
            return False  # from a member that was bypassed: it must not touch the ring
        if is_lap(payload):
            progress = self.progress
            ahead = payload.round >= progress.first_round and payload.round > progress.completed
            if self.laps.on_receive(payload, runs_round=ahead):
                return True
        self.kept.put(payload)
        return True

    def serve(self, round_: int, keys: tuple[str, ...]) -> Payload | None:
        """The pulled part of what this client published after ``round_`` (or later)."""
        with self.published.lock:
            rounds = sorted(r for r in self.published.by_round if r >= round_)
            if not rounds:
                return None
            state = self.published.by_round[rounds[0]]
            epoch = self.membership.view.epoch
        payload = Payload(
            self.id,
            rounds[0],
            epoch,
            seq=rounds[0],
            tensors={k: state[k] for k in keys if k in state},
            num_samples=self.num_samples,
            channel=Channel.PULLED,
        )
        self.outbox.count_served(payload)
        return payload

    def lap_result(self, name: str, round_: int) -> LapResult | None:
        """A finished lap's total, for a client whose result token was lost."""
        return self.laps.result(name, round_)

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None:
        """Adopt a newer membership view and re-route what the old one left undelivered.

        Sends to members that are gone go to their replacements (a lap token to the new
        successor), and every current out-neighbour gets the newest published payload.
        """
        membership = self.membership
        with membership.lock:
            if view.epoch <= membership.view.epoch:
                return  # idempotent: an old or repeated broadcast changes nothing
            handles = self.hetero.wrap(self.id, handles, self._on_link)
            membership.view = view
            membership.handles = {**membership.handles, **handles}
            self.outbox.set_handles(handles)
        self.inbox.wake()  # the round loop's waits read the view: a new leader starts now
        pushes: list[Payload] = []
        for flight in self.outbox.reroute(set(view.members)):
            if is_lap(flight.payload):
                successor = view.successor(self.id)
                if successor is not None and successor not in flight.payload.lap.visited:
                    self.outbox.send(successor, flight.payload)
            elif flight.target in view.members:  # restarted: the same member, sent again
                self.outbox.send(flight.target, flight.payload)
            elif flight.payload.channel == Channel.SHARE:
                pushes.append(flight.payload)
        published = self.published
        with published.lock:  # the membership's too: a push and its view
            last = published.last_push
            fresh: set[int] = set()
            if last is not None:
                pushes.extend([*published.recent_pushes, last])
                peers = self.topology.out_neighbours(
                    view.members, self.id, last.round, view.speed_of()
                )
                fresh = set(peers) - published.pushed_to
                published.pushed_to |= fresh
        for target in sorted(fresh):
            for payload in {id(p): p for p in pushes}.values():
                self.outbox.send(target, payload)

    def hand_off(self, joiner: int, handle: ClientHandle, round_: int) -> None:
        """Give a newcomer what the method says it starts from, as it was at the end of
        ``round_``: sent now if that round has ended, else once it does. The same state
        however late the request arrives, so a run with a join is reproducible."""
        with self.published.lock:
            self.published.waiting_joiners.append((joiner, handle, round_))
        self.hand_offs_due()

    def hand_offs_due(self) -> None:
        """Send the hand-offs whose round has ended (called after each publish)."""
        published = self.published
        with published.lock:
            ended = published.hand_off_round
            due = [w for w in published.waiting_joiners if w[2] <= ended]
            published.waiting_joiners = [w for w in published.waiting_joiners if w[2] > ended]
            tensors, epoch = published.hand_off, self.membership.view.epoch
        if not tensors:  # the method hands nothing over
            return
        for joiner, handle, round_ in due:
            if round_ < ended:  # asked late (a restarted donor): its nearest state after
                log.info("client %d hands %d round %d, asked %d", self.id, joiner, ended, round_)
            self.outbox.set_handles(self.hetero.wrap(self.id, {joiner: handle}, self._on_link))
            self.outbox.send(joiner, Payload(
                self.id, max(ended, 0), epoch, seq=-1, tensors=tensors,
                num_samples=self.num_samples, channel=Channel.INIT,
            ))  # fmt: skip

    def reject(self, reason: str) -> bool:
        """Count, log and report a payload refused; False, the answer to its sender."""
        log.warning("client %d rejected a payload: %s", self.id, reason)
        with self.lock:
            self.rejected += 1
        self.host.event(EventKind.PAYLOAD_REJECTED, self.progress.round, reason)
        return False

    def _on_link(self, payload: Payload, target: int, delay_s: float) -> None:
        """A hop that a slow link holds back, for the run's events."""
        if delay_s > 0:
            detail = f"{payload.channel.value} to {target}, {payload.nbytes} bytes"
            self.host.event(EventKind.LINK_DELAY, payload.round, detail, duration_s=delay_s)
