"""Does a late joiner initialised by ``init_from`` beat a freshly initialised one?

    python -m benchmarks.late_joiner --method drdfl --veterans 4 --joiners 2 --warm-rounds 6

A ring of veterans trains for ``--warm-rounds`` synchronous rounds (each merges its
predecessor's previous payload, exactly as ``schedule.mode: sync``). Then every joiner is built
twice with the same private seed: once initialised from the last veteran's payload, once fresh.
Both copies train on the joiner's own data, merging the ring's payload each round as a spliced-in
member would, and are scored on their Local-T and Global-T after every round. The algorithm
layer is driven in one process (no Ray), so the comparison is deterministic for a seed.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from ring_actors.algorithms import Algorithm
from ring_actors.config import load_config
from ring_actors.data.images import LabelledImages
from ring_actors.data.sources import load_dataset
from ring_actors.experiment import global_test_indices, split_for
from ring_actors.method_factory import build_algorithm
from ring_actors.protocol import Payload, detach_to_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="drdfl")
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--veterans", type=int, default=4)
    parser.add_argument("--joiners", type=int, default=2)
    parser.add_argument("--warm-rounds", type=int, default=6)
    parser.add_argument("--joined-rounds", type=int, default=3)
    parser.add_argument("--max-train", type=int, default=500)
    parser.add_argument("--classes-per-client", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)

    total = args.veterans + args.joiners
    config = load_config(
        None,
        [
            f"algorithm.name={args.method}",
            f"data.dataset={args.dataset}",
            f"clients.count={total}",
            "data.partition.kind=shard",
            f"data.partition.classes_per_client={args.classes_per_client}",
            f"data.max_train_per_client={args.max_train}",
            f"experiment.seed={args.seed}",
        ],
    )
    dataset = load_dataset(args.dataset)
    splits = split_for(config, dataset)

    def images(x: np.ndarray, y: np.ndarray) -> LabelledImages:
        return LabelledImages.from_arrays(x, y, dataset.mean, dataset.std)

    train = [images(dataset.train_x[s.train], dataset.train_y[s.train]) for s in splits]
    local = [images(dataset.test_x[s.test], dataset.test_y[s.test]) for s in splits]
    pick = global_test_indices(splits, 2000, args.seed)
    global_test = images(dataset.test_x[pick], dataset.test_y[pick])

    def build(client: int) -> Algorithm:
        cpu = torch.device("cpu")
        return build_algorithm(config, client, dataset.num_classes, dataset.input_shape, cpu)

    def payload(sender: int, algorithm: Algorithm, round_: int) -> Payload:
        return Payload(sender, round_, 0, round_, detach_to_cpu(algorithm.shared_state()))

    veterans = [build(i) for i in range(args.veterans)]
    sent: list[Payload] = []
    for round_ in range(args.warm_rounds):
        for i, algorithm in enumerate(veterans):
            if sent:
                algorithm.merge([sent[i - 1]])  # predecessor's previous round, as in sync mode
            algorithm.train_round(train[i])
        sent = [payload(i, a, round_) for i, a in enumerate(veterans)]

    results = []
    for j in range(args.veterans, total):
        handed, fresh = build(j), build(j)
        handed.init_from(sent[-1])
        for round_ in range(args.joined_rounds):
            for name, algorithm in (("init_from", handed), ("fresh", fresh)):
                if round_ > 0:
                    algorithm.merge([sent[-1]])
                algorithm.train_round(train[j])
                results.append(
                    {
                        "joiner": j,
                        "start": name,
                        "round": round_,
                        "local_acc": algorithm.evaluate(local[j])["acc"],
                        "global_acc": algorithm.evaluate(global_test)["acc"],
                    }
                )
            for i, algorithm in enumerate(veterans):  # the ring keeps going meanwhile
                algorithm.merge([sent[i - 1]])
                algorithm.train_round(train[i])
            sent = [payload(i, a, args.warm_rounds + round_) for i, a in enumerate(veterans)]

    print("| round after join | start | Local-T (%) | Global-T (%) |\n|---|---|---|---|")
    for round_ in range(args.joined_rounds):
        for name in ("init_from", "fresh"):
            rows = [r for r in results if r["round"] == round_ and r["start"] == name]
            local_t = 100 * np.mean([r["local_acc"] for r in rows])
            global_t = 100 * np.mean([r["global_acc"] for r in rows])
            print(f"| {round_ + 1} | {name} | {local_t:.2f} | {global_t:.2f} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
