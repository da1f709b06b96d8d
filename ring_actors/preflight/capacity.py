"""What a run asks of the cluster, and the message when the cluster cannot give it.

Free of Ray: ``--dry-run`` checks this machine with it, the driver a running Ray.
"""

from __future__ import annotations

from collections.abc import Mapping

from ring_actors.config import Config


def demand(config: Config) -> dict[str, float]:
    """What every client together asks of the cluster; joiners announced by the fault plan
    start at launch too."""
    total = config.total_clients
    return {"CPU": total * config.clients.num_cpus, "GPU": total * config.clients.num_gpus}


def fits(config: Config, capacity: Mapping[str, float]) -> bool:
    return all(need <= capacity.get(kind, 0) + 1e-9 for kind, need in demand(config).items())


def shortfall(config: Config, capacity: Mapping[str, float], pending: int, waited: bool) -> str:
    """Why ``pending`` clients cannot be placed, and which keys to change."""
    clients, total, asked = config.clients, config.total_clients, demand(config)
    when = f"within clients.start_timeout_s={clients.start_timeout_s:g}" if waited else "here"
    return (
        f"{pending} of {total} client actors could not be placed {when}: they need "
        f"{total} x clients.num_cpus={clients.num_cpus:g} = {asked['CPU']:g} CPUs "
        f"and {total} x clients.num_gpus={clients.num_gpus:g} = {asked['GPU']:g} "
        f"GPUs; the cluster has {capacity.get('CPU', 0):g} CPUs and {capacity.get('GPU', 0):g} "
        "GPUs. Lower clients.num_cpus / clients.num_gpus (or clients.count), or run on a "
        "cluster that has them (ray.address)."
    )
