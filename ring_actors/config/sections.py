"""The config's sections: frozen dataclasses whose fields are the keys, each checked when built."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ring_actors.config.checks import ConfigError, check, is_path_component
from ring_actors.config.persistence import CheckpointSection, TrackingSection
from ring_actors.faults.plan import CLIENT_FAULT_ACTIONS, FaultSection
from ring_actors.heterogeneity.section import HeterogeneitySection

if TYPE_CHECKING:  # the methods (and torch) are imported where options are read, not here
    from ring_actors.algorithms import AlgorithmOptions


@dataclass(frozen=True)
class ExperimentSection:
    name: str = "quickstart"
    seed: int = 0
    rounds: int = 10
    # Wall seconds from the start of each client's round loop: a client starts no round
    # after it, so clients do as many rounds as they can (at most ``rounds``). null: no limit.
    time_budget_s: float | None = None

    def __post_init__(self) -> None:
        check(self.rounds >= 1, "experiment.rounds", "an integer >= 1")
        budget = self.time_budget_s
        check(budget is None or budget > 0, "experiment.time_budget_s", "null or a number > 0")
        check(0 <= self.seed < 2**32, "experiment.seed", "an integer in [0, 2**32)", self.seed)
        check(
            is_path_component(self.name),
            "experiment.name",
            "a name usable as one folder name (letters, digits, '.', '_', '-'; not '.' or '..')",
            self.name,
        )


@dataclass(frozen=True)
class PartitionSection:
    # "file": the exact split a run wrote (its partition.json), read from ``path``.
    kind: Literal["iid", "dirichlet", "shard", "file"] = "shard"
    path: str | None = None
    beta: float = 0.5
    classes_per_client: int = 2
    min_size: int = 10
    # Clients that join later draw from these classes: the same pool as the first clients,
    # or the half of the classes the first clients never see (agnostic newcomers).
    joiner_classes: Literal["all", "other_half"] = "all"

    def __post_init__(self) -> None:
        check(self.beta > 0, "data.partition.beta", "a number > 0")
        check(self.classes_per_client >= 1, "data.partition.classes_per_client", "an int >= 1")
        check(self.min_size >= 0, "data.partition.min_size", "an int >= 0")
        check(
            self.kind != "file" or bool(self.path),
            "data.partition.path",
            "the path of a partition file (a run's partition.json) when data.partition.kind "
            "is 'file'",
            self.path,
        )


@dataclass(frozen=True)
class DataSection:
    dataset: str = "fashion-mnist"
    root: str | None = None
    download: bool = True
    # Caps each client's training set: small, fast runs for tests and smoke checks.
    max_train_per_client: int | None = None
    partition: PartitionSection = field(default_factory=PartitionSection)

    def __post_init__(self) -> None:
        check_dataset_name(self.dataset)
        cap = self.max_train_per_client
        check(cap is None or cap >= 1, "data.max_train_per_client", "null or an int >= 1")


def check_dataset_name(name: str) -> None:
    """A built-in dataset, or a loader of one's own that imports: the registry and the
    plug-in are read here, when a config names one, not when the config is imported."""
    from ring_actors.data.sources import DATASETS
    from ring_actors.plugins.paths import PluginError, is_plugin_path, resolve_dataset

    choices = f"one of {', '.join(DATASETS)}, or module:function of your own loader"
    if not is_plugin_path(name):
        check(name in DATASETS, "data.dataset", choices, name)
        return
    try:
        resolve_dataset(name)
    except PluginError as err:
        raise ConfigError(f"data.dataset: {err}; must be {choices}") from err


@dataclass(frozen=True)
class ClientsSection:
    count: int = 8
    num_cpus: float = 0.25
    num_gpus: float = 0.0
    local_epochs: int = 1
    batch_size: int = 64
    placement: Literal["spread", "pack"] = "spread"
    # Ray restarts a crashed client this many times; it comes back from its last
    # checkpoint and is spliced in again. 0: it stays out.
    max_restarts: int = 0
    # Every client saves its private state (how often: the ``checkpoint`` section), so a
    # crashed client or a whole run whose driver died (``jobs.train --resume RUN_DIR``)
    # continues from there.
    checkpoint: bool = True
    # Seconds to wait for every client actor to be placed and constructed; a cluster that
    # cannot fit them fails the run with the demand and the capacity instead of waiting forever.
    start_timeout_s: float = 300.0
    # Clients in standby, each with a data partition, for joins a driver makes through
    # ``Experiment.join`` (the fault plan's joins have their own).
    reserve: int = 0
    # Clients of one node that train or evaluate at once (the rest wait for a slot without
    # using CPU): ``auto`` is the node's cores, or its GPUs x ``slots_per_gpu`` for GPU
    # clients; an int sets it per node. Torch threads per client: the node's cores / slots.
    concurrency: int | Literal["auto"] = "auto"
    slots_per_gpu: int = 2
    # Who computes next when clients wait for a slot: ``oldest_round`` (the lowest round,
    # then the longest compute as last round's took, then first come), ``first_come``, or
    # ``least_recent`` (the client served longest ago; ring_actors/runtime/slots.py says when
    # each pays).
    slot_order: Literal["oldest_round", "first_come", "least_recent"] = "oldest_round"
    # A client that gives its slot back moves its optimiser state to host memory until it
    # next computes (``auto``: on a GPU only); its allocator's cache is returned either way.
    offload_idle: bool | Literal["auto"] = "auto"
    # Where the state moves, a method whose networks hold at least this many MB moves its
    # parameters to host memory too between calls into it (null: never); the small ``cnn``
    # (8 MB) stays, ``resnet18`` (43 MB) moves.
    offload_parameters_mb: float | None = 32.0
    # How a newcomer (a joiner, or a restarted client without a checkpoint) starts: from its
    # predecessor's hand-off through the method's ``init_from``, as the papers do, or
    # ``fresh``, the ablation that shows what the hand-off is worth.
    join_start: Literal["hand_off", "fresh"] = "hand_off"
    # A client whose actor still cannot be built after its retries (runtime/client_starts.py):
    # ``stop`` ends the launch naming it; ``drop`` leaves it out, and the ring forms without it
    # (a resumed run always stops: its checkpoint expects every member back).
    on_launch_failure: Literal["stop", "drop"] = "stop"

    def __post_init__(self) -> None:
        check(
            self.concurrency == "auto" or self.concurrency >= 1,
            "clients.concurrency",
            "'auto' or an int >= 1",
            self.concurrency,
        )
        check(self.slots_per_gpu >= 1, "clients.slots_per_gpu", "an int >= 1", self.slots_per_gpu)
        check(self.start_timeout_s > 0, "clients.start_timeout_s", "a number > 0")
        check(self.reserve >= 0, "clients.reserve", "an int >= 0", self.reserve)
        check(self.count >= 2, "clients.count", "an int >= 2 (a ring needs two clients)")
        check(self.num_cpus > 0, "clients.num_cpus", "a number > 0 (fractions allowed)")
        check(0 <= self.num_gpus <= 1, "clients.num_gpus", "a fraction in [0, 1]")
        check(self.local_epochs >= 1, "clients.local_epochs", "an int >= 1")
        check(self.batch_size >= 1, "clients.batch_size", "an int >= 1")
        check(self.max_restarts >= 0, "clients.max_restarts", "an int >= 0", self.max_restarts)
        check(
            self.offload_parameters_mb is None or self.offload_parameters_mb >= 0,
            "clients.offload_parameters_mb",
            "null or a number of MB >= 0",
            self.offload_parameters_mb,
        )


DEFAULT_METHOD = "drdfl"


@dataclass(frozen=True)
class AlgorithmSection:
    """``name`` picks the method; every other key is one of that method's options.

    The options travel as plain data (``values``, every option given or defaulted) and are
    rebuilt as the method's options class where they are read: the coordinator and the slot
    pools, which never read them, never import the method's module, nor torch.
    """

    name: str = DEFAULT_METHOD
    values: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        options = self._build()  # checked where the section is made (the driver)
        object.__setattr__(self, "values", dataclasses.asdict(options))
        self.__dict__["options"] = options  # built already: the first read costs nothing

    @functools.cached_property
    def options(self) -> AlgorithmOptions:
        """The method's options object (importing the method, on first read in a process)."""
        return self._build()

    def _build(self) -> AlgorithmOptions:
        from ring_actors.config.coercion import build_section
        from ring_actors.config.methods import resolve_method

        method = resolve_method(self.name, "algorithm.name")
        return build_section(method.Options, self.values, "algorithm")

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "values": self.values}  # never the options object

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.values}


