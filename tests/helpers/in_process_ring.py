"""A small ring of the real client and coordinator cores in one process, on separable
synthetic images: what tests of rounds, faults and heterogeneity build their rings from."""

from __future__ import annotations

from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.in_process import InProcessRing
from tests.helpers.synthetic import separable

SHAPE = (1, 16, 16)
CLASSES = 4


def client_data(count: int) -> list[ClientData]:
    return [
        ClientData(
            train=separable(48, CLASSES, SHAPE, seed=i),
            local_test=separable(16, CLASSES, SHAPE, seed=100 + i),
            global_test=separable(32, CLASSES, SHAPE, seed=999),
        )
        for i in range(count)
    ]


def ring(
    tmp_path,
    algorithm="dfedavg",
    count=4,
    rounds=3,
    reserve=0,
    faults=(),
    join_start="hand_off",
    evaluation=None,
    **schedule,
):
    config = config_from_dict(
        {
            "experiment": {"name": "inproc", "rounds": rounds},
            "clients": {
                "count": count,
                "reserve": reserve,
                "batch_size": 16,
                "join_start": join_start,
            },
            "algorithm": {"name": algorithm},
            "schedule": {"hop_timeout_s": 0.5, "heartbeat_s": 0.1, **schedule},
            "faults": list(faults),
            "eval": evaluation or {},
        }
    )
    return InProcessRing(config, client_data(count + reserve), CLASSES, SHAPE, tmp_path)
