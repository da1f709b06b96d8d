"""Where the members of a lap's process group find each other: a small key-value exchange.

A group's first member publishes the address of the store it hosts; the others look it up.
Over Ray the values travel through the cluster's own key-value store
(``runtime/ray_rendezvous.py``), on its authenticated channel, so the engine opens no port
for its rendezvous beyond the store of the group itself; in one process (the in-process
ring, the tests) they sit in a dict.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Rendezvous(Protocol):
    """A key-value exchange every member of a run reaches, and this process's address."""

    host: str  # the address this process's group store and gloo device bind to

    def publish(self, key: str, value: str) -> None: ...

    def lookup(self, key: str, timeout_s: float) -> str | None:
        """The value published under ``key``, waiting at most ``timeout_s``; None past it."""

    def withdraw(self, key: str) -> None: ...


class LocalRendezvous:
    """The exchange within one process: every in-process client shares one."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.values: dict[str, str] = {}
        self.changed = threading.Condition()

    def publish(self, key: str, value: str) -> None:
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()

    def lookup(self, key: str, timeout_s: float) -> str | None:
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while key not in self.values:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.changed.wait(left)
            return self.values[key]

    def withdraw(self, key: str) -> None:
        with self.changed:
            self.values.pop(key, None)
