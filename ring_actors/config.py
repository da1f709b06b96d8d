"""Typed experiment config: a YAML file plus dotted overrides, validated before any actor starts."""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
import yaml

from ring_actors.algorithms import Algorithm, AlgorithmOptions
from ring_actors.algorithms.drdfl import DRDFLOptions
from ring_actors.data.sources import DATASETS, dataset_facts
from ring_actors.plugin_paths import (
    OrPlugin,
    PluginError,
    build_plugin_backbone,
    is_plugin_path,
    resolve_dataset,
)
from ring_actors.plugins import known_names, resolve_algorithm


class ConfigError(ValueError):
    """A config key is unknown or its value is not allowed."""


def _number_or_text(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _is_path_component(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name)) and name not in (".", "..")


def _check(ok: bool, key: str, allowed: str, value: Any = ...) -> None:
    if not ok:
        got = "" if value is ... else f", got {value!r}"
        raise ConfigError(f"{key}: must be {allowed}{got}")


@dataclass(frozen=True)
class ExperimentSection:
    name: str = "quickstart"
    seed: int = 0
    rounds: int = 10

    def __post_init__(self) -> None:
        _check(self.rounds >= 1, "experiment.rounds", "an integer >= 1")
        _check(0 <= self.seed < 2**32, "experiment.seed", "an integer in [0, 2**32)", self.seed)
        _check(
            _is_path_component(self.name),
            "experiment.name",
            "a name usable as one folder name (letters, digits, '.', '_', '-'; not '.' or '..')",
            self.name,
        )


@dataclass(frozen=True)
class PartitionSection:
    kind: Literal["iid", "dirichlet", "shard"] = "shard"
    beta: float = 0.5
    classes_per_client: int = 2
    min_size: int = 10
    # Clients that join later draw from these classes: the same pool as the first clients,
    # or the half of the classes the first clients never see (agnostic newcomers).
    joiner_classes: Literal["all", "other_half"] = "all"

    def __post_init__(self) -> None:
        _check(self.beta > 0, "data.partition.beta", "a number > 0")
        _check(self.classes_per_client >= 1, "data.partition.classes_per_client", "an int >= 1")
        _check(self.min_size >= 0, "data.partition.min_size", "an int >= 0")


@dataclass(frozen=True)
class DataSection:
    dataset: str = "fashion-mnist"
    root: str | None = None
    download: bool = True
    # Caps each client's training set: small, fast runs for tests and smoke checks.
    max_train_per_client: int | None = None
    partition: PartitionSection = field(default_factory=PartitionSection)

    def __post_init__(self) -> None:
        choices = f"one of {', '.join(DATASETS)}, or module:function of your own loader"
        if is_plugin_path(self.dataset):
            try:
                resolve_dataset(self.dataset)
            except PluginError as err:
                raise ConfigError(f"data.dataset: {err}; must be {choices}") from err
        else:
            _check(self.dataset in DATASETS, "data.dataset", choices, self.dataset)
        cap = self.max_train_per_client
        _check(cap is None or cap >= 1, "data.max_train_per_client", "null or an int >= 1")


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
    # Every client saves its private state after each round, so a crashed client or a
    # whole run whose driver died (``jobs.train --resume RUN_DIR``) continues from there.
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
    # How a newcomer (a joiner, or a restarted client without a checkpoint) starts: from its
    # predecessor's hand-off through the method's ``init_from``, as the papers do, or
    # ``fresh``, the ablation that shows what the hand-off is worth.
    join_start: Literal["hand_off", "fresh"] = "hand_off"

    def __post_init__(self) -> None:
        _check(
            self.concurrency == "auto" or self.concurrency >= 1,
            "clients.concurrency",
            "'auto' or an int >= 1",
            self.concurrency,
        )
        _check(self.slots_per_gpu >= 1, "clients.slots_per_gpu", "an int >= 1", self.slots_per_gpu)
        _check(self.start_timeout_s > 0, "clients.start_timeout_s", "a number > 0")
        _check(self.reserve >= 0, "clients.reserve", "an int >= 0", self.reserve)
        _check(self.count >= 2, "clients.count", "an int >= 2 (a ring needs two clients)")
        _check(self.num_cpus > 0, "clients.num_cpus", "a number > 0 (fractions allowed)")
        _check(0 <= self.num_gpus <= 1, "clients.num_gpus", "a fraction in [0, 1]")
        _check(self.local_epochs >= 1, "clients.local_epochs", "an int >= 1")
        _check(self.batch_size >= 1, "clients.batch_size", "an int >= 1")
        _check(self.max_restarts >= 0, "clients.max_restarts", "an int >= 0", self.max_restarts)


