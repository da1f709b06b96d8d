"""ClientActor: the Ray shell of one client. It places the client (device, threads, slots),
builds its core, and has the core answer every call, as ``delivery/transport.py`` declares
them; the round loop lives in ``client/core.py``.

This module imports neither torch nor a method: Ray loads an actor's class in every process
that holds a handle to it, so the coordinator, which holds every client's, would otherwise
carry torch. The client's own process imports them when it builds its core.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import ray

from ring_actors.delivery.transport import (
    UNANSWERED,
    Call,
    ClientHandle,
    ControlLink,
    Reply,
    RunClock,
    forwarding,
    remote,
)
from ring_actors.faults.client_side import ProcessFaults, fail_start
from ring_actors.runtime.placement import Placement
from ring_actors.runtime.ray_rendezvous import RayRendezvous
from ring_actors.runtime.ray_transport import (
    RayClientHandle,
    answered_by_core,
    bounded,
    call_actor,
)
from ring_actors.runtime.slot_math import slot_limit, threads_per_slot
from ring_actors.runtime.slots import Slots, node_resources, pool_name
from ring_actors.runtime.worker_deaths import record_client_process
from ring_actors.runtime.worker_env import loaded_modules
from ring_actors.storage.run_folder import RunFolder
from ring_actors.timeouts import Timeouts

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ring_actors.config import Config
    from ring_actors.data.partition import ClientSplit
    from ring_actors.data.sources import DatasetArrays
    from ring_actors.delivery.transport import Readmission
    from ring_actors.delivery.view import View
    from ring_actors.delivery.wire import WirePayload

CONTROL_GROUP = "control"  # the coordinator's probes (``control`` calls), apart from receives
CONCURRENCY_GROUPS = {CONTROL_GROUP: 2}


def pick_device(num_gpus: float) -> torch.device:
    """The GPU Ray assigned to this actor, capped to its fraction; the CPU otherwise."""
    import torch

    if num_gpus > 0 and ray.get_gpu_ids() and torch.cuda.is_available():
        device = torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to our GPU
        torch.cuda.set_per_process_memory_fraction(min(1.0, num_gpus), device)
        return device
    return torch.device("cpu")


@forwarding(ControlLink, RunClock)
@dataclass(frozen=True)
class BoundedControlLink(ControlLink, RunClock):
    """The coordinator as a client's :class:`~ring_actors.delivery.transport.ControlLink`,
    every call that waits for its answer bounded by ``timeout_s`` (``TimeoutError`` past
    it): a coordinator being restarted must not hold a client's round loop for good."""

    actor: ray.actor.ActorHandle
    timeout_s: float

    def dispatch(self, name: str, call: Call, *args: Any, **kwargs: Any) -> Any:
        return call_actor(self.actor, name, call, args, kwargs, self.timeout_s)


def rejoin_until_answered(
    control: BoundedControlLink,
    timeouts: Timeouts,
    client_id: int,
    handle: ClientHandle,
    node_id: str,
    checkpoint_round: int | None,
) -> Readmission | None:
    """A restarted client's rejoin, asked again while the coordinator does not answer (it
    may be restarting too) until ``timeouts.control_give_up_s``. Past that the coordinator
    is gone (the driver ends the run): the TimeoutError says so."""
    unanswered: BaseException | None = None
    for _ in timeouts.control_attempts():  # each attempt bounded by the link's own timeout
        try:
            return control.rejoin(client_id, handle, node_id, checkpoint_round)
        except UNANSWERED as err:
            unanswered = err
    raise TimeoutError(
        f"client {client_id}: the coordinator did not answer its rejoin in "
        f"{timeouts.control_give_up_s:g} s"
    ) from unanswered


