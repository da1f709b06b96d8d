"""A client's answers to its peers and the coordinator: take a payload, serve a pull, adopt a
view, hand a joiner its start. They run on the transport's threads and return at once, while
the round loop trains on its own thread."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ring_actors.client.ring_lap import LapResult, is_lap
from ring_actors.client.slot_release import idle_facts
from ring_actors.client.state import ClientState
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.outbox import NotKept
from ring_actors.delivery.payload_checks import (
    check_known_tensors,
    check_tensors,
    expected_for,
)
from ring_actors.delivery.payloads import Channel, Payload, PayloadError
from ring_actors.delivery.transport import ClientHandle
from ring_actors.delivery.view import View
from ring_actors.delivery.wire import WirePayload, from_wire

log = logging.getLogger(__name__)


class PeerAnswers(ClientState):
    """The calls a client answers; mixed into :class:`~ring_actors.client.core.ClientCore`."""

    def receive(self, payload: Payload | WirePayload) -> bool:
        """Validate and enqueue (or, for a ring lap, pass on); never blocks on training.

        True acknowledges the delivery (a duplicate re-send is acknowledged but not queued
        twice); False means rejected: malformed, non-finite, or from a bypassed member.
        :class:`NotKept` is raised for a push its spool could not save: the sender sends it
        again.
        """
        try:
            if isinstance(payload, WirePayload):  # from another process: its tensors as bytes
                payload = from_wire(payload, self.max_payload_bytes)
            if not isinstance(payload, Payload):
                raise PayloadError(f"expected a Payload, got {type(payload).__name__}")
            payload.validate(None, self.max_payload_bytes)
            self.bounds.check(payload, self.current_view.epoch)
            if payload.channel == Channel.PULLED:
                raise PayloadError("pulled state comes only as the answer to a pull")
            expected = expected_for(payload.channel, self.share_specs, self.init_specs)
            if expected is not None:
                if not payload.tensors:
                    raise PayloadError(f"{payload.channel.value} payload with no tensors")
                if payload.channel == Channel.INIT:
                    check_known_tensors(payload, expected)
                else:
                    check_tensors(payload, expected)
            return self._accept(payload)
        except PayloadError as err:
            return self._reject(str(err))
        except NotKept as err:
            log.warning("client %d could not keep a payload: %s", self.id, err.reason)
            raise
        except Exception as err:  # noqa: BLE001 - one bad payload never harms the receiver
            log.exception("client %d could not take a payload", self.id)
            return self._reject(f"could not be taken: {err!r}")

    def _accept(self, payload: Payload) -> bool:
        with self.lock:
            view = self.view
        if payload.sender not in view.members and payload.epoch < view.epoch:
            self.event(EventKind.STALE_PAYLOAD_DROPPED, self.round, f"from {payload.sender}")
            return False  # from a member that was bypassed: it must not touch the ring
        if is_lap(payload):
            ahead = payload.round >= self.first_round and payload.round > self.completed
            if self.laps.on_receive(payload, runs_round=ahead):
                return True
        with self.spool_lock:
            # Saved before it is queued: a push the spool cannot keep is refused whole (the
            # sender sends it again), never merged unsaved nor acknowledged and forgotten.
            if self._merged_later(payload) and not self.inbox.has(payload):
                try:
                    self.spool.keep(payload)
                except OSError as err:  # a full disk, say: it may have room on the next try
                    raise NotKept(f"client {self.id} could not save it: {err}") from err
            self.inbox.put(payload)
        return True

    def _merged_later(self, payload: Payload) -> bool:
        """A push a restart may need, so the spool keeps it: one a round of this client may
        still merge. In sync mode round r merges only round r - 1's pushes, so the final
        round's are merged by no round (nothing merges after the last); in async mode any
        round takes any push, the final round's included."""
        if self.spool is None or payload.channel != Channel.SHARE:
            return False
        schedule, rounds = self.config.schedule, self.config.experiment.rounds
        return schedule.mode != "sync" or payload.round < rounds - 1

    def serve(self, round_: int, keys: tuple[str, ...]) -> Payload | None:
        """The pulled part of what this client published after ``round_`` (or later)."""
        with self.lock:
            rounds = sorted(r for r in self.published if r >= round_)
            if not rounds:
                return None
            state = self.published[rounds[0]]
            epoch = self.view.epoch
        payload = Payload(
            self.id,
            rounds[0],
            epoch,
            seq=rounds[0],
            tensors={k: state[k] for k in keys if k in state},
            num_samples=len(self.data.train),
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
        with self.lock:
            if view.epoch <= self.view.epoch:
                return  # idempotent: an old or repeated broadcast changes nothing
            handles = self.hetero.wrap(self.id, handles, self._on_link)
            self.view, self.handles = view, {**self.handles, **handles}
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
        with self.lock:
            last = self.last_push
            fresh: set[int] = set()
            if last is not None:
                pushes.extend([*self.recent_pushes, last])
                peers = self.topology.out_neighbours(
                    view.members, self.id, last.round, view.speed_of()
                )
                targets = set(peers)
                fresh = targets - self.pushed_to
                self.pushed_to |= fresh
        for target in sorted(fresh):
            for payload in {id(p): p for p in pushes}.values():
                self.outbox.send(target, payload)

    def hand_off(self, joiner: int, handle: ClientHandle) -> None:
        """Give a newcomer what the method says it starts from (snapshotted each round)."""
        with self.lock:
            tensors = self.hand_off_tensors
            epoch = self.view.epoch
        if tensors:
            self.outbox.set_handles(self.hetero.wrap(self.id, {joiner: handle}, self._on_link))
            payload = Payload(
                self.id,
                max(self.completed, 0),
                epoch,
                seq=-1,
                tensors=tensors,
                num_samples=len(self.data.train),
                channel=Channel.INIT,
            )
            self.outbox.send(joiner, payload)

    def ping(self) -> int:
        """Heartbeat: the last round this client finished."""
        return self.completed

    def journal(self) -> list[dict]:
        """Every report sent to the coordinator, for a restarted coordinator to replay."""
        with self.lock:
            return [entry.to_dict() for entry in self.journal_entries]

    def stats(self) -> dict:
        """Counters for tests and debugging."""
        return {
            "round": self.round,
            "completed": self.completed,
            "epoch": self.view.epoch,
            "inbox": len(self.inbox),
            "rejected": self.rejected,
            "hops": self.outbox.hops,
            "bytes_sent": self.outbox.bytes_acked,
            **idle_facts(self.algorithm, self.device),
        }

    def _reject(self, reason: str) -> bool:
        log.warning("client %d rejected a payload: %s", self.id, reason)
        with self.lock:  # receives run on several Ray threads at once
            self.rejected += 1
        self.event(EventKind.PAYLOAD_REJECTED, self.round, reason)
        return False