@dataclass(frozen=True)
class TopologySection:
    """Who sends to whom among the live members; the coordinator owns the membership."""

    kind: str = "ring"  # a name in ``topologies.TOPOLOGIES``
    degree: int = 2  # dynamic: peers each client listens to per round
    resample_every: int = 1  # dynamic: rounds between re-draws of the peer sets
    edges: str | None = None  # graph: a file of "sender receiver" lines (client ids)
    # dynamic: how strongly the draw prefers peers of similar speed (the view's seconds per
    # round); 0: uniform. A peer twice as slow or fast is 2 ** -similarity as likely.
    similarity: float = 0.0

    def __post_init__(self) -> None:
        from topologies import TOPOLOGIES  # the registry, read where a name is checked

        kinds = "one of " + ", ".join(repr(kind) for kind in TOPOLOGIES)
        check(self.kind in TOPOLOGIES, "topology.kind", kinds, self.kind)
        sim = self.similarity
        check(sim >= 0, "topology.similarity", "a number >= 0 (0: uniform draw)", sim)
        check(self.degree >= 1, "topology.degree", "an int >= 1", self.degree)
        check(self.resample_every >= 1, "topology.resample_every", "an int >= 1")
        if self.kind == "graph":
            check(self.edges is not None, "topology.edges", "a path when kind is 'graph'")
            from topologies.graph import read_edges

            try:  # read here, so a missing or malformed file stops the run before it starts
                read_edges(self.edges)
            except (OSError, ValueError) as err:
                raise ConfigError(f"topology.edges: {err}") from err


