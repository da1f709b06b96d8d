"""What the runtime's cores need from the world, as interfaces: calls to peers and to the
coordinator that return at once with a pending answer. Ray implements them with actor calls
(``ray_transport``), tests and benchmarks in memory with threads (``in_process``), so the
round loop and the coordinator's control logic never touch Ray themselves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.view import View

if TYPE_CHECKING:  # the coordinator and the slot pools never import torch
    from ring_actors.delivery.payloads import Payload

T = TypeVar("T", covariant=True)


class PeerGone(RuntimeError):
    """The callee is dead: its process exited or its node is gone."""


class PeerUnavailable(RuntimeError):
    """The callee cannot answer for now (it is being restarted); the call may be retried."""


class Pending(Protocol, Generic[T]):
    """The answer of a call in flight."""

    def done(self) -> bool:
        """True once ``result`` returns (or raises) without waiting."""

    def result(self, timeout: float | None = None) -> T:
        """The answer; raises :class:`PeerGone` if the callee died, ``TimeoutError`` if
        ``timeout`` passed first."""


@dataclass(frozen=True)
class Joining:
    """A client spliced in with no state of its own: it starts from ``donor``'s state at
    the end of the round before its first, or from nothing when ``donor`` is None (nobody
    was asked). A joiner whose donor leaves the ring before handing over stops waiting."""

    donor: int | None


class ClientHandle(Protocol):
    """A client as its peers and the coordinator call it; every call returns at once."""

    def receive(self, payload: Payload) -> Pending[bool]: ...

    def serve(self, round_: int, keys: tuple[str, ...]) -> Pending[Payload | None]: ...

    def lap_result(self, name: str, round_: int) -> Pending[Any]: ...

    def ping(self) -> Pending[int]: ...

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None: ...

    def start(self, first_round: int = 0, joining: Joining | None = None) -> None: ...

    def resume(self) -> None: ...

    def hand_off(self, joiner: int, handle: ClientHandle, round_: int) -> None: ...

    def journal(self) -> Pending[list[dict]]: ...


@dataclass(frozen=True)
class Readmission:
    """The coordinator's answer to a restarted client: where it stands in the ring now.

    The client starts itself from this answer. A call the coordinator made to it instead
    could reach the dead process's address while Ray is still restarting it, and be lost.
    """

    first_round: int
    joining: Joining | None  # no checkpoint: wait for the predecessor's hand-off first
    view: View
    handles: Mapping[int, ClientHandle]


class ControlLink(Protocol):
    """A client's reports to the coordinator: one-way, but for a round's report, which
    returns once the coordinator holds it (a crash right after must not lose it), and the
    calls that wait for an answer (``leave``, ``come_back``, ``rejoin``)."""

    def report_round(self, client_id: int, round_: int, metrics: dict[str, float]) -> None: ...

    def report_event(
        self, kind: EventKind, client_id: int, round_: int, detail: str = "", **measured: float
    ) -> None: ...

    def leave(self, client_id: int, round_: int, off_s: float) -> None:
        """This client goes offline for about ``off_s`` (see ``heterogeneity``)."""

    def come_back(self, client_id: int, round_: int) -> Readmission | None:
        """Splice a client that went offline in again; None when no live member is left."""

    def report_unreachable(self, reporter: int, target: int, epoch: int) -> None: ...

    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None: ...

    def report_failed(self, client_id: int, round_: int, error: str) -> None: ...

    def rejoin(
        self, client_id: int, handle: ClientHandle, node_id: str, checkpoint_round: int | None
    ) -> Readmission | None:
        """Splice this restarted client in again; None when no live member is left."""


def wait_all(calls: Mapping[int, Pending[Any]], timeout: float) -> dict[int, Any]:
    """Each call's answer, or the exception it ended with, within ``timeout`` in total."""
    deadline = time.monotonic() + timeout
    answers: dict[int, Any] = {}
    for key, call in calls.items():
        try:
            answers[key] = call.result(max(0.0, deadline - time.monotonic()))
        except Exception as err:  # noqa: BLE001 - the caller decides per key
            answers[key] = err
    return answers
