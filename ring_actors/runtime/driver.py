"""Driver side: connect to Ray, place the coordinator and the clients, run, collect the summary."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import ray
import yaml
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ring_actors.config import Config, check_backbone_for
from ring_actors.coordinator.tracking import resolve_tracking_uri
from ring_actors.data.client_splits import global_test_set, split_for
from ring_actors.data.partition import ClientSplit
from ring_actors.data.partition_file import save_partition
from ring_actors.data.sources import DatasetArrays, load_dataset
from ring_actors.faults.plan import plan_lines
from ring_actors.plugins.paths import is_plugin_path
from ring_actors.preflight.admission import check_memory, node_memory
from ring_actors.preflight.capacity import fits, shortfall
from ring_actors.preflight.output_folder import (
    check_new,
    check_resumable,
    portable,
    remove_unstarted,
)
from ring_actors.preflight.ray_address import check_reachable
from ring_actors.runtime.actor_names import actor_name
from ring_actors.runtime.actor_stop import stop_actors
from ring_actors.runtime.client_starts import (
    LaunchError,
    settle,
)
from ring_actors.runtime.coordinator_actor import Coordinator
from ring_actors.runtime.experiment import Experiment
from ring_actors.runtime.follow import ask, wait_and_finalize
from ring_actors.runtime.progress_bar import progress_note
from ring_actors.runtime.signals import (
    RunInterrupted,
    signals_held,
    sigterm_as_ctrl_c,
    take_sigterm_back,
)
from ring_actors.runtime.worker_deaths import quiet_ray_notices
from ring_actors.runtime.worker_env import actor_options, job_runtime_env, start_local_ray
from ring_actors.storage.durable import write_atomic
from ring_actors.storage.redact import public_config, redact_uri
from ring_actors.storage.run_folder import RunFolder

log = logging.getLogger(__name__)
STOP_WAIT_S = 30.0  # a failed launch waits this long for its actors to end before cleaning up
# Ray's notice that a new local cluster uses token authentication, printed by every local run.
TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


class PlacementError(LaunchError):
    """The cluster cannot host every client the config asks for."""


def _placement_message(config: Config, pending: int, waited: bool = True) -> str:
    return shortfall(config, ray.cluster_resources(), pending, waited)


def check_capacity(config: Config) -> None:
    """Refuse at once a run that a fixed-size Ray instance can never fit."""
    if not fits(config, ray.cluster_resources()):
        raise PlacementError(_placement_message(config, config.total_clients, waited=False))


def connect_ray(
    address: str | None, dashboard: bool = False, py_modules: tuple[str, ...] = ()
) -> bool:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``); start a local Ray otherwise.

    A local Ray gets Ray's dashboard only when asked: its processes start slower than the
    ring's first round and hold more memory than two clients. ``py_modules`` (the user's own
    code) go to every worker with the job. True when this call started a local Ray, whose
    size is then fixed (no autoscaler).
    """
    quiet_ray_notices()
    if ray.is_initialized():
        if py_modules:
            log.warning("Ray was started elsewhere: pass ray.py_modules to its runtime_env")
        return False
    if address:
        check_reachable(address, "ray.address")
    elif address := os.environ.get("RAY_ADDRESS"):
        check_reachable(address, "RAY_ADDRESS")
    # Ray's own default joins the newest cluster `ray start` left on this machine, even
    # another user's: a run asked to go local gets a Ray of its own.
    local = {} if address else {"include_dashboard": dashboard}
    if not address:  # a local Ray keeps its token on this machine: no notice to read
        logging.getLogger(TOKEN_NOTICE_LOGGER).setLevel(logging.ERROR)
    env = job_runtime_env(py_modules)
    on_sigterm = signal.getsignal(signal.SIGTERM)
    join = ray.init if address else start_local_ray
    join(
        address=address or "local",
        log_to_driver=False,
        configure_logging=False,
        runtime_env=env,
        **local,
    )
    take_sigterm_back(on_sigterm)
    return address is None


