"""The chunked lap: the bandwidth-optimal ring all-reduce (Patarasuk and Yuan, 2009), for laps
whose bytes outweigh their hops' latency.

The N participants (the members that run the round, in ring order, as the view of the
attempt's epoch has them) cut their contributions alike into N chunks: contiguous slices of
one flat buffer per dtype (``chunk_layout.py``), so a chunk is one tensor per dtype. At step
s the participant at position p sends chunk (p - s) mod N to the next one. In steps
0..N-2 (reduce-scatter) the receiver adds its own part of the chunk, so after them position
p holds chunk (p + 1) mod N summed over everyone; in steps N-1..2N-3 (all-gather) the
finished chunks go round once more. Each participant sends 2(N-1) messages of M/N bytes
and all send at once, where a whole-model token visits the members one after another twice.

What the token lap guarantees holds here too:

- exact, over one contributor set: a member assembles a total only from chunks whose
  contributors and layouts agree, and refuses them otherwise (the leader's next attempt
  starts again) rather than mix;
- one total everywhere: the attempts of one epoch add the same parts in the same order, so
  they are interchangeable; a new epoch starts a new attempt over its own view (a member that
  died is left out), or a single token when two members are left; a member holding a total
  never joins another attempt and hands its total round the ring instead (``RingLaps``), so
  no second total can complete among the living;
- nothing circles: a chunk of a dead epoch or an older attempt is dropped, and each
  participant sends each step of an attempt once.

A lap goes in chunks when its leader's contribution is at least ``CHUNK_MIN_BYTES`` and three
members or more run the round, no more than ``max_members`` (``chunk_limit``: the members that
step at once, under ``schedule.chunked_laps``). A member whose own contribution is as large
starts at once; any other joins when a chunk reaches it; a leader that sends one token ignores
chunks, so an attempt some members began without it never finishes.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ring_actors.client.chunk_layout import (
    Layout,
    Layouts,
    Tensors,
    add_part,
    cut,
    flatten,
    layout_of,
    misfit,
    rebuild,
)
from ring_actors.client.lap_host import LapResult, LapRun
from ring_actors.config.sections import ChunkedLaps
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payloads import Channel, LapHeader, Payload
from ring_actors.delivery.view import View

if TYPE_CHECKING:
    from ring_actors.client.ring_lap import RingLaps

# Below this many bytes of contribution a lap goes round as one token: a chunk then saves
# less time on the wire than its 2(N-1) hops' latency costs.
CHUNK_MIN_BYTES = 64 * 2**10
# A chunk message's ``seq`` is (step + 1) * SEQ_PER_STEP + attempt: one key per step of each
# attempt of its sender, apart from a whole token's (its attempt, far below).
SEQ_PER_STEP = 2**32


def chunk_limit(policy: ChunkedLaps, cores: int) -> int:
    """The most members a lap goes in chunks among. Chunks pay where the members step at
    once: each sends 2(N-1) messages of M/N bytes where a token makes 2(N-1) hops of M, so
    on fewer cores than members their N-fold calls outweigh the bytes they save."""
    return {"always": sys.maxsize, "never": 0}.get(policy, cores)


def is_chunk(payload: Payload) -> bool:
    """A chunked lap's message (anything but the default -1 there; the rest is checked)."""
    return payload.lap is not None and payload.lap.chunk != -1


def chunk_of(payload: Payload, name: str, round_: int, epoch: int) -> bool:
    """A chunk of lap ``name`` in ``round_`` of ``epoch`` or before (a later epoch's waits
    for the view that brings it)."""
    return (
        payload.channel == Channel.LAP
        and is_chunk(payload)
        and payload.lap.name == name
        and payload.round == round_
        and payload.lap.epoch <= epoch
    )


@dataclass(frozen=True)
class Chunk:
    """A finished chunk: every contributor's part of it, summed."""

    tensors: Tensors  # one slice per segment
    contributors: tuple[int, ...]
    layout: Layout


@dataclass
class Attempt:
    """One all-reduce over the ring of one epoch, as this member takes part in it."""

    epoch: int
    number: int
    leader: int
    ring: tuple[int, ...]
    taken: set[int] = field(default_factory=set)  # the steps received
    finished: dict[int, Chunk] = field(default_factory=dict)
    refused: bool = False  # its chunks disagreed: only a later attempt can finish