ExchangeMode = Literal["normal", "none", "noise"]
ChunkedLaps = Literal["auto", "always", "never"]
LapEngine = Literal["auto", "collective", "ring"]


@dataclass(frozen=True)
class ScheduleSection:
    mode: Literal["sync", "async"] = "sync"
    hop_timeout_s: float = 30.0
    max_staleness: int = 2
    heartbeat_s: float = 1.0
    # A client whose method raises (or goes non-finite): ``drop`` bypasses it as crashed and
    # the ring heals; ``stop`` ends the run within seconds, writing what exists.
    on_client_error: Literal["drop", "stop"] = "drop"
    # The run is stopped, with a diagnosis, once no member has finished a round for this
    # many hop timeouts.
    stall_hops: float = 30.0
    # A larger payload is refused before it is merged; null: derived from the model (a lap
    # token gathering every member's whole model, the largest any method sends).
    max_payload_bytes: int | None = None
    # A round waits at most this long for its in-neighbours, then merges whatever arrived
    # (a staleness bound in wall time): a slow member no longer paces the ring. null: wait
    # as the mode says, up to the hop timeout.
    max_wait_s: float | None = None
    # Persistent stragglers off the critical path: a member whose own round time (its round
    # less its wait for in-neighbours), as the median of its last ``straggler_window``
    # rounds, exceeds ``straggler_factor`` times the median member's is marked in the view,
    # and nobody waits for it (its pushes are merged when they come); it is unmarked once
    # it is back under. null: nobody is marked.
    straggler_factor: float | None = None
    straggler_window: int = 3
    # What a client merges of what it receives: ``normal``; ``none`` merges nothing and runs
    # no laps (every client alone: the isolation control); ``noise`` merges Gaussian noise
    # with each received floating tensor's mean and std (does what travels matter?).
    exchange: ExchangeMode = "normal"
    # How a ring lap goes: ``always`` as a chunked ring all-reduce (each member sends
    # 2(N-1) messages of a model's 1/N at once), ``never`` as one token (2(N-1) whole-model
    # hops one after another), ``auto`` in chunks when the lap's members are no more than
    # the cluster's CPUs: only members that step at once gain from the chunks, and where
    # they share cores the chunks' N-fold calls cost more than the token's bytes.
    chunked_laps: ChunkedLaps = "auto"
    # Who sums a lap: ``collective``, torch.distributed's gloo all-reduce among the lap's
    # members (one process group per membership epoch), falling back to the ring lap when a
    # member fails inside it; ``ring``, the ring lap over actor calls; ``auto``, the
    # collective where the members' contributions agree in layout, the ring lap otherwise
    # (a GENE-FL cluster's keys of its own), with no event for that expected fallback.
    lap_engine: LapEngine = "auto"

    def __post_init__(self) -> None:
        factor = self.straggler_factor
        allowed = "null (off) or a number > 1 (times the median member's round time)"
        check(factor is None or factor > 1, "schedule.straggler_factor", allowed, factor)
        window = self.straggler_window
        check(window >= 1, "schedule.straggler_window", "an int >= 1 (rounds)", window)
        wait = self.max_wait_s
        check(wait is None or wait >= 0, "schedule.max_wait_s", "null or a number >= 0", wait)
        check(self.hop_timeout_s > 0, "schedule.hop_timeout_s", "a number > 0")
        check(self.max_staleness >= 0, "schedule.max_staleness", "an int >= 0")
        check(self.heartbeat_s > 0, "schedule.heartbeat_s", "a number > 0")
        check(self.stall_hops >= 2, "schedule.stall_hops", "a number >= 2", self.stall_hops)
        check(
            self.max_payload_bytes is None or self.max_payload_bytes > 0,
            "schedule.max_payload_bytes",
            "null (derived from the model) or an int > 0",
        )