def default_output_dir(config: Config) -> Path:
    """``runs/<name>-<algorithm>-<time>``, with a suffix when that run directory exists."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / portable(f"{config.experiment.name}-{config.algorithm.name}-{stamp}")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _load_and_split(config: Config) -> tuple[DatasetArrays, list[ClientSplit]]:
    """The dataset and every client's part of it (run beside Ray's start)."""
    dataset = load_dataset(config.data.dataset, config.data.root, config.data.download)
    check_backbone_for(config, dataset.input_shape, dataset.num_classes)
    return dataset, split_for(config, dataset)


def _start_coordinator(
    config: Config, output_dir: Path, resume: bool
) -> tuple[ray.actor.ActorHandle, str]:
    """The coordinator (not awaited: its first call waits for it) and the run's actor key."""
    run_key = uuid.uuid4().hex[:12]
    # The coordinator lives beside the driver and its checkpoint; Ray restarts it after a
    # crash and re-sends the calls that were in flight.
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    coordinator = (
        ray.remote(Coordinator)
        .options(
            num_cpus=0,
            max_concurrency=32,
            scheduling_strategy=here,
            name=actor_name(run_key, "coordinator"),
            max_restarts=-1,
            max_task_retries=-1,
            **actor_options(),
        )
        .remote(
            config,
            str(output_dir),
            resolve_tracking_uri(config.tracking.uri, Path.cwd()),
            run_key,
            resume,
        )
    )
    return coordinator, run_key


def _runs_here(address: str | None) -> bool:
    """Whether every actor of the run lands on this machine: a local Ray, or one node."""
    if ray.is_initialized():
        nodes = [node for node in ray.nodes() if node["Alive"]]
        return len(nodes) == 1 and nodes[0]["NodeID"] == ray.get_runtime_context().get_node_id()
    return not (address or os.environ.get("RAY_ADDRESS"))


def launch(config: Config, output_dir: Path | None = None, resume: bool = False) -> Experiment:
    """Load and split the data once, put it in the object store, and start every actor.

    A plan this node has not the memory for stops before anything starts. The data loads
    while Ray and the coordinator start. With ``resume`` the run in ``output_dir`` continues:
    the coordinator from its checkpoint, every client from its own.
    """
    if _runs_here(config.ray.address):
        check_memory(config, node_memory())
    output_dir = (output_dir or default_output_dir(config)).resolve()
    if resume:
        check_resumable(output_dir, config.experiment.rounds)
    else:
        check_new(output_dir)
    created = not output_dir.exists()
    try:
        return _launch(config, output_dir, resume)
    except BaseException:
        if not resume:  # a launch that never started leaves no run folder behind
            remove_unstarted(output_dir, created)
        raise


def _launch(config: Config, output_dir: Path, resume: bool) -> Experiment:
    """``launch`` once its output folder is known to be new or resumable."""
    if not resume:
        output_dir.mkdir(parents=True, exist_ok=True)
        public = public_config(config.to_dict())  # a resume passes a secret URI again
        write_atomic(RunFolder(output_dir).config, yaml.safe_dump(public, sort_keys=False))
    with ThreadPoolExecutor(1) as pool:
        progress_note(f"loading {config.data.dataset}")
        loading = pool.submit(_load_and_split, config)
        if is_plugin_path(config.data.dataset):
            # A loader of one's own tells the images' shape only once it ran: a backbone
            # that does not fit them stops the run before Ray or any actor starts.
            loading.result()
        if not ray.is_initialized():
            progress_note("starting Ray" if not config.ray.address else "connecting to Ray")
        if connect_ray(config.ray.address, config.ray.dashboard, config.ray.py_modules):
            check_capacity(config)
        coordinator, run_key = _start_coordinator(config, output_dir, resume)
        try:
            dataset, splits = loading.result()
        except BaseException:
            stop_actors([coordinator], wait_s=STOP_WAIT_S)
            raise
    if not resume:  # the exact split, for a later run or tool to reuse (data.partition.kind file)
        save_partition(RunFolder(output_dir).partition, splits, config.data.dataset)
    data_ref = ray.put(dataset)  # once; every client indexes its own part
    global_test_ref = ray.put(global_test_set(config, dataset, splits))
    client_options = dict(
        num_cpus=config.clients.num_cpus,
        num_gpus=config.clients.num_gpus,
        max_concurrency=8,
        max_restarts=config.clients.max_restarts,
        scheduling_strategy="SPREAD" if config.clients.placement == "spread" else "DEFAULT",
        **actor_options(),
    )
    experiment = Experiment(
        config,
        output_dir,
        coordinator,
        {},
        {},
        client_options,
        data_ref,
        splits,
        global_test_ref,
        run_key,
        resume,
    )
    try:
        progress_note(f"placing the coordinator and {config.total_clients} client actors")
        started = experiment.create_clients(list(range(config.total_clients)))
        unplaced = started.failures and started.timed_out == set(started.failures)
        if unplaced and (config.clients.on_launch_failure == "stop" or resume):
            raise PlacementError(_placement_message(config, len(started.timed_out)))
        dropped = settle(
            started, set(range(config.clients.count)), config.clients.on_launch_failure, resume
        )
        for i in range(config.total_clients if resume else config.clients.count):
            if i in dropped:
                continue
            node, handle = experiment.placement[i].node_id, experiment.clients[i]
            if resume:  # the members the checkpoint knows, joiners included
                wait_s = experiment.timeouts.control_s
                if ask(experiment, coordinator.adopt.remote(i, handle, node), wait_s):
                    experiment.admitted.add(i)
                continue
            ask(
                experiment,
                coordinator.register.remote(i, handle, node),
                experiment.timeouts.control_s,
            )
            experiment.admitted.add(i)
    except BaseException:
        # Nothing of a run that could not start stays on the cluster, nor writes into the
        # folder ``launch`` is about to remove.
        shutdown(experiment, wait_s=STOP_WAIT_S)
        raise
    return experiment