@dataclass(frozen=True)
class AlgorithmSection:
    """``name`` picks the method; every other key is one of that method's options."""

    name: str = "drdfl"
    options: AlgorithmOptions = field(default_factory=DRDFLOptions)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **dataclasses.asdict(self.options)}


@dataclass(frozen=True)
class TopologySection:
    """Who sends to whom among the live members; the coordinator owns the membership."""

    kind: Literal["ring", "bidirectional_ring", "dynamic", "full", "exponential", "graph"] = "ring"
    degree: int = 2  # dynamic: peers each client listens to per round
    resample_every: int = 1  # dynamic: rounds between re-draws of the peer sets
    edges: str | None = None  # graph: a file of "sender receiver" lines (client ids)

    def __post_init__(self) -> None:
        _check(self.degree >= 1, "topology.degree", "an int >= 1", self.degree)
        _check(self.resample_every >= 1, "topology.resample_every", "an int >= 1")
        if self.kind == "graph":
            _check(self.edges is not None, "topology.edges", "a path when kind is 'graph'")
            from topologies.graph import read_edges

            try:  # read here, so a missing or malformed file stops the run before it starts
                read_edges(self.edges)
            except (OSError, ValueError) as err:
                raise ConfigError(f"topology.edges: {err}") from err


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
    max_payload_bytes: int = 2**31  # a larger payload is refused before it is merged

    def __post_init__(self) -> None:
        _check(self.hop_timeout_s > 0, "schedule.hop_timeout_s", "a number > 0")
        _check(self.max_staleness >= 0, "schedule.max_staleness", "an int >= 0")
        _check(self.heartbeat_s > 0, "schedule.heartbeat_s", "a number > 0")
        _check(self.stall_hops >= 2, "schedule.stall_hops", "a number >= 2", self.stall_hops)
        _check(self.max_payload_bytes > 0, "schedule.max_payload_bytes", "an int > 0")


@dataclass(frozen=True)
class EvalSection:
    every: int = 1
    # Global-T on a fixed seeded subset of the union of test splits (null: the whole union):
    # every client evaluates the global set, so on small machines it dominates a round.
    global_max_samples: int | None = None

    def __post_init__(self) -> None:
        _check(self.every >= 1, "eval.every", "an int >= 1", self.every)
        cap = self.global_max_samples
        _check(cap is None or cap >= 1, "eval.global_max_samples", "null or an int >= 1", cap)


@dataclass(frozen=True)
class TrackingSection:
    uri: str | None = None
    experiment: str | None = None
    # The clients' checkpoints hold their private models, which the methods promise never
    # leave a client: they are uploaded to MLflow only when this says so.
    upload_checkpoints: bool = False
    # An MLflow run this run is nested under (a sweep's parent run).
    parent_run_id: str | None = None


@dataclass(frozen=True)
class RaySection:
    address: str | None = None
    dashboard: bool = False  # Ray's dashboard on a local Ray (a cluster has its own setting)
    # Local folders or .py files shipped to every worker (your own methods, models, data);
    # a Ray Job's --working-dir reaches them as well.
    py_modules: tuple[str, ...] = ()


FAULT_ACTIONS = ("crash", "hang", "slow", "error", "join", "kill_node", "kill_coordinator")


