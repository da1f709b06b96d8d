"""Does a client's training thread fault its working memory in every step, by glibc arena count?

    python -m benchmarks.arenas --processes 30 --arenas 2 1

Each probe is a fresh Ray worker started with the run's allocator settings (one arena count
changed), training the ``cnn`` on a thread as a client does; it reports the minor page faults
of the later steps and which arenas hold memory (``malloc_info``).
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

from benchmarks.common import RESULTS, write_json


def probe(steps: int = 24) -> dict[str, object]:
    """Faults a step, and each arena's heap memory (MB) after training, on a fresh thread."""
    import ctypes
    import re
    import resource
    import threading

    import torch

    from ring_actors.models import build_backbone

    libc = ctypes.CDLL("libc.so.6")
    libc.open_memstream.restype = ctypes.c_void_p
    out: dict[str, object] = {}

    def train() -> None:
        torch.set_num_threads(1)
        model = build_backbone("cnn", (1, 28, 28), 10)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
        for step in range(steps):
            if step == steps // 2:
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        out["faults_per_step"] = faults / (steps - steps // 2)
        text, size = ctypes.c_char_p(), ctypes.c_size_t()
        stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(text), ctypes.byref(size)))
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        pattern = r'<heap nr="\d+">.*?<system type="current" size="(\d+)"'
        out["arena_mb"] = [int(m) >> 20 for m in re.findall(pattern, text.value.decode(), re.S)]

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=30)
    parser.add_argument("--arenas", nargs="+", default=["2", "1"])
    parser.add_argument("--json", type=Path, default=RESULTS / "arenas.json")
    args = parser.parse_args()
    import ray

    from ring_actors.runtime.worker_env import actor_runtime_env

    ray.init(num_cpus=2, include_dashboard=False)
    record: dict[str, list] = {}
    for _ in range(args.processes):
        for arenas in args.arenas:  # interleaved: the settings share the machine's moods
            env = actor_runtime_env()
            env["env_vars"].update(MALLOC_ARENA_MAX=arenas, FRESH=uuid.uuid4().hex)
            task = ray.remote(num_cpus=0, runtime_env=env)(probe)
            record.setdefault(arenas, []).append(ray.get(task.remote()))
    for arenas, probes in record.items():
        faulting = [p for p in probes if p["faults_per_step"] >= 300]
        print(f"{arenas} arena(s): {len(faulting)} of {len(probes)} processes faulted;", faulting)
    rows = {k: [[round(p["faults_per_step"]), p["arena_mb"]] for p in v] for k, v in record.items()}
    write_json(args.json, rows, indent=None)  # each probe: [faults a step, MB in each arena]


if __name__ == "__main__":
    main()