class ChunkedLap:
    """One member's side of one lap's chunked attempts, for the length of a ``RingLaps.run``.

    Runs on the training thread only; what the actor thread does with chunks (a member that
    holds the total hands it round) is ``RingLaps.on_receive``'s.
    """

    def __init__(self, laps: RingLaps, run: LapRun, min_bytes: int, max_members: int) -> None:
        self.laps, self.run = laps, run
        self.host, self.name, self.round = laps.host, run.name, run.round
        self.max_members = max_members
        contribution = self.contribution = run.contribution
        self.layouts = Layouts(layout_of(contribution))
        self.flat: Tensors | None = None  # the contribution as one buffer per dtype, once cut
        size = sum(v.numel() * v.element_size() for v in contribution.values())
        self.large = bool(contribution) and size >= min_bytes
        self.attempt: Attempt | None = None
        self.parts: dict[int, list[Tensors]] = {}  # this member's parts, by ring size

    def ring(self, view: View) -> tuple[int, ...]:
        """The participants: the members that run the round."""
        return view.active(self.round)

    def wanted(self, view: View) -> bool:
        """Whether this member, leading ``view``'s lap, would send chunks (and so starts
        an attempt of its own at once)."""
        ring = self.ring(view)
        return self.large and 3 <= len(ring) <= self.max_members and self.host.id in ring

    def current(self, epoch: int) -> Attempt | None:
        """This member's attempt of ``epoch``, if it took part in one."""
        attempt = self.attempt
        return attempt if attempt is not None and attempt.epoch == epoch else None

    def start_due(self, view: View, leader: int | None, now: float) -> LapResult | None:
        """Start ``view``'s first attempt at once; as its leader, a next one when the last
        has not finished in time (an attempt it led before, of either way, is reported as
        a restart)."""
        run = self.run
        retry = now - run.attempt_at > self.laps.timeouts.lap_retry_s
        if self._start_if_due(view, leader, retry, restart=bool(run.led)):
            run.attempt_at = now
            run.led += leader == self.host.id
        return None

    def take(self, view: View, leader: int | None) -> LapResult | None:
        """Take every chunk of this lap that reached this member; the result, kept, once
        the last chunk of an attempt is here."""
        run = self.run
        for chunk in self.host.inbox.pop(lambda p: chunk_of(p, run.name, run.round, view.epoch)):
            finished = self._take_one(chunk, view, leader)
            run.progressed_at = time.monotonic()
            if finished is not None:
                return self.laps.keep(run.key, LapResult(*finished), self.origin())
        return None

    def waiting_on(self, epoch: int) -> bool:
        return bool(self.host.inbox.peek(lambda p: chunk_of(p, self.name, self.round, epoch)))

    def _start_if_due(self, view: View, leader: int | None, retry: bool, restart: bool) -> bool:
        """Start ``view``'s first attempt at once; as its leader, a next one on ``retry``.
        True if one was started."""
        attempt = self.current(view.epoch)
        leading = leader == self.host.id
        if leader is None or (attempt is not None and not (leading and retry)):
            return False
        number = 0 if attempt is None else attempt.number + 1
        if leading and restart:
            detail = f"lap {self.name!r}, attempt {number} in chunks, epoch {view.epoch}"
            self.host.event(EventKind.LAP_RESTARTED, self.round, detail)
        self.start(view, leader, number)
        return True

    def start(self, view: View, leader: int, number: int) -> None:
        """Take part in attempt ``number`` of ``view``'s epoch: send this member's own chunk."""
        ring = self.ring(view)
        self.attempt = attempt = Attempt(view.epoch, number, leader, ring)
        position = ring.index(self.host.id)
        part = {k: v.clone() for k, v in self._parts(len(ring))[position].items()}
        contributors = (self.host.id,) if self.contribution else ()
        self._send(attempt, 0, position, part, contributors, self.layouts.own)

    def origin(self) -> tuple[int, int, int]:
        """The current attempt's leader, epoch and number (the one ``_take_one`` finished)."""
        attempt = self.attempt
        assert attempt is not None
        return attempt.leader, attempt.epoch, attempt.number

    def _take_one(
        self, message: Payload, view: View, leader: int | None
    ) -> tuple[Tensors, tuple[int, ...]] | None:
        """Add into, keep and pass on one chunk; the total and its contributors once every
        chunk is here, None until then or if the message does not belong."""
        header = message.lap
        assert header is not None  # a lap channel's
        ring = self.ring(view)
        me = self.host.id
        if not all(_is_int(n) for n in (header.chunk, header.step)):
            self._refuse("its chunk fields are malformed")
            return None
        layout = self.layouts.parse(header.shapes)
        if isinstance(layout, str):
            self._refuse(layout)
            return None
        if (
            header.epoch != view.epoch
            or header.leader != leader
            or (leader == me and not self.wanted(view))  # this lap goes as one token
            or me not in ring
            or message.sender not in ring
        ):
            return None
        chunks, position = len(ring), ring.index(me)
        previous = ring.index(message.sender)
        in_order = message.sender == ring[position - 1] and 0 <= header.step <= 2 * chunks - 3
        if not in_order or header.chunk != (previous - header.step) % chunks:
            return None  # re-routed by a view change, or not of this ring: its epoch restarts
        wrong = misfit(layout, message.tensors, header.chunk, chunks)
        if wrong is not None:
            self._refuse(wrong)
            return None
        attempt = self._join(view, leader, header.attempt)
        if attempt is None or attempt.refused or header.step in attempt.taken:
            return None
        attempt.taken.add(header.step)
        chunk = Chunk(message.tensors, header.contributors, layout)
        if header.step <= chunks - 2:  # reduce-scatter: this member's part goes in
            chunk = self._add(chunk, header.chunk)
            if chunk is None:
                return None
            if header.step == chunks - 2:
                attempt.finished[header.chunk] = chunk
            self._send(attempt, header.step + 1, header.chunk, *_fields(chunk))
        else:  # all-gather: a finished chunk passes by
            attempt.finished[header.chunk] = chunk
            if header.step < 2 * chunks - 3:
                self._send(attempt, header.step + 1, header.chunk, *_fields(chunk))
        return self._assemble(attempt) if len(attempt.finished) == chunks else None

    # ---- the parts ----------------------------------------------------------------------

    def _parts(self, chunks: int) -> list[Tensors]:
        if chunks not in self.parts:
            own = self.layouts.own
            if self.flat is None:
                self.flat = flatten(self.contribution, own)
            self.parts[chunks] = cut(self.flat, own, chunks)
        return self.parts[chunks]

    def _join(self, view: View, leader: int | None, number: int) -> Attempt | None:
        """The attempt a chunk belongs to, joined now if it is new; None if it is older."""
        attempt = self.current(view.epoch)
        if attempt is not None and number <= attempt.number:
            return attempt if number == attempt.number else None
        assert leader is not None  # a ring of three or more has one
        self.start(view, leader, number)
        return self.attempt

    def _add(self, chunk: Chunk, index: int) -> Chunk | None:
        """The chunk with this member's part in it; None (refused) if it cannot go in."""
        if not self.contribution:  # takes part without contributing: it only passes on
            return chunk
        if self.host.id in chunk.contributors:
            self._refuse("it holds this member's part already")
            return None
        layout = self.layouts.join(chunk.layout)
        if isinstance(layout, str):
            self._refuse(layout)
            return None
        tensors = add_part(chunk.tensors, self._parts(len(self.attempt.ring))[index])
        return Chunk(tensors, (*chunk.contributors, self.host.id), layout)

    def _assemble(self, attempt: Attempt) -> tuple[Tensors, tuple[int, ...]] | None:
        """The total from every finished chunk, if they agree on who and on the layout
        (each chunk fits its own: ``take``); on the host, as a token lap's total is (a
        checkpoint and a peer's fetch take it)."""
        chunks = [attempt.finished[c] for c in range(len(attempt.ring))]
        who = {frozenset(c.contributors) for c in chunks}
        layouts = {c.layout.shapes for c in chunks}
        if len(who) != 1 or len(layouts) != 1:
            attempt.refused = True
            self._refuse(f"its chunks disagree: contributors {sorted(map(sorted, who))}")
            return None
        (contributed,) = who
        layout = chunks[0].layout
        flat = {
            name: torch.cat([c.tensors[name].to("cpu") for c in chunks]) for name in layout.segments
        }
        return rebuild(flat, layout), tuple(m for m in attempt.ring if m in contributed)

    # ---- sending ------------------------------------------------------------------------

    def _send(
        self,
        attempt: Attempt,
        step: int,
        chunk: int,
        tensors: Tensors,
        contributors: tuple[int, ...],
        layout: Layout,
    ) -> None:
        ring = attempt.ring
        successor = ring[(ring.index(self.host.id) + 1) % len(ring)]
        header = LapHeader(
            self.name,
            attempt.leader,
            attempt.number,
            attempt.epoch,
            contributors=contributors,
            chunk=chunk,
            step=step,
            shapes=layout.shapes,
        )
        self.host.send(
            successor,
            Payload(
                sender=self.host.id,
                round=self.round,
                epoch=attempt.epoch,
                seq=(step + 1) * SEQ_PER_STEP + attempt.number,
                tensors=tensors,
                channel=Channel.LAP,
                lap=header,
            ),
        )

    def _refuse(self, why: str) -> None:
        self.host.event(EventKind.LAP_TOKEN_REFUSED, self.round, f"lap {self.name!r}: {why}")


def _fields(chunk: Chunk) -> tuple[Tensors, tuple[int, ...], Layout]:
    return chunk.tensors, chunk.contributors, chunk.layout


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
