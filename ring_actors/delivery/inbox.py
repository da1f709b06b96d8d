"""A client's thread-safe inbox: early arrivals wait, duplicates are dropped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from ring_actors.delivery.payloads import Payload


class Inbox:
    """Payloads waiting to be merged, with the newest round seen from each sender.

    ``receive`` runs on a Ray concurrency thread and training on another, so every access
    holds one condition variable; waiting is a timed wait on it, never a busy loop.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: list[Payload] = []
        self._seen: set[tuple[int, int, int, str, str]] = set()
        self._newest: dict[tuple[str, int], int] = {}

    def put(self, payload: Payload) -> bool:
        """Enqueue; False for a duplicate delivery (a re-send that already arrived)."""
        with self._cond:
            if payload.key in self._seen:
                return False
            self._seen.add(payload.key)
            self._items.append(payload)
            key = (payload.channel, payload.sender)
            self._newest[key] = max(self._newest.get(key, -1), payload.round)
            self._cond.notify_all()
            return True

    def has(self, payload: Payload) -> bool:
        """True when ``payload`` (its key) was delivered before and not forgotten since."""
        with self._cond:
            return payload.key in self._seen

    def take(self, channel: str, max_round: int | None = None) -> list[Payload]:
        """Remove payloads of ``channel`` up to ``max_round``; keep only the newest per sender."""
        with self._cond:
            chosen = [
                p
                for p in self._items
                if p.channel == channel and (max_round is None or p.round <= max_round)
            ]
            taken = {id(p) for p in chosen}
            self._items = [p for p in self._items if id(p) not in taken]
        newest: dict[int, Payload] = {}
        for p in chosen:
            if p.sender not in newest or p.round > newest[p.sender].round:
                newest[p.sender] = p
        return sorted(newest.values(), key=lambda p: p.sender)

    def newest(self, channel: str, sender: int) -> int:
        """The highest round ever received on ``channel`` from ``sender`` (-1: none yet)."""
        with self._cond:
            return self._newest.get((channel, sender), -1)

    def pop(self, match: Callable[[Payload], bool]) -> list[Payload]:
        """Remove and return every payload ``match`` accepts, in arrival order."""
        with self._cond:
            chosen = [p for p in self._items if match(p)]
            self._items = [p for p in self._items if not match(p)]
        return chosen

    def arrived(self, channel: str, sender: int, round_: int) -> bool:
        """True once a payload of ``round_`` from ``sender`` came in on ``channel`` (even if
        a later round came first, or it was taken since)."""
        with self._cond:
            return any(k[0] == sender and k[1] == round_ and k[3] == channel for k in self._seen)

    def peek(self, match: Callable[[Payload], bool]) -> list[Payload]:
        """Every waiting payload ``match`` accepts, left in place."""
        with self._cond:
            return [p for p in self._items if match(p)]

    def wake(self) -> None:
        """Wake every ``wait`` to test its ``ready`` again now: state it reads besides the
        queue (a lap's total, a new view) changed, and a lap should not pay a tick per hop."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, ready: Callable[[], bool], timeout: float, tick: Callable[[], None]) -> bool:
        """Block until ``ready()`` or ``timeout`` seconds; ``tick`` runs between short waits
        (``put`` and ``wake`` end a short wait at once)."""
        deadline = time.monotonic() + timeout
        while True:
            tick()
            with self._cond:
                if ready():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(0.05, remaining))

    def forget_before(self, round_: int, keep_newest: str | None = None) -> None:
        """Drop what is older than ``round_``, so a long run's memory stays flat; a late
        duplicate of such a round is then superseded by newer payloads at ``take``. On
        channel ``keep_newest``, each sender's newest waiting payload stays however old:
        a straggler's state is merged late rather than never."""
        with self._cond:
            newest: dict[int, Payload] = {}
            for p in self._items:
                mine = p.channel == keep_newest
                if mine and (p.sender not in newest or p.round >= newest[p.sender].round):
                    newest[p.sender] = p
            kept = {id(p) for p in newest.values()}
            kept_keys = {p.key for p in newest.values()}
            self._seen = {k for k in self._seen if k[1] >= round_ or k in kept_keys}
            self._items = [p for p in self._items if p.round >= round_ or id(p) in kept]

    def forget_after(self, channel: str, rounds: Mapping[int, int]) -> list[Payload]:
        """Drop what each sender of ``rounds`` sent on ``channel`` after its round there, as
        if it never came (the sender redoes those rounds and sends it again); the dropped."""

        def later(sender: int, round_: int) -> bool:
            return sender in rounds and round_ > rounds[sender]

        with self._cond:
            dropped = [p for p in self._items if p.channel == channel and later(p.sender, p.round)]
            gone = {p.key for p in dropped}
            self._items = [p for p in self._items if p.key not in gone]
            self._seen = {k for k in self._seen if k[3] != channel or not later(k[0], k[1])}
            for sender in rounds:
                seen = [k[1] for k in self._seen if k[3] == channel and k[0] == sender]
                self._newest[(channel, sender)] = max(seen, default=-1)
        return dropped

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)
