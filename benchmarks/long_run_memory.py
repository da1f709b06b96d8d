"""Memory over a long run of a tiny model: per-run state must stay flat, round after round.

    RING_ACTORS_DATA=../shared/datasets python -m benchmarks.long_run_memory --rounds 600

The real client and coordinator cores run in one process over the in-memory transport
(``InProcessRing``), so one resident-set figure covers every client's inbox, laps, outbox and
published state and the coordinator's membership, probes, rows and events. A ring lap method
(``fedavg``) on a few Fashion-MNIST images per client keeps each round short, so hundreds of
rounds pass in minutes; the resident set is sampled twice a second against the newest round
finished. Results go to ``benchmarks/results/long_run_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS

PAGE_MB = resource.getpagesize() / 2**20


def resident_mb() -> float:
    """This process's resident set now (not its peak)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_MB


def measure(rounds: int, clients: int, samples: int) -> dict[str, Any]:
    import torch

    from ring_actors.config import config_from_dict
    from ring_actors.in_process import InProcessRing

    torch.set_num_threads(1)
    config = config_from_dict(
        {
            "experiment": {"name": "long-run", "seed": 0, "rounds": rounds},
            "data": {"dataset": "fashion-mnist", "max_train_per_client": samples},
            "clients": {"count": clients, "batch_size": samples},
            "algorithm": {"name": "fedavg"},
            "schedule": {"hop_timeout_s": 5.0},
            "eval": {"every": rounds, "global_max_samples": 100},
        }
    )
    trace: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ring = InProcessRing.from_config(config, Path(tmp))
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.5):
                trace.append((ring.coordinator.progress().newest, resident_mb()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        summary = ring.run(timeout_s=3600)
        done.set()
        sampler.join()
    return {
        "rounds": rounds,
        "clients": clients,
        "samples_per_client": samples,
        "wall_s": time.monotonic() - started,
        "rounds_completed": summary["rounds_completed"],
        "lost_payloads": summary["events"]["lost_payloads"],
        "trace": trace,
    }


def at_round(trace: list[tuple[int, float]], round_: int) -> float:
    """The resident set at the first sample taken once ``round_`` was finished."""
    return next(mb for newest, mb in trace if newest >= round_)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--samples", type=int, default=32)
    args = parser.parse_args()
    result = measure(args.rounds, args.clients, args.samples)
    marks = sorted({max(1, args.rounds * k // 10) for k in (1, 2, 5, 8)} | {args.rounds - 1})
    result["resident_mb_at_round"] = {m: round(at_round(result["trace"], m), 1) for m in marks}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "long_run_memory.json"
    path.write_text(json.dumps(result, indent=1))
    print(
        f"{result['rounds_completed']} rounds in {result['wall_s']:.0f} s, lost payloads "
        f"{result['lost_payloads']}; resident MB by round: {result['resident_mb_at_round']}"
    )


if __name__ == "__main__":
    main()