@dataclass(frozen=True)
class FaultSection:
    """One fault-plan entry, applied once the ring reaches ``at_round``.

    ``crash``: these clients' processes exit at the start of that round. ``hang``: they freeze
    (the whole process, heartbeats included) for ``for_s`` seconds. ``slow``: they sleep
    ``delay_s`` every round from then on. ``error``: their method raises in that round, as a
    bug would, and ``schedule.on_client_error`` decides what follows. ``join``: that many new
    clients (with data partitions of their own) are spliced into the running ring before it
    begins that round, which is the first they train. ``kill_node``: every client
    on the node that hosts each listed client dies at once. ``kill_coordinator``: the
    coordinator is killed; Ray restarts it and it recovers from its checkpoint.
    """

    at_round: int
    crash: tuple[int, ...] = ()
    hang: tuple[int, ...] = ()
    for_s: float = 0.0
    slow: tuple[int, ...] = ()
    delay_s: float = 0.0
    error: tuple[int, ...] = ()
    join: int = 0
    kill_node: tuple[int, ...] = ()
    kill_coordinator: bool = False

    def __post_init__(self) -> None:
        _check(self.at_round >= 0, "faults[].at_round", "an int >= 0", self.at_round)
        actions = [name for name in FAULT_ACTIONS if getattr(self, name)]
        allowed = "an entry with exactly one of: " + ", ".join(FAULT_ACTIONS)
        _check(len(actions) == 1, "faults[]", allowed, actions)
        if self.slow:
            _check(self.delay_s > 0, "faults[].delay_s", "a number > 0", self.delay_s)
        if self.hang:
            _check(self.for_s > 0, "faults[].for_s", "a number > 0", self.for_s)
        _check(self.for_s >= 0, "faults[].for_s", "a number >= 0", self.for_s)
        _check(self.delay_s >= 0, "faults[].delay_s", "a number >= 0", self.delay_s)
        _check(self.join >= 0, "faults[].join", "an int >= 0 (clients joining)", self.join)


