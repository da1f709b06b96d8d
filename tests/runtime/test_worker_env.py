"""A client process keeps its working memory while it computes and gives it back when idle."""

from __future__ import annotations

import sys
import time
import uuid

import pytest

from ring_actors.runtime.worker_env import ALLOCATOR_ENV, actor_options, actor_runtime_env

STEPS = 24


def _arenas() -> int:
    """glibc's arenas in this process, as ``malloc_info`` lists them."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.open_memstream.restype = ctypes.c_void_p
    text, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(text), ctypes.byref(size)))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    return text.value.decode().count("<heap nr=")


def _train_and_count_faults(steps: int) -> dict[str, float]:
    """Train the CNN on a thread, as a client's round loop does: the minor page faults of the
    later steps, and the resident memory before and after the slot's memory is given back."""
    import resource
    import threading

    import torch

    from ring_actors.models import build_backbone
    from ring_actors.runtime.worker_env import release_freed_memory

    def resident_mb() -> float:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * 4096 / 2**20

    torch.set_num_threads(1)
    out: dict[str, float] = {}
    errors: list[BaseException] = []

    def train() -> None:
        try:
            run()
        except BaseException as err:  # raised again on the caller's thread
            errors.append(err)

    def run() -> None:
        model = build_backbone("cnn", (1, 28, 28), 10)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
        for step in range(steps):
            if step == steps // 2:  # the allocator has seen a whole step by now
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        out["faults_per_step"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / (
            steps - steps // 2
        )
        out["arenas"] = _arenas()
        del model, optimizer, x, y
        out["computing_mb"] = resident_mb()
        release_freed_memory()
        out["idle_mb"] = resident_mb()

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
def test_training_steps_reuse_memory_and_a_released_slot_returns_it():
    """glibc's dynamic thresholds hand a step's freed activations back to the system within
    the step, so every step faults them in again (thousands of pages a step, a tenth of the
    training time); the run's allocator settings keep them until the slot is given back."""
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    # A process of its own, as every client has: a worker other tests computed in holds its
    # allocator in another state (the shared Ray keeps task workers between modules).
    env = {"env_vars": {**ALLOCATOR_ENV, "RING_ACTORS_FRESH_WORKER": uuid.uuid4().hex}}
    probe = ray.remote(num_cpus=0, runtime_env=env)(_train_and_count_faults)
    measured = ray.get(probe.remote(STEPS))
    # A thread in glibc's second arena had its free heaps unmapped every step (3,000-7,800
    # faults) in about one process of eight: one arena holds every thread to the thresholds.
    assert measured["arenas"] == 1, measured
    assert measured["faults_per_step"] < 300, measured  # 3,900-4,500 with glibc's thresholds
    assert measured["idle_mb"] < measured["computing_mb"], measured


class _Settings:
    """An actor started as a run starts its clients: its allocator settings and arenas."""

    def read(self) -> dict[str, object]:
        import os

        env = {key: os.environ.get(key) for key in ALLOCATOR_ENV}
        return {"env": env, "arenas": _arenas()}


@pytest.mark.usefixtures("ray_local")
def test_a_ray_started_by_the_run_gives_its_actors_the_settings_without_a_runtime_env():
    """The shared Ray is started as a run starts a local one: its actors inherit the
    allocator settings from the process's start, and need no runtime_env of their own."""
    import ray

    assert actor_runtime_env() == {}
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    actor = ray.remote(num_cpus=0)(_Settings).remote()
    try:
        assert ray.get(actor.read.remote()) == {"env": ALLOCATOR_ENV, "arenas": 1}
    finally:
        ray.kill(actor)


class _Pinged:
    def ping(self) -> int:
        return 1


@pytest.mark.usefixtures("ray_local")
def test_the_runs_actors_leave_their_calls_out_of_the_clusters_task_table():
    """Calls to an actor started with the run's options reach the GCS as no task events;
    an actor with Ray's defaults, beside it, shows that the table does record calls."""
    import ray
    from ray._private.state import state

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    declared = ray.remote(num_cpus=0)(_Pinged)
    quiet, recorded = declared.options(**actor_options()).remote(), declared.remote()
    try:
        ray.get([actor.ping.remote() for actor in (quiet, recorded) for _ in range(5)])

        def pings_of(actor: object) -> int:
            wanted = actor._actor_id.binary()  # type: ignore[attr-defined]
            return sum(
                event.task_info.name.endswith("ping") and event.task_info.actor_id == wanted
                for event in state._get_all_task_events()
            )

        deadline = time.monotonic() + 30  # workers send their events once a second
        while pings_of(recorded) < 5 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert pings_of(recorded) == 5
        assert pings_of(quiet) == 0
    finally:
        for actor in (quiet, recorded):
            ray.kill(actor)