def describe_launch(experiment: Experiment) -> str:
    """What was started where: the cluster, the clients per node, the method, the outputs."""
    config = experiment.config
    resources = ray.cluster_resources()
    nodes: dict[str, list[int]] = {}
    for client_id, facts in sorted(experiment.placement.items()):
        nodes.setdefault(facts.node_id, []).append(client_id)
    lines = [
        f"cluster: {len(ray.nodes())} node(s), {resources.get('CPU', 0):g} CPUs, "
        f"{resources.get('GPU', 0):g} GPUs",
        f"method:  {config.algorithm.name} on {config.data.dataset}, {config.clients.count} "
        f"clients x {config.experiment.rounds} rounds, {config.schedule.mode}, "
        f"{config.topology.kind} topology",
    ]
    for node_id, ids in nodes.items():
        facts = experiment.placement[ids[0]]
        lines.append(
            f"node {node_id[:8]}: clients {ids} ({facts.device}, "
            f"{facts.torch_threads} torch threads each)"
        )
    faults = plan_lines(config.faults, config.experiment.rounds) or ["none"]
    lines.append("faults:  " + "; ".join(faults))
    lines.append(f"outputs: {experiment.output_dir}")
    lines.append(f"mlflow:  {mlflow_line(config)}")
    return "\n".join(lines)


def mlflow_line(config: Config) -> str:
    """Where the run's MLflow run goes, or that it has none."""
    if not config.tracking.enabled:
        return "off (tracking.enabled: false; the outputs hold every result)"
    uri = redact_uri(resolve_tracking_uri(config.tracking.uri, Path.cwd()))
    return f"{uri} (experiment {config.tracking.experiment or config.experiment.name})"


def shutdown(experiment: Experiment, wait_s: float = 0.0) -> None:
    """Stop every actor of the experiment (the Ray instance itself stays up); with
    ``wait_s``, return once they are gone."""
    actors = [*experiment.clients.values(), experiment.coordinator]
    stop_actors([*actors, *experiment.slot_pools.values()], wait_s)


def run_experiment(
    config: Config, output_dir: Path | None = None, progress: bool = True, resume: bool = False
) -> dict[str, Any]:
    """Run one experiment end to end and return its summary (also in ``summary.json``).

    Ctrl-C or SIGTERM once stops the run and writes what exists; once more while that is
    written ends it at once (:class:`RunInterrupted`). ``resume`` continues it later.
    """
    with sigterm_as_ctrl_c():
        experiment = launch(config, output_dir, resume)
        try:
            return _run(experiment, progress, resume)
        finally:
            with signals_held():
                shutdown(experiment)


def _run(experiment: Experiment, progress: bool, resume: bool) -> dict[str, Any]:
    """Start the launched run, follow it to its end or an interrupt, and return its summary."""
    started = time.monotonic()
    coordinator = experiment.coordinator
    timeouts = experiment.timeouts
    try:
        print(describe_launch(experiment), file=sys.stderr)
        if resume:  # the coordinator waits for every client's journal
            ask(experiment, coordinator.resume_run.remote(), timeouts.coordinator_back_s)
        else:
            ask(experiment, coordinator.start_clients.remote(), timeouts.control_s)
        summary = wait_and_finalize(experiment, started, progress)
    except KeyboardInterrupt:
        resume_with = f"continue with --resume {experiment.output_dir}"
        print(
            f"interrupted: writing what exists (Ctrl-C again stops at once); {resume_with}",
            file=sys.stderr,
        )
        try:
            call = coordinator.finalize.remote(time.monotonic() - started)
            summary = ask(experiment, call, timeouts.finalize_s)
        except KeyboardInterrupt:
            raise RunInterrupted(
                f"interrupted twice; outputs as last written in {experiment.output_dir}; "
                + resume_with
            ) from None
        summary["stopped"] = "interrupted"
    summary["output_dir"] = str(experiment.output_dir)
    return summary
