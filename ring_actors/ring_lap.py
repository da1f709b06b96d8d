"""The ring lap: a token travels once around the live ring collecting contributions, and a
second lap hands the total to everyone. Exact over whoever contributed, and it survives
failures: unacknowledged hops are re-routed by the outbox, a lost token is restarted by the
lap's leader, and a client that missed the result fetches it from the leader.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

import torch

from ring_actors.inbox import Inbox
from ring_actors.laps import accumulate
from ring_actors.membership import View
from ring_actors.protocol import Payload

SUM = "lap"  # a token collecting contributions
RESULT = "lap_result"  # the finished total, handed round the ring


def is_lap(payload: Payload) -> bool:
    return payload.kind.split("/")[0] in (SUM, RESULT)


def lap_leader(view: View, round_: int) -> int | None:
    """The member that starts the round's laps: it rotates, and is always one that trains."""
    active = view.active(round_)
    return active[round_ % len(active)] if active else None


@dataclass(frozen=True)
class LapResult:
    total: dict[str, torch.Tensor]
    contributors: tuple[int, ...]


class LapHost(Protocol):
    """What a lap needs from its client."""

    id: int
    inbox: Inbox

    @property
    def current_view(self) -> View: ...

    def send(self, target: int, payload: Payload) -> None: ...

    def tick(self) -> None: ...

    def event(self, kind: str, round_: int, detail: str) -> None: ...

    def fetch_lap_result(self, leader: int, name: str, round_: int) -> LapResult | None: ...


class RingLaps:
    """One client's side of every lap: add and forward, lead and restart, keep results."""

    def __init__(self, host: LapHost, timeout_s: float) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.results: dict[tuple[str, int], LapResult] = {}
        self.lock = threading.Lock()

    def result(self, name: str, round_: int) -> LapResult | None:
        with self.lock:
            return self.results.get((name, round_))

    # ---- actor thread: tokens this client need not wait for -----------------------------

    def on_receive(self, token: Payload, runs_round: bool) -> bool:
        """Handle a token at once when no training is needed for it; False queues it.

        Results are stored and passed on; a token for a lap finished here is answered with
        the result (a restarted lap then ends at once); a token for a round this client does
        not train (a joiner's earlier rounds) is passed on untouched.
        """
        stage, name = token.kind.split("/", 1)
        key = (name, token.round)
        if stage == RESULT:
            with self.lock:
                self.results.setdefault(key, LapResult(token.tensors, tuple(token.meta["contrib"])))
            self._forward(token, token.tensors, token.meta["contrib"], stage=RESULT)
            return True
        done = self.result(name, token.round)
        if done is not None:
            if token.meta["leader"] != self.host.id:
                self._start_result(name, token.round, done, leader=token.meta["leader"])
            return True
        if not runs_round:
            self._forward(token, token.tensors, token.meta["contrib"], stage=SUM)
            return True
        return False

    # ---- training thread ----------------------------------------------------------------

    def run(
        self, name: str, round_: int, contribution: dict[str, torch.Tensor]
    ) -> LapResult | None:
        """Take part in lap ``name`` of ``round_``; None only if it could not finish."""
        host, key = self.host, (name, round_)
        started = time.monotonic()
        deadline = started + 6 * self.timeout_s
        mine: set[int] = set()  # attempts this client started as leader
        attempt_at, attempt_members = 0.0, frozenset[int]()
        last_progress = started
        while True:
            done = self.result(name, round_)
            if done is not None:
                return done
            view, now = host.current_view, time.monotonic()
            if lap_leader(view, round_) == host.id:
                lost = bool(attempt_members - set(view.members))
                if not mine or lost or now - attempt_at > 2 * self.timeout_s:
                    if view.successor(host.id) is None:  # alone: the total is ours
                        return self._finish(name, round_, contribution, [host.id], leader=True)
                    attempt = max(mine, default=-1) + 1
                    if attempt > 0:
                        host.event("lap_restarted", round_, f"lap {name!r}, attempt {attempt}")
                    mine.add(attempt)
                    attempt_at, attempt_members = now, frozenset(view.members)
                    token: dict[str, torch.Tensor] = {}
                    accumulate(token, contribution)
                    contrib = [host.id] if contribution else []
                    self._send_on(name, round_, SUM, token, contrib, [host.id], host.id, attempt)
            for token in host.inbox.pop(lambda p: p.kind == f"{SUM}/{name}" and p.round == round_):
                meta = token.meta
                if meta["leader"] == host.id:
                    if meta["attempt"] in mine:
                        return self._finish(name, round_, token.tensors, meta["contrib"], True)
                    continue
                if meta["leader"] not in view.members or host.id in meta["visited"]:
                    continue  # a dead leader's or a looping token: the live leader restarts
                total = dict(token.tensors)
                contrib = list(meta["contrib"])
                if contribution:
                    accumulate(total, contribution)
                    contrib.append(host.id)
                self._forward(token, total, contrib, stage=SUM)
                last_progress = time.monotonic()
            leader = lap_leader(view, round_)
            if leader not in (None, host.id) and time.monotonic() - last_progress > self.timeout_s:
                last_progress = time.monotonic()
                fetched = host.fetch_lap_result(leader, name, round_)
                if fetched is not None:
                    host.event("lap_result_fetched", round_, f"lap {name!r} from {leader}")
                    with self.lock:
                        self.results.setdefault(key, fetched)
                    continue
            if time.monotonic() > deadline:
                host.event(
                    "lap_failed", round_, f"lap {name!r} gave up after {deadline - started:.0f}s"
                )
                return None
            host.inbox.wait(
                lambda: (
                    self.result(name, round_) is not None or host.inbox.count(f"{SUM}/{name}") > 0
                ),
                0.25,
                host.tick,
            )

    def forget_before(self, round_: int) -> None:
        """Drop results older than ``round_``: the ring never needs them again."""
        with self.lock:
            for key in [k for k in self.results if k[1] < round_]:
                del self.results[key]

    # ---- sending ------------------------------------------------------------------------

    def _finish(
        self, name: str, round_: int, total: dict, contrib: list[int], leader: bool
    ) -> LapResult:
        result = LapResult(dict(total), tuple(contrib))
        with self.lock:
            self.results.setdefault((name, round_), result)
        if leader:
            self._start_result(name, round_, result, leader=self.host.id)
        return result

    def _start_result(self, name: str, round_: int, result: LapResult, leader: int) -> None:
        self._send_on(
            name, round_, RESULT, result.total, list(result.contributors), [self.host.id], leader
        )

    def _forward(self, token: Payload, total: dict, contrib: list[int], stage: str) -> None:
        """Pass a token on to the successor unless the lap closes there."""
        meta = token.meta
        visited = [*meta["visited"], self.host.id]
        name = token.kind.split("/", 1)[1]
        self._send_on(
            name, token.round, stage, total, contrib, visited, meta["leader"], meta["attempt"]
        )

    def _send_on(
        self,
        name: str,
        round_: int,
        stage: str,
        total: dict,
        contrib: list[int],
        visited: list[int],
        leader: int,
        attempt: int = 0,
    ) -> None:
        view = self.host.current_view
        successor = view.successor(self.host.id)
        closes = stage == RESULT and successor in visited
        if successor is None or closes:
            return
        self.host.send(
            successor,
            Payload(
                sender=self.host.id,
                round=round_,
                epoch=view.epoch,
                seq=attempt,
                tensors=total,
                kind=f"{stage}/{name}",
                meta={"leader": leader, "attempt": attempt, "visited": visited, "contrib": contrib},
            ),
        )
