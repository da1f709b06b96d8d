"""Slow links between clients: a hop is delivered after its link's latency and transfer time."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ring_actors.delivery.transport import ClientHandle, Pending
from ring_actors.timeouts import LINK_WAKE_CAP_S

if TYPE_CHECKING:
    from ring_actors.delivery.payloads import Payload
    from ring_actors.heterogeneity.model import Heterogeneity

log = logging.getLogger(__name__)


class Deferred:
    """A call made when its link delivers it: until then, not done."""

    def __init__(self, call: Callable[[], Pending[Any]]) -> None:
        self.call = call
        self.inner: Pending[Any] | None = None
        self.fired = threading.Event()

    def fire(self) -> None:
        self.inner = self.call()
        self.fired.set()

    def fail(self, error: BaseException) -> None:
        """Delivered as an error: the caller's ``result`` raises it."""
        self.inner = _Raised(error)
        self.fired.set()

    def done(self) -> bool:
        return self.fired.is_set() and self.inner is not None and self.inner.done()

    def result(self, timeout: float | None = None) -> Any:
        started = time.monotonic()
        if not self.fired.wait(timeout):
            raise TimeoutError("still on the link")
        assert self.inner is not None
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        return self.inner.result(left)


class LinkScheduler:
    """One thread per process that makes deferred calls when they fall due.

    Every hop of the process waits on that thread, so nothing one hop brings may end it: a
    wait is taken in steps of at most ``LINK_WAKE_CAP_S`` (a due time past any timer's range
    is waited for, not raised on), and a call that fails is its caller's error.
    """

    _instance: LinkScheduler | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Deferred]] = []
        self.count = itertools.count()
        self.cond = threading.Condition()
        threading.Thread(target=self._run, name="link-scheduler", daemon=True).start()

    @classmethod
    def shared(cls) -> LinkScheduler:
        with cls._lock:
            if cls._instance is None:
                cls._instance = LinkScheduler()
            return cls._instance

    def at(self, due: float, deferred: Deferred) -> None:
        with self.cond:
            heapq.heappush(self.heap, (due, next(self.count), deferred))
            self.cond.notify()

    def _run(self) -> None:
        while True:
            _deliver(self._next_due())

    def _next_due(self) -> Deferred:
        with self.cond:
            while not self.heap or self.heap[0][0] > time.monotonic():
                self.cond.wait(self._wait_s())
            return heapq.heappop(self.heap)[2]

    def _wait_s(self) -> float | None:
        """Until the first hop falls due, at most ``LINK_WAKE_CAP_S``; None: none queued."""
        if not self.heap:
            return None
        return min(LINK_WAKE_CAP_S, max(0.0, self.heap[0][0] - time.monotonic()))


def _deliver(deferred: Deferred) -> None:
    """Make the call; one that raises is handed to its caller, never to the thread."""
    try:
        deferred.fire()
    except Exception as err:  # noqa: BLE001 - a failing call is the caller's to see
        log.warning("a link could not deliver a hop: %r", err)
        failed = RuntimeError("the link could not deliver")
        failed.__cause__ = err
        deferred.fail(failed)


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        raise self.error


class LinkedHandle:
    """A peer's handle behind a slow link: pushes and pull answers take the link's time.

    Hops on one link queue behind each other (the link carries one at a time), so a
    burst of pushes takes the sum of their transfer times, as on a real uplink.
    """

    def __init__(
        self,
        inner: ClientHandle,
        model: Heterogeneity,
        sender: int,
        receiver: int,
        report: Callable[[Payload, int, float], None],
    ) -> None:
        self.inner = inner
        self.model = model
        self.sender, self.receiver = sender, receiver
        self.report = report
        self.busy_until = 0.0
        self.lock = threading.Lock()

    def _due(self, nbytes: int) -> tuple[float, float]:
        latency, transfer_s = self.model.hop(self.sender, self.receiver, nbytes)
        now = time.monotonic()
        with self.lock:
            sent = max(now, self.busy_until) + transfer_s
            self.busy_until = sent
        return sent + latency, sent + latency - now

    def receive(self, payload: Payload) -> Pending[bool]:
        due, delay = self._due(payload.nbytes)
        self.report(payload, self.receiver, delay)
        deferred = Deferred(lambda: self.inner.receive(payload))
        LinkScheduler.shared().at(due, deferred)
        return deferred

    def serve(self, round_: int, keys: tuple[str, ...]) -> Pending[Payload | None]:
        """The answer crosses the link back from the receiver (who serves) to us."""
        return _Answer(self.inner.serve(round_, keys), self.model, self.receiver, self.sender)

    def __getattr__(self, name: str) -> Any:  # control calls are small: no link time
        return getattr(self.inner, name)


class _Answer:
    """A pulled answer that reaches the puller after its link's time."""

    def __init__(self, inner: Pending[Any], model: Heterogeneity, sender: int, receiver: int):
        self.inner, self.model = inner, model
        self.sender, self.receiver = sender, receiver
        self.arrives: float | None = None

    def _arrival(self, answer: Any) -> float:
        if self.arrives is None:
            from ring_actors.delivery.payloads import Payload  # a client's path only

            nbytes = answer.nbytes if isinstance(answer, Payload) else 0
            self.arrives = time.monotonic() + self.model.hop_s(self.sender, self.receiver, nbytes)
        return self.arrives

    def done(self) -> bool:
        if not self.inner.done():
            return False
        try:
            return time.monotonic() >= self._arrival(self.inner.result(0))
        except Exception:  # noqa: BLE001 - an error is an answer too
            return True

    def result(self, timeout: float | None = None) -> Any:
        started = time.monotonic()
        answer = self.inner.result(timeout)
        wait = self._arrival(answer) - time.monotonic()
        if timeout is not None and wait > timeout - (time.monotonic() - started):
            raise TimeoutError("still on the link")
        time.sleep(max(0.0, wait))
        return answer
