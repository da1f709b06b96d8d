"""The transport over Ray: peers and the coordinator are actor handles, answers ObjectRefs.
Both sides of a declared call (``delivery/transport.py``) are derived here: the caller's
(:func:`call_actor`) and the actor shell's (:func:`answered_by_core`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import ray
from ray.exceptions import (
    ActorUnavailableError,
    GetTimeoutError,
    OutOfMemoryError,
    RayActorError,
    WorkerCrashedError,
)

from ring_actors.delivery.transport import (
    UNANSWERED,
    Call,
    ClientHandle,
    PeerGone,
    PeerUnavailable,
    Reply,
    call_of,
    derive,
    forwarding,
)
from ring_actors.delivery.view import View

if TYPE_CHECKING:  # the coordinator and the slot pools never import torch
    from ring_actors.delivery.payloads import Payload

Shell = TypeVar("Shell", bound=type)

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


def call_actor(
    actor: ray.actor.ActorHandle,
    name: str,
    call: Call,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout_s: float | None = None,
) -> Any:
    """``actor``'s call ``name`` made as declared: what its caller gets back, each wait
    bounded by ``timeout_s``."""
    ref = getattr(actor, name).remote(*args, **kwargs)
    if call.reply is Reply.NONE:
        return None
    pending = RayPending(ref)
    if call.reply is Reply.PENDING:
        return pending
    if call.reply is Reply.HELD:
        with contextlib.suppress(*UNANSWERED):
            pending.result(timeout_s)
        return None
    return pending.result(timeout_s)


def answered_by_core(
    *interfaces: type, control_group: str | None = None
) -> Callable[[Shell], Shell]:
    """An actor shell's methods for the calls ``interfaces`` declare: each answered by the
    shell's ``core``, a ``control`` call on ``control_group``'s threads."""

    def make(name: str, declared: Callable[..., Any]) -> Callable[..., Any]:
        def answer(self: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(self.core, name)(*args, **kwargs)

        if control_group is not None and call_of(declared).control:
            return ray.method(concurrency_group=control_group)(answer)
        return answer

    return lambda cls: derive(cls, interfaces, make)


@forwarding(ClientHandle)
@dataclass(frozen=True)
class RayClientHandle(ClientHandle):
    """A client actor behind the :class:`~ring_actors.delivery.transport.ClientHandle` interface.

    ``max_bytes`` bounds the answers to its holder's pulls, which the holder sets
    (``bounded``): the coordinator that hands out handles does not know a method's size.
    """

    actor: ray.actor.ActorHandle
    max_bytes: int | None = None

    def dispatch(self, name: str, call: Call, *args: Any, **kwargs: Any) -> Any:
        return call_actor(self.actor, name, call, args, kwargs)

    def receive(self, payload: Payload) -> RayPending:
        """The payload's tensors travel as bytes."""
        return RayPending(self.actor.receive.remote(_to_wire(payload)))

    def serve(self, round_: int, keys: tuple[str, ...]) -> RayPending:
        """The answer rebuilt from its bytes, refused past ``max_bytes``."""
        unpack = partial(_from_wire, max_bytes=self.max_bytes)
        return RayPending(self.actor.serve.remote(round_, keys), unpack)

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None:
        """The handles travel as a plain dict, whatever mapping the caller holds."""
        self.actor.set_view.remote(view, dict(handles))


def bounded(handles: Mapping[int, ClientHandle], max_bytes: int) -> dict[int, ClientHandle]:
    """``handles`` with the answers to pulls through each client actor's limited to
    ``max_bytes``, what their holder takes at most."""
    return {
        member: replace(h, max_bytes=max_bytes) if isinstance(h, RayClientHandle) else h
        for member, h in handles.items()
    }