@dataclass(frozen=True)
class EvalSection:
    every: int = 1
    # Global-T on a fixed seeded subset of the union of test splits (null: the whole union):
    # every client evaluates the global set, so on small machines it dominates a round.
    global_max_samples: int | None = None
    # Local-T on a fixed seeded subset of each client's test split (null: all of it): a
    # client's split mirrors a share of the whole test set, thousands of images each round.
    local_max_samples: int | None = None
    # Also evaluate at the end of the first round after each multiple of this many wall
    # seconds (accuracy against time); null: by round only.
    every_s: float | None = None
    # Also evaluate each of the last this many rounds (figures averaged over a run's end).
    last_rounds: int = 1

    def __post_init__(self) -> None:
        check(self.every >= 1, "eval.every", "an int >= 1", self.every)
        check(self.last_rounds >= 1, "eval.last_rounds", "an int >= 1", self.last_rounds)
        check(self.every_s is None or self.every_s > 0, "eval.every_s", "null or a number > 0")
        cap = self.global_max_samples
        check(cap is None or cap >= 1, "eval.global_max_samples", "null or an int >= 1", cap)
        cap = self.local_max_samples
        check(cap is None or cap >= 1, "eval.local_max_samples", "null or an int >= 1", cap)


@dataclass(frozen=True)
class RaySection:
    address: str | None = None
    dashboard: bool = False  # Ray's dashboard on a local Ray (a cluster has its own setting)
    # Local folders or .py files shipped to every worker (your own methods, models, data);
    # a Ray Job's --working-dir reaches them as well.
    py_modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Config:
    experiment: ExperimentSection = field(default_factory=ExperimentSection)
    data: DataSection = field(default_factory=DataSection)
    clients: ClientsSection = field(default_factory=ClientsSection)
    algorithm: AlgorithmSection = field(default_factory=AlgorithmSection)
    topology: TopologySection = field(default_factory=TopologySection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    eval: EvalSection = field(default_factory=EvalSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    tracking: TrackingSection = field(default_factory=TrackingSection)
    ray: RaySection = field(default_factory=RaySection)
    faults: tuple[FaultSection, ...] = ()
    heterogeneity: HeterogeneitySection = field(default_factory=HeterogeneitySection)

    def __post_init__(self) -> None:
        self.heterogeneity.check_clients(self.total_clients)
        for entry in self.faults:
            for action in CLIENT_FAULT_ACTIONS:
                bad = [c for c in getattr(entry, action) if not 0 <= c < self.total_clients]
                ids = f"client ids in [0, {self.total_clients})"
                check(not bad, f"faults[].{action}", ids, bad)

    @property
    def total_clients(self) -> int:
        """Clients at the start plus every client the fault plan or a driver lets join."""
        return self.clients.count + self.clients.reserve + sum(e.join for e in self.faults)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict, as written to ``config.yaml`` and logged as MLflow params."""
        out = dataclasses.asdict(self)
        out["algorithm"] = self.algorithm.to_dict()
        return plain(out)


def plain(value: Any) -> Any:
    """Tuples as lists, all the way down: what YAML and MLflow params read back alike."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
