"""A running experiment as the driver holds it: its actors, and how to add clients later."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ring_actors.config import Config
from ring_actors.data.partition import ClientSplit
from ring_actors.preflight.admission import client_gb, node_memory
from ring_actors.runtime.actor_names import actor_name
from ring_actors.runtime.client_actor import CONCURRENCY_GROUPS, ClientActor
from ring_actors.runtime.client_starts import Started, start_clients, start_width
from ring_actors.runtime.follow import ask
from ring_actors.runtime.placement import Placement
from ring_actors.runtime.slot_math import slot_limit
from ring_actors.runtime.slots import SlotPool, node_resources, pool_name
from ring_actors.runtime.worker_deaths import quiet_deaths_in, quiet_deaths_of
from ring_actors.runtime.worker_env import actor_options
from ring_actors.storage.run_folder import RunFolder
from ring_actors.timeouts import LaunchTimeouts, Timeouts

CLIENT = ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(ClientActor)
SLOT_POOL = ray.remote(SlotPool)


def has_room(per_client_gb: float) -> bool:
    """Whether this node has the memory for one more client process right now."""
    memory = node_memory()
    return memory is None or memory.usable_gb >= per_client_gb


@dataclass
class Experiment:
    """A running experiment: its actors, and what it needs to add clients later.

    The driver API for tests and notebooks: ``join(k)`` splices ``k`` standby clients into
    the running ring, each with a data partition of its own.
    """

    config: Config
    output_dir: Path
    coordinator: ray.actor.ActorHandle
    clients: dict[int, ray.actor.ActorHandle]
    placement: dict[int, Placement]
    client_options: dict[str, Any]  # Ray actor options of every client
    data_ref: ray.ObjectRef
    splits: list[ClientSplit]
    global_test_ref: ray.ObjectRef  # the Global-T images and labels, shared by every client
    run_key: str
    resume: bool = False
    admitted: set[int] = field(default_factory=set)
    slot_pools: dict[str, ray.actor.ActorHandle] = field(default_factory=dict)

    @property
    def timeouts(self) -> Timeouts:
        return Timeouts.from_schedule(self.config.schedule, self.config.tracking.give_up_s)

    def create_clients(self, ids: list[int]) -> Started:
        """Start client actors for ``ids`` in waves and record where they landed.

        Returns what was built and what was not; ``launch`` applies the failure policy.
        """
        state_dir = str(RunFolder(self.output_dir).clients)

        def build(i: int) -> ray.actor.ActorHandle:
            return CLIENT.options(
                **self.client_options, name=actor_name(self.run_key, f"client-{i}")
            ).remote(
                i,
                self.config,
                self.data_ref,
                self.splits[i],
                self.global_test_ref,
                self.coordinator,
                state_dir,
                self.run_key,
                self.resume,
            )

        per_client = client_gb(self.config)
        started = start_clients(
            ids,
            build,
            LaunchTimeouts.from_clients(self.config.clients),
            start_width(ray.cluster_resources().get("CPU", 1)),
            room=lambda: has_room(per_client),
        )
        self.clients.update(started.handles)
        self.placement.update(started.facts)
        quiet_deaths_of(facts.pid for facts in started.facts.values())  # the run handles them
        quiet_deaths_in(self.run_key)  # and the processes Ray restarts them in
        self.start_slot_pools()
        return started

    def start_slot_pools(self) -> None:
        """One compute-slot pool on every node that hosts clients (once per node)."""
        clients = self.config.clients
        for node_id in sorted({facts.node_id for facts in self.placement.values()}):
            if node_id in self.slot_pools:
                continue
            node = node_resources(node_id)
            limit = slot_limit(clients.concurrency, clients.slots_per_gpu, clients.num_gpus, node)
            self.slot_pools[node_id] = SLOT_POOL.options(
                name=pool_name(self.run_key, node_id),
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                **actor_options(),
            ).remote(limit, order=clients.slot_order)
        # Not awaited: a client finds its pool by name and its first request waits for it.

    def join(self, count: int, first_round: int | None = None) -> list[int]:
        """Add ``count`` clients to the running ring; returns their ids.

        They come from the standby pool started at launch (the fault plan's joiners and
        ``clients.reserve``), so a join costs no process start. They first train
        ``first_round`` or, if the ring may have begun it, the earliest round it cannot have.
        """
        ids = self.standby(count)
        self.admit(ids, first_round)
        return ids

    def standby(self, count: int) -> list[int]:
        """The next ``count`` started clients not in the run yet."""
        ids = [i for i in self.placement if i not in self.admitted][:count]
        if len(ids) < count:
            raise ValueError(
                f"join({count}): only {len(ids)} clients in standby; raise clients.reserve "
                "(or declare the joins in the config's faults) so each has a data partition"
            )
        return ids

    def admit(self, clients: Sequence[int], first_round: int | None = None) -> None:
        """Splice the standby ``clients`` into the running ring (a client already in it
        stays as it is: the coordinator's admission is idempotent)."""
        for i in clients:
            self.admitted.add(i)
            node = self.placement[i].node_id
            call = self.coordinator.admit.remote(i, self.clients[i], node, first_round)
            ask(self, call, self.timeouts.control_s)

    def kill_coordinator(self) -> None:
        """Kill the coordinator; Ray restarts it and it recovers from its checkpoint."""
        ray.kill(self.coordinator, no_restart=False)

    def kill_nodes_of(self, clients: Sequence[int]) -> None:
        """Kill every client on the nodes that host ``clients``, as a node failure would."""
        nodes = {self.placement[c].node_id for c in clients}
        doomed = [c for c, facts in self.placement.items() if facts.node_id in nodes]
        for client_id in doomed:
            ray.kill(self.clients[client_id], no_restart=True)