@dataclass(frozen=True)
class Config:
    experiment: ExperimentSection = field(default_factory=ExperimentSection)
    data: DataSection = field(default_factory=DataSection)
    clients: ClientsSection = field(default_factory=ClientsSection)
    algorithm: AlgorithmSection = field(default_factory=AlgorithmSection)
    topology: TopologySection = field(default_factory=TopologySection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    eval: EvalSection = field(default_factory=EvalSection)
    tracking: TrackingSection = field(default_factory=TrackingSection)
    ray: RaySection = field(default_factory=RaySection)
    faults: tuple[FaultSection, ...] = ()

    def __post_init__(self) -> None:
        for entry in self.faults:
            for action in ("crash", "hang", "slow", "error", "kill_node"):
                bad = [c for c in getattr(entry, action) if not 0 <= c < self.total_clients]
                ids = f"client ids in [0, {self.total_clients})"
                _check(not bad, f"faults[].{action}", ids, bad)

    @property
    def total_clients(self) -> int:
        """Clients at the start plus every client the fault plan or a driver lets join."""
        return self.clients.count + self.clients.reserve + sum(e.join for e in self.faults)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict, as written to ``config.yaml`` and logged as MLflow params."""
        out = dataclasses.asdict(self)
        out["algorithm"] = self.algorithm.to_dict()
        return _plain(out)


def _plain(value: Any) -> Any:
    """Tuples as lists, all the way down: what YAML and MLflow params read back alike."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *marks = typing.get_args(tp)
        plugins = [m.what for m in marks if isinstance(m, OrPlugin)]
        return ", or ".join([_describe(base), *plugins])
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """``value`` as type ``tp``, or a ConfigError naming ``key`` and what is allowed."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _coerce_or_plugin(value, tp, key)
    if origin is Literal:
        _check(value in typing.get_args(tp), key, _describe(tp), value)
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _coerce(value, option, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: must be {_describe(tp)}, got {value!r}")
    if tp is type(None):
        _check(value is None, key, "null")
        return None
    if origin is tuple:
        _check(
            isinstance(value, Sequence) and not isinstance(value, str), key, _describe(tp), value
        )
        item = typing.get_args(tp)[0]
        return tuple(_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        _check(isinstance(value, Mapping), key, "a mapping of keys", value)
        return _build(tp, value, key)
    if tp is bool:
        _check(isinstance(value, bool), key, "true or false", value)
        return value
    if tp is int:
        _check(isinstance(value, int) and not isinstance(value, bool), key, "an integer", value)
        return value
    if tp is float:
        if isinstance(value, str):  # YAML reads 1e-3 (no dot) as a string
            value = _number_or_text(value)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        _check(ok and math.isfinite(value), key, "a finite number", value)
        return float(value)
    if tp is str:
        _check(isinstance(value, str), key, "a string", value)
        return value
    raise ConfigError(f"{key}: unsupported type {tp!r}")


def _coerce_or_plugin(value: Any, tp: Any, key: str) -> Any:
    """A ``module:Name`` value checked by the field's :class:`OrPlugin`, else the plain type."""
    base, *marks = typing.get_args(tp)
    plugin = next((m for m in marks if isinstance(m, OrPlugin)), None)
    if plugin is None or not is_plugin_path(value):
        try:
            return _coerce(value, base, key)
        except ConfigError:
            raise ConfigError(f"{key}: must be {_describe(tp)}, got {value!r}") from None
    try:
        plugin.resolve(value)
    except PluginError as err:
        raise ConfigError(f"{key}: {err}; must be {_describe(tp)}") from err
    return value


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names), key=str)  # YAML keys need not be strings
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown key {where}{unknown[0]}; allowed keys here: {', '.join(names)}")
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    for name in required:
        _check(name in data, f"{prefix}.{name}" if prefix else name, "given (it is required)")
    kwargs = {}
    for name in names:
        if name in data:
            key = f"{prefix}.{name}" if prefix else name
            kwargs[name] = _coerce(data[name], hints[name], key)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{prefix}.{err}" if prefix else str(err)) from err


def _method_sections(data: Mapping[Any, Any], chosen: str) -> dict[str, Any]:
    """The keys under ``algorithm`` that are a method's own section rather than an option."""
    methods = {*known_names(), chosen}
    return {k: v for k, v in data.items() if isinstance(k, str) and (k in methods or ":" in k)}


def _method_choices() -> str:
    return f"one of {', '.join(known_names())}, or module:Class of your own method"


def _resolve(name: str, key: str) -> type[Algorithm]:
    try:
        return resolve_algorithm(name)
    except PluginError as err:
        raise ConfigError(f"{key}: {err}; must be {_method_choices()}") from err


