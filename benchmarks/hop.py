"""What one hop of a payload costs between two Ray actors on one node: the model's tensors
pickled (torch's own reduction, in band) against the wire format (byte arrays Ray passes
out of band, copied once by the receiver; ``ring_actors/delivery/wire.py``).

    python -m benchmarks.hop --backbones cnn resnet18 --json benchmarks/results/hop.json

Each hop is a ``receive`` call answered by an actor that does what a client does with a
payload before queueing it: rebuild the tensors (the wire format only), validate the
payload and check every value is finite. The figure is the median wall time of a call from
the sender's side, alternating the two formats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import ray

from ring_actors.delivery.payloads import Payload, all_finite
from ring_actors.delivery.wire import WirePayload, from_wire, to_wire
from ring_actors.models import build_backbone

SHAPE, CLASSES = (3, 32, 32), 10  # CIFAR-10


@ray.remote(num_cpus=1)
class Receiver:
    def receive(self, payload: Payload | WirePayload) -> bool:
        if isinstance(payload, WirePayload):
            payload = from_wire(payload)
        payload.validate(None, None)
        return all_finite(payload.tensors)


def hop_ms(receiver: Any, payload: Payload, wire: bool, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        sent = to_wire(payload) if wire else payload
        assert ray.get(receiver.receive.remote(sent))
        times.append((time.perf_counter() - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", nargs="+", default=["cnn", "resnet18"])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    receiver = Receiver.remote()
    rows = []
    for backbone in args.backbones:
        state = build_backbone(backbone, SHAPE, CLASSES).state_dict()
        payload = Payload(0, 0, 0, 0, {k: v.detach().clone() for k, v in state.items()})
        hop_ms(receiver, payload, True, 2)  # warm both paths
        hop_ms(receiver, payload, False, 2)
        runs: dict[bool, list[float]] = {False: [], True: []}  # pickled first, as sent
        for _ in range(args.repeats):
            for wire in (False, True):
                runs[wire] += hop_ms(receiver, payload, wire, 1)
        for wire, times in runs.items():
            rows.append(
                {
                    "backbone": backbone,
                    "mb": payload.nbytes / 2**20,
                    "format": "wire" if wire else "pickled tensors",
                    "median_ms": statistics.median(times),
                    "min_ms": min(times),
                    "max_ms": max(times),
                    "repeats": len(times),
                }
            )
            print(json.dumps(rows[-1]))
    ray.shutdown()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
