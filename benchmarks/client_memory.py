"""Where a client process's private memory goes: import, model and optimiser, data, allocator.

Builds a real ``ClientActor`` inside a Ray worker and reads the worker's USS (private clean +
dirty pages, ``/proc/self/smaps_rollup``) after each phase, under the run's allocator settings
and under glibc's defaults, with the lean optimisers and with ``torch.optim``::

    python -m benchmarks.client_memory --algorithms fedavg drdfl --rounds 10 \
        --json benchmarks/results/client_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import ray

from benchmarks.common import uss_mb
from ring_actors.runtime.worker_env import ALLOCATOR_ENV


@ray.remote(num_cpus=0)
class Probe:
    """One client's life in phases, measured from inside its process."""

    def run(self, config: dict, dataset, split, test, rounds: int, torch_optim: bool, trim: bool):
        phases = {"ray worker": uss_mb()}
        import torch

        phases["import torch"] = uss_mb()
        from ring_actors.algorithms import base
        from ring_actors.config import config_from_dict
        from ring_actors.runtime.client_actor import ClientActor
        from ring_actors.runtime.worker_env import release_freed_memory

        phases["import client"] = uss_mb()
        config = config_from_dict(config)
        if torch_optim:  # the ablation: what torch.optim's first step costs
            base.Algorithm.make_optimizer = lambda self, params: torch.optim.SGD(
                params, lr=self.options.lr, momentum=self.options.momentum
            )
        core = ClientActor(0, config, dataset, split, test, None, "/tmp", "probe").core
        algorithm, data = core.algorithm, core.data
        phases["model, optimiser, data"] = uss_mb()
        algorithm.train_round(data.train)
        phases["1 round trained"] = uss_mb()
        for _ in range(rounds - 1):
            algorithm.train_round(data.train)
            algorithm.evaluate(data.local_test)
            algorithm.evaluate(data.global_test)
        phases[f"{rounds} rounds, evaluated"] = uss_mb()
        if trim:  # what a client does when it gives its compute slot back
            release_freed_memory()
        phases["slot given back (idle)"] = uss_mb()
        return phases


def measure(overrides: list[str], rounds: int, allocator: bool, torch_optim: bool) -> dict:
    from ring_actors.config import load_config
    from ring_actors.data.client_splits import global_test_set, split_for
    from ring_actors.data.sources import load_dataset

    config = load_config("jobs/configs/ring8-drdfl.yaml", overrides)
    dataset = load_dataset(config.data.dataset, config.data.root, config.data.download)
    splits = split_for(config, dataset)
    global_test = ray.put(global_test_set(config, dataset, splits))
    env = {"env_vars": dict(ALLOCATOR_ENV) if allocator else {"MALLOC_ARENA_MAX": ""}}
    probe = Probe.options(runtime_env=env).remote()
    try:
        data = ray.put(dataset)
        args = (config.to_dict(), data, splits[0], global_test, rounds, torch_optim, allocator)
        return ray.get(probe.run.remote(*args))
    finally:
        ray.kill(probe)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=["fedavg", "drdfl"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/client_memory.json"))
    args = parser.parse_args()
    ray.init(log_to_driver=False, configure_logging=False)
    root = os.environ.get("RING_ACTORS_DATA")
    variants = {
        "2 arenas + trim, lean optimiser": (True, False),
        "glibc defaults, lean optimiser": (False, False),
        "2 arenas + trim, torch.optim": (True, True),
    }
    results = {}
    for name in args.algorithms:
        overrides = [f"algorithm.name={name}", "algorithm.backbone=cnn", f"data.root={root}"]
        for variant, (allocator, torch_optim) in variants.items():
            phases = measure(overrides, args.rounds, allocator, torch_optim)
            results[f"{name} | {variant}"] = phases
            print(f"{name:8s} {variant:34s}", "  ".join(f"{k}: {v:.0f}" for k, v in phases.items()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rounds": args.rounds, "uss_mb": results}, indent=2))


if __name__ == "__main__":
    main()
