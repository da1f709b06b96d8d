"""A client's thread-safe inbox: early arrivals wait, duplicates are dropped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ring_actors.protocol import Payload


class Inbox:
    """Payloads waiting to be merged, with the newest round seen from each sender.

    ``receive`` runs on a Ray concurrency thread and training on another, so every access
    holds one condition variable; waiting is a timed wait on it, never a busy loop.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: list[Payload] = []
        self._seen: set[tuple[int, int, int, str]] = set()
        self._newest: dict[tuple[str, int], int] = {}

    def put(self, payload: Payload) -> bool:
        """Enqueue; False for a duplicate delivery (a re-send that already arrived)."""
        with self._cond:
            if payload.key in self._seen:
                return False
            self._seen.add(payload.key)
            self._items.append(payload)
            key = (payload.kind, payload.sender)
            self._newest[key] = max(self._newest.get(key, -1), payload.round)
            self._cond.notify_all()
            return True

    def take(self, kind: str, max_round: int | None = None) -> list[Payload]:
        """Remove payloads of ``kind`` up to ``max_round``; keep only the newest per sender."""
        with self._cond:
            chosen = [
                p
                for p in self._items
                if p.kind == kind and (max_round is None or p.round <= max_round)
            ]
            taken = {id(p) for p in chosen}
            self._items = [p for p in self._items if id(p) not in taken]
        newest: dict[int, Payload] = {}
        for p in chosen:
            if p.sender not in newest or p.round > newest[p.sender].round:
                newest[p.sender] = p
        return sorted(newest.values(), key=lambda p: p.sender)

    def newest(self, kind: str, sender: int) -> int:
        """The highest round ever received on ``kind`` from ``sender`` (-1: none yet)."""
        with self._cond:
            return self._newest.get((kind, sender), -1)

    def pop(self, match: Callable[[Payload], bool]) -> list[Payload]:
        """Remove and return every payload ``match`` accepts, in arrival order."""
        with self._cond:
            chosen = [p for p in self._items if match(p)]
            self._items = [p for p in self._items if not match(p)]
        return chosen

    def count(self, kind: str) -> int:
        with self._cond:
            return sum(1 for p in self._items if p.kind == kind)

    def wait(self, ready: Callable[[], bool], timeout: float, tick: Callable[[], None]) -> bool:
        """Block until ``ready()`` or ``timeout`` seconds; ``tick`` runs between short waits."""
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

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)