def _build_algorithm(data: Mapping[str, Any]) -> AlgorithmSection:
    """The chosen method's options: the keys beside ``name``, then its own section.

    A section named after a method (``algorithm: {dfedavg: {lr: 0.01}}``, or
    ``"my_module:MyMethod": {...}``) holds that method's options; every section is checked
    against its method, and only the chosen one's applies, over the keys beside ``name``.
    """
    _check(isinstance(data, Mapping), "algorithm", "a mapping of keys")
    name = data.get("name", AlgorithmSection.name)
    _check(isinstance(name, str), "algorithm.name", _method_choices(), name)
    method = _resolve(name, "algorithm.name")
    sections = _method_sections(data, name)
    for other, section in sections.items():
        key = f"algorithm.{other}"
        _check(isinstance(section, Mapping), key, f"a mapping of {other}'s options", section)
        _build(_resolve(other, key).Options, section, key)
    own = {k: v for k, v in data.items() if k != "name" and k not in sections}
    own.update(sections.get(name, {}))
    return AlgorithmSection(name=name, options=_build(method.Options, own, "algorithm"))


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Validate a nested mapping into a :class:`Config`."""
    data = dict(data or {})
    algorithm = _build_algorithm(data.pop("algorithm", {}) or {})
    config = dataclasses.replace(_build(Config, data, ""), algorithm=algorithm)
    _try_plugin_backbone(config)
    return config


def _try_plugin_backbone(config: Config) -> None:
    """For a built-in dataset the images' shape and classes are known without reading data,
    so a backbone of one's own is checked with the config; with a loader of one's own,
    ``--dry-run`` and ``launch`` check it once the data is loaded."""
    if not is_plugin_path(config.data.dataset):
        facts = dataset_facts(config.data.dataset, config.data.root)
        check_backbone_for(config, facts["input_shape"], facts["num_classes"])


def check_backbone_for(config: Config, input_shape: tuple[int, int, int], num_classes: int) -> None:
    """Build a backbone of one's own once for these images, so a broken contract stops the
    run before any actor starts rather than in every client."""
    backbone = getattr(config.algorithm.options, "backbone", None)
    if not is_plugin_path(backbone):
        return
    with torch.random.fork_rng(devices=[]):  # checking leaves the global RNG alone
        try:
            build_plugin_backbone(backbone, input_shape, num_classes)
        except PluginError as err:
            raise ConfigError(f"algorithm.backbone: {err}") from err


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` into its path and a YAML-typed value (``3`` int, ``null`` None, ...)."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected dotted.key=value")
    return key.strip().split("."), _yaml(raw, f"override {key}") if raw.strip() else None


def _yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not valid YAML ({str(err).splitlines()[0]})") from err


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``dotted.key=value`` set."""
    merged = yaml.safe_load(yaml.safe_dump(data)) or {}
    for text in overrides:
        path, value = parse_override(text)
        node = merged
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            _check(isinstance(child, dict), ".".join(path), "a key inside a mapping")
            node = child
        node[path[-1]] = value
    return merged


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Read ``path`` (YAML; none means defaults), apply overrides, and validate.

    A file's setting serves any method. Under ``algorithm``, a section named after a method
    holds that method's options, and the keys beside ``name`` apply to the chosen method.
    When the overrides choose another method than the file's, the file's keys beside
    ``name`` stay behind (they were its method's), except the setting's ``backbone``. An
    option given on the command line (``algorithm.lr=0.05``) beats the chosen method's
    section in the file.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = _yaml(Path(path).read_text(), str(path)) or {}
        _check(isinstance(data, dict), str(path), "a YAML mapping at the top level")
    merged = apply_overrides(data, overrides)
    return config_from_dict(_for_chosen_method(data, merged, overrides))


SETTING_OPTIONS = ("name", "backbone")  # options that describe the setting, not the method


def _for_chosen_method(
    data: Mapping[str, Any], merged: dict[str, Any], overrides: Sequence[str]
) -> dict[str, Any]:
    """``merged`` with its ``algorithm`` keys as :func:`load_config` says the method takes them."""
    after = merged.get("algorithm")
    name = after.get("name", AlgorithmSection.name) if isinstance(after, dict) else None
    if not isinstance(name, str):
        return merged  # config_from_dict names what is wrong
    before = data.get("algorithm")
    before = before if isinstance(before, Mapping) else {}
    sections = _method_sections(after, name)
    paths = [parse_override(o)[0] for o in overrides]
    given = {p[1] for p in paths if len(p) == 2 and p[0] == "algorithm"}
    if ["algorithm"] in paths:  # the whole mapping came from the command line
        given |= set(after)
    given -= set(sections)
    kept = dict(after)
    if name != before.get("name", AlgorithmSection.name):
        kept = {k: v for k, v in after.items() if k in {*SETTING_OPTIONS, *sections, *given}}
    own = kept.get(name)
    if isinstance(own, dict):
        kept[name] = {k: v for k, v in own.items() if k not in given}
    return {**merged, "algorithm": kept}
