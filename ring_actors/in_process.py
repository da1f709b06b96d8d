"""A whole ring in one process: the real client and coordinator cores over an in-memory
transport. Calls run on per-client thread pools, as Ray runs a threaded actor's calls, so
tests and benchmarks exercise the same round loop, laps, probes, bypasses and joins as a
cluster does, in milliseconds and without Ray.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm, client_data
from ring_actors.client.resources import ClientData
from ring_actors.config import Config
from ring_actors.coordinator.core import CoordinatorCore
from ring_actors.coordinator.untracked import Untracked
from ring_actors.data.client_splits import evaluated_split, global_test_set, split_for
from ring_actors.data.partition_file import save_partition
from ring_actors.data.sources import load_dataset
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.rendezvous import LocalRendezvous
from ring_actors.delivery.transport import Call, ClientHandle, PeerGone, Reply, forwarding
from ring_actors.delivery.view import View
from ring_actors.faults.driver_side import AppliedFaults, carry_out
from ring_actors.storage.run_folder import RunFolder

T = TypeVar("T")
CALL_THREADS = 4  # concurrent calls one client answers (a Ray actor's max_concurrency)


class LocalClient:
    """A client core's process stand-in: it answers calls until it crashes, and a freeze
    holds every call (heartbeats included) as a stopped process would."""

    def __init__(self, core: ClientCore) -> None:
        self.core = core
        self.calls = ThreadPoolExecutor(CALL_THREADS, thread_name_prefix=f"calls-{core.id}")
        self.alive = True
        self.awake = threading.Event()
        self.awake.set()

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        if not self.alive:
            return _failed(PeerGone(f"client {self.core.id} is dead"))

        def run() -> T:
            self.awake.wait()
            if not self.alive:
                raise PeerGone(f"client {self.core.id} is dead")
            return method(*args, **kwargs)

        return self.calls.submit(run)

    def crash(self) -> None:
        """The round loop stops here for good, as a process that exited would."""
        self.kill()
        threading.Event().wait()

    def freeze(self, seconds: float) -> None:
        self.awake.clear()
        time.sleep(seconds)
        self.awake.set()

    def kill(self) -> None:
        """From outside: the client is gone, its calls fail from now on."""
        self.alive = False
        self.awake.set()


@forwarding(ClientHandle)
class LocalHandle(ClientHandle):
    """A :class:`~ring_actors.delivery.transport.ClientHandle` on a :class:`LocalClient`:
    each call runs on the client's call threads, as on a threaded actor's."""

    def __init__(self, client: LocalClient) -> None:
        self.client = client

    def dispatch(self, name: str, call: Call, *args: Any, **kwargs: Any) -> Any:
        answer = self.client.call(getattr(self.client.core, name), *args, **kwargs)
        return answer if call.reply is Reply.PENDING else None

    def receive(self, payload: Payload) -> Future[bool]:
        """The receiver gets tensors of its own, as the wire gives them between processes:
        it adds into a lap token in place, while the sender's outbox keeps its copy to
        re-route until acknowledged (shared, a re-route would carry that addition twice)."""
        own = replace(payload, tensors={k: v.clone() for k, v in payload.tensors.items()})
        return self.client.call(self.client.core.receive, own)

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None:
        """The client gets a dict of its own, as a process gets its copy: the coordinator
        hands every member the same one."""
        self.client.call(self.client.core.set_view, view, dict(handles))


class InProcessRing:
    """Clients and a coordinator wired in memory; ``run`` drives it to the end.

    ``data[i]`` is client i's data; clients beyond ``config.clients.count`` wait in standby
    for ``join``. No MLflow run (``Untracked``): the coordinator's results stay in memory and in
    the summary.
    """

    def __init__(
        self,
        config: Config,
        data: list[ClientData],
        num_classes: int,
        input_shape: tuple[int, int, int],
        output_dir: Path,
    ) -> None:
        if any(entry.kill_node or entry.kill_coordinator for entry in config.faults):
            raise ValueError("an in-process ring has no nodes or coordinator process to kill")
        self.config = config
        self.coordinator = CoordinatorCore(config, output_dir, Untracked())
        self.clients: dict[int, LocalClient] = {}
        # Threads of one process gain nothing from a collective over TCP: the engine goes
        # here only when asked for by name (``collective``), as the tests of it do.
        asked = config.schedule.lap_engine == "collective"
        rendezvous = LocalRendezvous() if asked else None
        for client_id, own in enumerate(data):
            device = own.train.x.device
            algorithm = build_algorithm(config, client_id, num_classes, input_shape, device)
            core = ClientCore(
                client_id, config, algorithm, own, self.coordinator,
                run_clock=self._run_clock, rendezvous=rendezvous,
            )  # fmt: skip
            client = LocalClient(core)
            client.core.faults = client
            self.clients[client_id] = client
        for client_id in range(config.clients.count):
            self.coordinator.register(client_id, self.handle(client_id), "local")
        self.admitted = set(range(config.clients.count))
        self.faults_applied = AppliedFaults(RunFolder(output_dir).driver_faults)
        self.stopping = threading.Event()
        self.loop = threading.Thread(target=self._reconcile, daemon=True)

    @classmethod
    def from_config(cls, config: Config, output_dir: Path) -> InProcessRing:
        """The ring a config describes, on the CPU: its dataset read, partitioned and
        sampled exactly as a launch on Ray does, standby joiners included."""
        dataset = load_dataset(config.data.dataset, config.data.root, config.data.download)
        splits = split_for(config, dataset)
        save_partition(RunFolder(output_dir).partition, splits, config.data.dataset)
        global_test = global_test_set(config, dataset, splits)
        cpu = torch.device("cpu")
        data = [
            client_data(dataset, evaluated_split(config, split, i), global_test, cpu)
            for i, split in enumerate(splits)
        ]
        return cls(config, data, dataset.num_classes, dataset.input_shape, output_dir)

    def _run_clock(self) -> Future[float]:
        """The coordinator's answer to a client asking how far the run is."""
        answer: Future[float] = Future()
        answer.set_result(self.coordinator.run_elapsed_s())
        return answer

    def handle(self, client_id: int) -> LocalHandle:
        return LocalHandle(self.clients[client_id])

    def start(self) -> None:
        self.loop.start()
        self.coordinator.start_clients()

    def join(self, count: int, first_round: int | None = None) -> list[int]:
        """Splice ``count`` standby clients into the running ring."""
        ids = self.standby(count)
        self.admit(ids, first_round)
        return ids

    def standby(self, count: int) -> list[int]:
        """Up to ``count`` clients not in the run yet."""
        return [c for c in self.clients if c not in self.admitted][:count]

    def admit(self, clients: Sequence[int], first_round: int | None = None) -> None:
        for client_id in clients:
            self.admitted.add(client_id)
            self.coordinator.admit(client_id, self.handle(client_id), "local", first_round)

    def kill(self, client_id: int) -> None:
        """The client's process dies now."""
        self.clients[client_id].kill()

    def wait(self, timeout_s: float) -> dict[str, Any]:
        """Until every live member is done or the run stopped, carrying out the fault
        plan's joins as they fall due; the coordinator's progress."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.coordinator.progress()
            config = self.config
            carry_out(
                self, config.faults, state.round, state.newest, self.faults_applied,
                config.experiment.rounds,
            )  # fmt: skip
            if state.finished or state.stopped:
                return state
            time.sleep(0.02)
        raise TimeoutError(f"ring not done in {timeout_s}s: {self.coordinator.progress()}")

    def run(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Start, wait for the end, and return the run's summary."""
        started = time.monotonic()
        self.start()
        try:
            self.wait(timeout_s)
        finally:
            self.close()
        with self.coordinator.lock:
            return self.coordinator.summary(time.monotonic() - started)

    def close(self) -> None:
        """Stop the clients and wait out the coordinator's loop, so that nothing writes
        into the output folder once this returns."""
        self.stopping.set()
        for client in self.clients.values():
            client.kill()
            client.calls.shutdown(wait=False, cancel_futures=True)
        if self.loop.is_alive():
            self.loop.join()

    def _reconcile(self) -> None:
        while not self.stopping.is_set():
            self.coordinator.reconcile()
            self.stopping.wait(0.02)


def _failed(error: BaseException) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(error)
    return future
