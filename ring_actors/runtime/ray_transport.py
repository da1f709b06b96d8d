"""The transport over Ray: peers and the coordinator are actor handles, answers ObjectRefs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import (
    ActorUnavailableError,
    GetTimeoutError,
    OutOfMemoryError,
    RayActorError,
    WorkerCrashedError,
)

from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import (
    ClientHandle,
    Joining,
    PeerGone,
    PeerUnavailable,
    Readmission,
)
from ring_actors.delivery.view import View

if TYPE_CHECKING:  # the coordinator and the slot pools never import torch
    from ring_actors.delivery.payloads import Payload

# What a call raises when the process answering it died under it: the actor died, its
# worker crashed, or Ray's memory monitor killed it.
CALLEE_DIED = (RayActorError, OutOfMemoryError, WorkerCrashedError)


def _to_wire(payload: Payload) -> Any:
    """Tensors as bytes, which Ray passes out of band (``delivery/wire.py`` says why).
    Imported here, not above: only clients send payloads, and the control plane that also
    holds client handles never imports torch."""
    from ring_actors.delivery.wire import to_wire

    return to_wire(payload)


def _from_wire(answer: Any, max_bytes: int | None = None) -> Any:
    """A payload answer rebuilt from its bytes, refused by its declared size (over
    ``max_bytes``) before a byte of it is copied."""
    from ring_actors.delivery.wire import WirePayload, from_wire

    return from_wire(answer, max_bytes) if isinstance(answer, WirePayload) else answer


@dataclass(frozen=True)
class RayPending:
    """An actor call's ObjectRef as a :class:`~ring_actors.delivery.transport.Pending`.

    A transiently unavailable actor (it is being restarted) is not gone: the call raises
    :class:`PeerUnavailable` and the caller may try again. A call whose process died under
    it (the actor died, its worker crashed, or Ray's memory monitor killed it) raises
    :class:`PeerGone`, so the payload is re-sent past the peer instead of dropped.
    """

    ref: ray.ObjectRef
    unpack: Callable[[Any], Any] | None = None  # what the answer needs on arrival

    def done(self) -> bool:
        ready, _ = ray.wait([self.ref], timeout=0)
        return bool(ready)

    def result(self, timeout: float | None = None) -> Any:
        try:
            answer = ray.get(self.ref, timeout=timeout)
        except GetTimeoutError as err:
            raise TimeoutError(str(err)) from err
        except ActorUnavailableError as err:
            raise PeerUnavailable(str(err)) from err
        except CALLEE_DIED as err:
            raise PeerGone(type(err).__name__) from err
        return self.unpack(answer) if self.unpack else answer


@dataclass(frozen=True)
class RayClientHandle:
    """A client actor behind the :class:`~ring_actors.delivery.transport.ClientHandle` interface.

    ``max_bytes`` bounds the answers to its holder's pulls, which the holder sets
    (``bounded``): the coordinator that hands out handles does not know a method's size.
    """

    actor: ray.actor.ActorHandle
    max_bytes: int | None = None

    def receive(self, payload: Payload) -> RayPending:
        return RayPending(self.actor.receive.remote(_to_wire(payload)))

    def serve(self, round_: int, keys: tuple[str, ...]) -> RayPending:
        unpack = partial(_from_wire, max_bytes=self.max_bytes)
        return RayPending(self.actor.serve.remote(round_, keys), unpack)

    def lap_result(self, name: str, round_: int) -> RayPending:
        return RayPending(self.actor.lap_result.remote(name, round_))

    def ping(self) -> RayPending:
        return RayPending(self.actor.ping.remote())

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None:
        self.actor.set_view.remote(view, dict(handles))

    def start(self, first_round: int = 0, joining: Joining | None = None) -> None:
        self.actor.start.remote(first_round, joining)

    def resume(self) -> None:
        self.actor.resume.remote()

    def hand_off(self, joiner: int, handle: ClientHandle, round_: int) -> None:
        self.actor.hand_off.remote(joiner, handle, round_)

    def journal(self) -> RayPending:
        return RayPending(self.actor.journal.remote())


def bounded(handles: Mapping[int, ClientHandle], max_bytes: int) -> dict[int, ClientHandle]:
    """``handles`` with the answers to pulls through each client actor's limited to
    ``max_bytes``, what their holder takes at most."""
    return {
        member: replace(h, max_bytes=max_bytes) if isinstance(h, RayClientHandle) else h
        for member, h in handles.items()
    }


@dataclass(frozen=True)
class RayControlLink:
    """The coordinator actor behind the :class:`~ring_actors.delivery.transport.ControlLink`."""

    actor: ray.actor.ActorHandle

    def report_round(self, client_id: int, round_: int, metrics: dict[str, float]) -> None:
        self.actor.report_round.remote(client_id, round_, metrics)

    def report_event(
        self, kind: EventKind, client_id: int, round_: int, detail: str = "", **measured: float
    ) -> None:
        self.actor.report_event.remote(kind, client_id, round_, detail, **measured)

    def leave(self, client_id: int, round_: int, off_s: float) -> None:
        ray.get(self.actor.leave.remote(client_id, round_, off_s))

    def come_back(self, client_id: int, round_: int) -> Readmission | None:
        return ray.get(self.actor.come_back.remote(client_id, round_))

    def report_unreachable(self, reporter: int, target: int, epoch: int) -> None:
        self.actor.report_unreachable.remote(reporter, target, epoch)

    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None:
        self.actor.report_done.remote(client_id, lost, hops, bytes_sent)

    def report_failed(self, client_id: int, round_: int, error: str) -> None:
        self.actor.report_failed.remote(client_id, round_, error)

    def rejoin(
        self, client_id: int, handle: ClientHandle, node_id: str, checkpoint_round: int | None
    ) -> Readmission | None:
        return ray.get(self.actor.rejoin.remote(client_id, handle, node_id, checkpoint_round))
