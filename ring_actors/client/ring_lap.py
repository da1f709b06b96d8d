"""A member's laps: the exact sums behind half the methods, over whoever contributed.

``RingLaps`` chooses the ways a lap may go (``ways``: the collective engine,
``collective_lap.py``; chunks, ``chunked_lap.py``; one token, ``token_lap.py``), drives them
until one ends with the total, and keeps that total: it answers a late token or chunk with
it, hands it round the ring as the result lap, and a member that missed it fetches it from
the leader. Unacknowledged hops are re-routed by the outbox, a lost attempt is restarted by
the lap's leader; results, restarts, fetches and checkpoints are the same for every way.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import torch

from ring_actors.client.chunked_lap import CHUNK_MIN_BYTES, ChunkedLap, is_chunk
from ring_actors.client.collective_lap import CollectiveLaps, EngineLap
from ring_actors.client.lap_arithmetic import mismatch
from ring_actors.client.lap_host import LapHost, LapResult, LapRun, LapWay, lap_leader
from ring_actors.client.token_lap import TokenLap
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payloads import Channel, LapHeader, Payload
from ring_actors.delivery.view import View
from ring_actors.timeouts import Timeouts


class RingLaps:
    """One client's side of every lap: add and forward, lead and restart, keep results."""

    def __init__(
        self,
        host: LapHost,
        timeouts: Timeouts,
        chunk_max_members: int,
        engine: CollectiveLaps | None = None,
    ) -> None:
        self.host = host
        self.engine = engine  # a collective engine tried first (``schedule.lap_engine``)
        self.timeouts = timeouts
        self.results: dict[tuple[str, int], LapResult] = {}
        # Where each result came from, (leader, epoch, chunked attempt or -1 for a token),
        # and the chunked attempts answered with it (once each: ``_on_chunk``).
        self.finished_by: dict[tuple[str, int], tuple[int, int, int]] = {}
        self.answered: set[tuple[str, int, int, int, int]] = set()
        self.chunk_min_bytes = CHUNK_MIN_BYTES  # a lap with less to add goes as one token
        self.chunk_max_members = chunk_max_members  # and so does one of more members
        self.lock = threading.Lock()

    def result(self, name: str, round_: int) -> LapResult | None:
        with self.lock:
            return self.results.get((name, round_))

    # ---- actor thread: tokens this client need not wait for -----------------------------

    def on_receive(self, token: Payload, runs_round: bool) -> bool:
        """Handle a token at once when no training is needed for it; False queues it.

        Results are stored and passed on; a token for a lap finished here is answered with
        the result (a restarted lap then ends at once); a token for a round this client does
        not train (a joiner's earlier rounds) is passed on untouched; a token of an attempt
        started in an older membership epoch is dropped (that epoch's leader restarts it).
        """
        header, view = token.lap, self.host.current_view
        assert header is not None  # validated on receipt
        key = (header.name, token.round)
        if is_chunk(token):
            return self._on_chunk(token, runs_round)
        if token.channel == Channel.LAP_RESULT:
            if not self._from_leader(header, view, token.round):
                self.host.event(
                    EventKind.LAP_RESULT_REFUSED, token.round, f"leader {header.leader}"
                )
                return True
            result = LapResult(token.tensors, header.contributors)
            kept = self.keep(key, result, (header.leader, header.epoch, -1))
            # What goes on is what this member keeps: one total per round along the ring.
            self.forward(token, kept.total, kept.contributors)
            return True
        done = self.result(header.name, token.round)
        if done is not None:
            if header.leader != self.host.id:
                self._start_result(header.name, token.round, done, leader=header.leader)
            return True
        if header.epoch < view.epoch:
            self.host.event(EventKind.LAP_TOKEN_DROPPED, token.round, f"epoch {header.epoch}")
            return True
        if not runs_round:
            if self.host.id in header.visited:  # it went round: nobody runs that lap any more
                self.host.event(EventKind.LAP_TOKEN_DROPPED, token.round, "went round unclaimed")
                return True
            self.forward(token, token.tensors, header.contributors)
            return True
        return False

    def _on_chunk(self, chunk: Payload, runs_round: bool) -> bool:
        """A chunk this client answers with its total, or drops as dead; False queues it.

        A client holding the total takes part in no other attempt, so one that needs it
        could not finish: the total goes round instead, once per such attempt (not for the
        attempt it finished, nor for its epoch's if that lap went as one token, whose total
        goes round anyway).
        """
        header, key = chunk.lap, (chunk.lap.name, chunk.round)
        done = self.result(*key)
        if done is None:
            return header.epoch < self.host.current_view.epoch or not runs_round
        attempt = (header.leader, header.epoch, header.attempt)
        with self.lock:
            held = self.finished_by.get(key)
            covered = held is not None and held[:2] == attempt[:2] and held[2] in (-1, attempt[2])
            fresh = not covered and (*key, *attempt) not in self.answered
            self.answered.add((*key, *attempt))
        if fresh:
            self._start_result(header.name, chunk.round, done, leader=header.leader)
        return True

    @staticmethod
    def _from_leader(header: LapHeader, view: View, round_: int) -> bool:
        """A result is taken only from its round's leader (in its epoch's view, if ours;
        of another epoch, from a leader still in ours: a bypassed one's total may leave out
        members the live ring counted)."""
        if header.epoch == view.epoch:
            return header.leader == lap_leader(view, round_)
        return header.leader in view.members

    # ---- training thread ----------------------------------------------------------------

    def run(
        self, name: str, round_: int, contribution: dict[str, torch.Tensor]
    ) -> LapResult | None:
        """Take part in lap ``name`` of ``round_``; None only if it could not finish.

        The ways it may go are chosen in one place (``ways``); each pass of the loop asks the
        first that wants the current view to start an attempt when one is due, and every
        way to take its messages. A member behind that waits a hop for nothing asks the
        leader for the total. It gives up when the run's time budget ends: a member that saw
        the budget end before this round never joins it, and the others must not wait for
        it past the run's end.
        """
        host = self.host
        run = LapRun(name, round_, contribution)
        run.start_clock(self.timeouts.lap_give_up_s, host.time_left())
        ways = self.ways(run)
        while not host.departing():
            done = self.result(name, round_)
            if done is not None:
                wrong = mismatch(done.total, contribution)
                if wrong is None:
                    return done
                host.event(EventKind.LAP_RESULT_REFUSED, round_, f"lap {name!r}: {wrong}")
                with self.lock:
                    self.results.pop(run.key, None)
            view, now = host.current_view, time.monotonic()
            leader = lap_leader(view, round_)
            way = next(w for w in ways if w.wanted(view))
            finished = way.start_due(view, leader, now)
            if finished is None and not way.wanted(view):
                continue  # its one try is over (the engine's): the next way starts at once
            for taking in ways:
                finished = finished or taking.take(view, leader)
            if finished is not None:
                return finished
            if leader not in (None, host.id) and time.monotonic() - run.progressed_at > (
                self.timeouts.hop_s
            ):
                run.progressed_at = time.monotonic()
                fetched = host.fetch_lap_result(leader, name, round_)
                if fetched is not None:
                    host.event(EventKind.LAP_RESULT_FETCHED, round_, f"lap {name!r} from {leader}")
                    with self.lock:
                        self.results.setdefault(run.key, fetched)
                    continue
            if time.monotonic() > run.deadline:
                why = f": {run.why}" if run.why else ""
                after = f"after {run.deadline - run.began:.1f}s{why}"
                host.event(EventKind.LAP_FAILED, round_, f"lap {name!r} gave up {after}")
                return None
            host.inbox.wait(
                lambda epoch=view.epoch: (
                    self.result(name, round_) is not None
                    or any(w.waiting_on(epoch) for w in ways)
                    or host.current_view.epoch != epoch  # a new leader starts at once
                ),
                0.25,
                host.tick,
            )
        return None  # an off period began: the others' lap goes on without this member

    def ways(self, run: LapRun) -> list[LapWay]:
        """The ways this member may sum ``run``'s lap, in the order it prefers them: the
        collective engine where one is configured, chunks where the lap is large and its
        members few enough to step at once, and one token, which every lap can take."""
        engine = [] if self.engine is None else [EngineLap(self, run, self.engine)]
        chunks = ChunkedLap(self, run, self.chunk_min_bytes, self.chunk_max_members)
        return [*engine, chunks, TokenLap(self, run)]

    def keep(
        self, key: tuple[str, int], result: LapResult, origin: tuple[int, int, int]
    ) -> LapResult:
        """Keep ``result`` from ``origin`` unless a total came first: the one kept goes on,
        and the training thread waiting for it wakes now."""
        with self.lock:
            kept = self.results.setdefault(key, result)
            if kept is result:
                self.finished_by[key] = origin
        if kept is result:
            self.host.inbox.wake()
        return kept

    def kept(self) -> dict[tuple[str, int], LapResult]:
        """Every result still held: a checkpoint keeps them, for the members a round behind
        that fetch a total or hand a late token theirs after a restart."""
        with self.lock:
            return dict(self.results)

    def restore(self, results: dict[tuple[str, int], LapResult]) -> None:
        """The results a checkpoint kept, in place of any held."""
        with self.lock:
            self.results = dict(results)
            self.finished_by.clear()

    def forget_before(self, round_: int) -> None:
        """Drop results older than ``round_``: the ring never needs them again."""
        with self.lock:
            for key in [k for k in self.results if k[1] < round_]:
                del self.results[key]
                self.finished_by.pop(key, None)
            self.answered = {a for a in self.answered if a[1] >= round_}

    # ---- sending ------------------------------------------------------------------------

    def finish(
        self, name: str, round_: int, total: dict, contributors: tuple[int, ...]
    ) -> LapResult:
        """The leader's token came back: keep the total and hand it round the ring."""
        result = LapResult(dict(total), tuple(contributors))
        self.keep((name, round_), result, (self.host.id, self.host.current_view.epoch, -1))
        self._start_result(name, round_, result, leader=self.host.id)
        return result

    def _start_result(self, name: str, round_: int, result: LapResult, leader: int) -> None:
        epoch = self.host.current_view.epoch
        header = LapHeader(
            name, leader, 0, epoch, visited=(self.host.id,), contributors=result.contributors
        )
        self.send_on(Channel.LAP_RESULT, round_, header, result.total)

    def forward(self, token: Payload, total: dict, contributors: tuple[int, ...]) -> None:
        """Pass a token on to the successor, recording this client as visited."""
        header = replace(
            token.lap, visited=(*token.lap.visited, self.host.id), contributors=contributors
        )
        self.send_on(token.channel, token.round, header, total)

    def send_on(self, channel: Channel, round_: int, header: LapHeader, total: dict) -> None:
        """Send to the successor unless the lap closes there (a result that went round)."""
        view = self.host.current_view
        successor = view.successor(self.host.id)
        closes = channel == Channel.LAP_RESULT and successor in header.visited
        if successor is None or closes:
            return
        self.host.send(
            successor,
            Payload(
                sender=self.host.id,
                round=round_,
                epoch=view.epoch,
                seq=header.attempt,
                tensors=total,
                channel=channel,
                lap=header,
            ),
        )
