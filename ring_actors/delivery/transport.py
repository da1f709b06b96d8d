"""What the runtime's cores need from the world, as interfaces: calls to peers and to the
coordinator that return at once with a pending answer. Ray implements them with actor calls
(``ray_transport``), tests and benchmarks in memory with threads (``in_process``), so the
round loop and the coordinator's control logic never touch Ray themselves.

Each remote call is declared once, as a method of an interface marked with how it is made
(:func:`remote`); the actor shells, the Ray transport and the in-process ring derive their
methods for it from that declaration (:func:`derive`), so a new call is a method of a core,
its declaration here and its test.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.view import View

if TYPE_CHECKING:  # the coordinator and the slot pools never import torch
    from ring_actors.delivery.payloads import Payload

T = TypeVar("T", covariant=True)
F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", bound=type)


class PeerGone(RuntimeError):
    """The callee is dead: its process exited or its node is gone."""


class PeerUnavailable(RuntimeError):
    """The callee cannot answer for now (it is being restarted); the call may be retried."""


# What a caller that waits gets instead of an answer from a callee that did not give one.
UNANSWERED = (TimeoutError, PeerUnavailable, PeerGone)


class Reply(Enum):
    """What the caller of a remote call gets back."""

    NONE = "none"  # nothing: the call is sent and never waited on
    PENDING = "pending"  # a :class:`Pending`, at once
    HELD = "held"  # nothing, once the callee holds the call; past the caller's bound, or with
    # the callee gone, the caller goes on (what it sent is kept to be sent again)
    ANSWER = "answer"  # the answer, waited for within the caller's bound


@dataclass(frozen=True)
class Call:
    """How one remote call is made."""

    reply: Reply
    control: bool = False  # answered on threads of its own, which peers' receives cannot take


_DECLARED = "__remote_call__"


def remote(reply: Reply, *, control: bool = False) -> Callable[[F], F]:
    """Declares an interface's method a remote call, made as ``reply`` says."""

    def declare(method: F) -> F:
        setattr(method, _DECLARED, Call(reply, control))
        return method

    return declare


def declared_calls(*interfaces: type) -> dict[str, Callable[..., Any]]:
    """The remote calls ``interfaces`` declare, by name: each its declared method."""
    return {
        name: method
        for interface in interfaces
        for name, method in vars(interface).items()
        if hasattr(method, _DECLARED)
    }


def call_of(declared: Callable[..., Any]) -> Call:
    """How a declared method's call is made."""
    return getattr(declared, _DECLARED)


def derive(
    cls: S, interfaces: tuple[type, ...], make: Callable[[str, Callable[..., Any]], Any]
) -> S:
    """``cls`` with a real method for each call ``interfaces`` declare that it does not write
    itself (a call it does more than pass on): the one ``make`` builds from the call's name
    and declared method, named, documented and signed as declared. Real methods, not
    ``__getattr__``: Ray exposes the methods an actor class has when ``ray.remote`` wraps it,
    and checks a caller's arguments against their signatures."""
    for name, declared in declared_calls(*interfaces).items():
        if name in vars(cls):
            continue
        method = make(name, declared)
        method.__name__, method.__qualname__ = name, f"{cls.__qualname__}.{name}"
        method.__module__, method.__doc__ = cls.__module__, declared.__doc__
        method.__signature__ = inspect.signature(declared)
        setattr(cls, name, method)
    return cls


def forwarding(*interfaces: type) -> Callable[[S], S]:
    """A handle's methods for the calls ``interfaces`` declare: each checks its arguments
    against the declaration (a wrong call fails in the caller, not in the callee's thread)
    and passes the call to the handle's ``dispatch(name, call, *args, **kwargs)``, the one
    place that says how the handle's calls travel."""

    def make(name: str, declared: Callable[..., Any]) -> Callable[..., Any]:
        call, signature = call_of(declared), inspect.signature(declared)

        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            signature.bind(self, *args, **kwargs)
            return self.dispatch(name, call, *args, **kwargs)

        return forward

    return lambda cls: derive(cls, interfaces, make)


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

    @remote(Reply.PENDING)
    def receive(self, payload: Payload) -> Pending[bool]: ...

    @remote(Reply.PENDING)
    def serve(self, round_: int, keys: tuple[str, ...]) -> Pending[Payload | None]: ...

    @remote(Reply.PENDING)
    def lap_result(self, name: str, round_: int) -> Pending[Any]: ...

    @remote(Reply.NONE)
    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None: ...

    @remote(Reply.NONE)
    def start(self, first_round: int = 0, joining: Joining | None = None) -> None: ...

    @remote(Reply.NONE)
    def resume(self, struck_through: int = -1) -> None: ...

    @remote(Reply.PENDING)
    def restore(self, at_most: int, restarts: Mapping[int, int]) -> Pending[int]: ...

    @remote(Reply.NONE)
    def hand_off(self, joiner: int, handle: ClientHandle, round_: int) -> None: ...

    # The coordinator's probes: a busy client is not a hung one, so receives blocked on a
    # slow disk (the spool) must not hold them up.
    @remote(Reply.PENDING, control=True)
    def ping(self) -> Pending[int]: ...

    @remote(Reply.PENDING, control=True)
    def journal(self) -> Pending[list[dict]]: ...

    @remote(Reply.PENDING)
    def saved_rounds(self) -> Pending[tuple[int, ...]]: ...


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

    @remote(Reply.HELD)
    def report_round(self, client_id: int, round_: int, metrics: dict[str, float]) -> None:
        """Returns once the coordinator holds the report: a call only sent dies with a
        process that crashes right after (the next round's first step, for a planned crash).
        Past the caller's bound (or with the coordinator gone) the round goes on; the report
        stays in the client's journal, which a resumed client sends again."""

    @remote(Reply.NONE)
    def report_event(
        self, kind: EventKind, client_id: int, round_: int, detail: str = "", **measured: float
    ) -> None: ...

    @remote(Reply.ANSWER)
    def leave(self, client_id: int, round_: int, off_s: float) -> None:
        """This client goes offline for about ``off_s`` (see ``heterogeneity``)."""

    @remote(Reply.ANSWER)
    def come_back(self, client_id: int, round_: int) -> Readmission | None:
        """Splice a client that went offline in again; None when no live member is left."""

    @remote(Reply.NONE)
    def report_unreachable(self, reporter: int, target: int, epoch: int) -> None: ...

    @remote(Reply.NONE)
    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None: ...

    @remote(Reply.NONE)
    def report_failed(self, client_id: int, round_: int, error: str) -> None: ...

    @remote(Reply.ANSWER)
    def rejoin(
        self, client_id: int, handle: ClientHandle, node_id: str, checkpoint_round: int | None
    ) -> Readmission | None:
        """Splice this restarted client in again; None when no live member is left."""


class RunClock(Protocol):
    """The run's clock, as the coordinator keeps it (``coordinator/availability.py``): what a
    client's time budget and off periods follow."""

    @remote(Reply.PENDING)
    def run_elapsed_s(self) -> Pending[float]:
        """How far the run is, by the coordinator's clock (the caller bounds the wait)."""


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