def was_restarted(context: ray.runtime_context.RuntimeContext) -> bool:
    """Whether Ray restarted this actor after a crash. Ray's own property reads a deprecated
    field of its own and so printed a deprecation warning from every client into the
    driver's terminal, with nothing a user could change: it is read with that warning off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(context.was_current_actor_reconstructed)


class ClientReadings(Protocol):
    """What the driver reads off a client actor, besides the calls of its peers and the
    coordinator (``ClientHandle``)."""

    @remote(Reply.ANSWER)
    def stats(self) -> dict:
        """Counters for tests and debugging."""


@answered_by_core(ClientHandle, ClientReadings, control_group=CONTROL_GROUP)
class ClientActor:
    """One client as a threaded Ray actor: calls answer on Ray's threads, training runs on
    the core's own thread. A client Ray restarts after a crash resumes from its checkpoint
    and asks the coordinator to splice it in again."""

    def __init__(
        self,
        client_id: int,
        config: Config,
        dataset: DatasetArrays,
        split: ClientSplit,
        global_test: tuple[np.ndarray, np.ndarray],
        coordinator: ray.actor.ActorHandle,
        state_dir: str,
        run_key: str,
        resume: bool = False,
    ) -> None:
        import torch

        from ring_actors.client.core import ClientCore
        from ring_actors.client.method_factory import build_algorithm, client_data
        from ring_actors.data.client_splits import evaluated_split

        record_client_process(run_key)  # its death, if it comes, is the run's to tell
        fail_start(config.faults, client_id, Path(state_dir))
        context = ray.get_runtime_context()
        clients = config.clients
        node = node_resources(context.get_node_id())
        limit = slot_limit(clients.concurrency, clients.slots_per_gpu, clients.num_gpus, node)
        torch.set_num_threads(threads_per_slot(limit, node))  # only slot holders compute
        device = pick_device(clients.num_gpus)
        timeouts = Timeouts.from_schedule(config.schedule)
        control = BoundedControlLink(coordinator, timeouts.client_control_s)
        saves = clients.checkpoint or clients.max_restarts > 0
        checkpoint = RunFolder.checkpoint_in(Path(state_dir), client_id) if saves else None
        self.core = ClientCore(
            client_id,
            config,
            build_algorithm(config, client_id, dataset.num_classes, dataset.input_shape, device),
            client_data(dataset, evaluated_split(config, split, client_id), global_test, device),
            control,
            slots=Slots(pool_name(run_key, context.get_node_id()), client_id, timeouts.slot_wait_s),
            faults=ProcessFaults(),
            checkpoint_path=checkpoint,
            run_clock=control.run_elapsed_s,
            cores=int(ray.cluster_resources().get("CPU", 1)),
            rendezvous=RayRendezvous(run_key),
        )
        if resume:
            self.core.load_checkpoint()
        elif was_restarted(context):
            restored = self.core.load_checkpoint()
            me = RayClientHandle(context.current_actor)
            node_id = context.get_node_id()
            back = rejoin_until_answered(control, timeouts, client_id, me, node_id, restored)
            if back is not None:  # started from the answer: no call to this process is lost
                self.core.set_view(back.view, bounded(back.handles, self.core.max_payload_bytes))
                self.core.start(back.first_round, back.joining)

    def describe(self) -> Placement:
        """Placement facts, returned once the actor is constructed."""
        import torch

        core = self.core
        return Placement(
            client=core.id,
            pid=os.getpid(),
            node_id=ray.get_runtime_context().get_node_id(),
            device=str(core.device),
            gpu_ids=tuple(str(g) for g in ray.get_gpu_ids()),
            torch_threads=torch.get_num_threads(),
            num_train=len(core.data.train),
            num_local_test=len(core.data.local_test),
        )

    def serve(self, round_: int, keys: tuple[str, ...]) -> WirePayload | None:
        """The answer's tensors travel as bytes."""
        from ring_actors.delivery.wire import to_wire

        answer = self.core.serve(round_, keys)
        return to_wire(answer) if answer is not None else None

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None:
        """Its pulls through the handles are bounded by what this client takes at most."""
        self.core.set_view(view, bounded(handles, self.core.max_payload_bytes))

    def loaded_modules(self) -> list[str]:
        return loaded_modules()
