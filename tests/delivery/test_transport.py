"""Each remote call is declared once, with how it is made, and a handle's methods for it are
derived from that declaration: the arguments checked as declared, the call passed on as its
reply kind says."""

from __future__ import annotations

import inspect
import threading
from types import SimpleNamespace
from typing import Any, Protocol

import pytest

from ring_actors.delivery.transport import (
    Call,
    ClientHandle,
    ControlLink,
    PeerGone,
    Reply,
    RunClock,
    call_of,
    declared_calls,
    forwarding,
    remote,
)
from ring_actors.delivery.view import View
from ring_actors.in_process import LocalClient, LocalHandle


class Greeter(Protocol):
    @remote(Reply.PENDING)
    def greet(self, name: str, punctuation: str = "!") -> str:
        """A greeting, answered later."""

    @remote(Reply.NONE, control=True)
    def wave(self) -> None: ...

    def undeclared(self) -> None: ...


@forwarding(Greeter)
class Recorder(Greeter):
    def __init__(self) -> None:
        self.sent: list[tuple[str, Call, tuple, dict]] = []

    def dispatch(self, name: str, call: Call, *args: Any, **kwargs: Any) -> Any:
        self.sent.append((name, call, args, kwargs))
        return "dispatched"

    def wave(self) -> None:
        self.sent.append(("waved by hand", Call(Reply.NONE), (), {}))


def test_only_marked_methods_are_calls_and_each_says_how_it_is_made():
    calls = declared_calls(Greeter)
    assert list(calls) == ["greet", "wave"]
    assert call_of(calls["greet"]) == Call(Reply.PENDING)
    assert call_of(calls["wave"]) == Call(Reply.NONE, control=True)


def test_a_derived_method_passes_its_call_on_as_given_and_is_signed_as_declared():
    handle = Recorder()
    assert handle.greet("ada", punctuation="?") == "dispatched"
    assert handle.sent == [("greet", Call(Reply.PENDING), ("ada",), {"punctuation": "?"})]
    method = Recorder.greet
    assert method.__name__ == "greet" and method.__qualname__ == "Recorder.greet"
    assert method.__doc__ == "A greeting, answered later."
    assert inspect.signature(method) == inspect.signature(Greeter.greet)
    assert not hasattr(method, "__wrapped__")  # Ray would unwrap it to the bare declaration


def test_a_wrong_call_fails_in_the_caller_and_is_never_sent():
    handle = Recorder()
    with pytest.raises(TypeError):
        handle.greet()
    with pytest.raises(TypeError):
        handle.greet("ada", "!", "?")
    assert handle.sent == []


def test_a_method_the_handle_writes_itself_is_kept():
    handle = Recorder()
    handle.wave()
    assert handle.sent == [("waved by hand", Call(Reply.NONE), (), {})]


def test_a_clients_calls_return_at_once_and_only_the_probes_are_control_calls():
    """A client's caller never waits in the call (``ClientHandle``); the coordinator's
    probes answer on threads that peers' receives cannot take."""
    calls = {name: call_of(m) for name, m in declared_calls(ClientHandle).items()}
    assert {c.reply for c in calls.values()} <= {Reply.NONE, Reply.PENDING}
    assert {name for name, c in calls.items() if c.control} == {"ping", "journal"}


def test_a_clients_reports_are_made_as_the_coordinator_core_answers_them_in_process():
    """In one process the coordinator core is the control link itself: its calls return
    their answer, so none of them may be declared pending."""
    calls = {name: call_of(m) for name, m in declared_calls(ControlLink).items()}
    assert {c.reply for c in calls.values()} <= {Reply.NONE, Reply.HELD, Reply.ANSWER}
    assert calls["report_round"].reply is Reply.HELD  # acknowledged, not only sent
    assert {n for n, c in calls.items() if c.reply is Reply.ANSWER} == {
        "leave",
        "come_back",
        "rejoin",
    }
    assert call_of(declared_calls(RunClock)["run_elapsed_s"]).reply is Reply.PENDING


class Core:
    """A client core's calls, answered on the client's call threads."""

    def __init__(self) -> None:
        self.id = 3
        self.started, self.viewed = threading.Event(), threading.Event()
        self.start_args: tuple = ()
        self.handles: dict = {}

    def ping(self) -> int:
        return 7

    def lap_result(self, name: str, round_: int) -> tuple[str, int]:
        return name, round_

    def start(self, first_round: int = 0, joining: Any = None) -> None:
        self.start_args = (first_round, joining)
        self.started.set()

    def set_view(self, view: View, handles: dict) -> None:
        self.handles = handles
        self.viewed.set()


def test_a_local_handle_answers_pending_calls_and_sends_one_way_calls():
    core = Core()
    handle = LocalHandle(LocalClient(core))
    assert handle.ping().result(timeout=5) == 7
    assert handle.lap_result("mean", round_=2).result(timeout=5) == ("mean", 2)
    assert handle.start(4) is None
    assert core.started.wait(5) and core.start_args == (4, None)


def test_a_local_handles_calls_to_a_dead_client_fail_as_gone():
    client = LocalClient(Core())
    client.kill()
    with pytest.raises(PeerGone):
        LocalHandle(client).ping().result(timeout=5)


def test_a_local_client_gets_a_dict_of_handles_of_its_own():
    """The coordinator hands every member the same dict, as a process would get its copy."""
    core = Core()
    shared = {0: SimpleNamespace()}
    LocalHandle(LocalClient(core)).set_view(View(1, (0,), (0,)), shared)
    assert core.viewed.wait(5)
    assert core.handles == shared and core.handles is not shared
