"""The coordinator's Ray shell: it wraps client actors in handles, runs the core's reconcile
loop on a thread and has the core answer every RPC, as declared: the clients' in
``delivery/transport.py``, the driver's here (``RunControl``). It is off the data path:
clients talk to each other directly and only report to it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol

import ray

from ring_actors.config import Config
from ring_actors.coordinator.core import CoordinatorCore
from ring_actors.coordinator.progress import Progress
from ring_actors.coordinator.tracking import Retry, Tracker
from ring_actors.coordinator.untracked import RunTracker, Untracked
from ring_actors.delivery.transport import ClientHandle, ControlLink, Reply, RunClock, remote
from ring_actors.runtime.actor_names import actor_name
from ring_actors.runtime.ray_transport import RayClientHandle, answered_by_core
from ring_actors.runtime.worker_env import loaded_modules
from ring_actors.timeouts import LOOP_JOIN_S, TRACKING_OPEN_JOIN_S

__all__ = ["Coordinator", "RunControl"]


class RunControl(Protocol):
    """The driver's calls to the coordinator that the core answers as they come (those that
    take a client actor wrap it in a handle first, and are the shell's own)."""

    @remote(Reply.ANSWER)
    def start_clients(self) -> None:
        """Push every member its first view, then start all round loops."""

    @remote(Reply.ANSWER)
    def resume_run(self) -> None:
        """A resumed run's members, each started again from its own checkpoint."""

    @remote(Reply.ANSWER)
    def progress(self) -> Progress:
        """Where the run stands, for the driver's poll."""

    @remote(Reply.ANSWER)
    def ring_order(self) -> list[int]:
        """The live members, in ring order."""


@answered_by_core(ControlLink, RunClock, RunControl)
class Coordinator:
    """One writer of membership and tracking state, as a threaded Ray actor.

    RPCs only record facts and return; the reconcile loop probes health, bypasses dead
    members, pushes new views and flushes metrics. Ray restarts it after a crash; it then
    resumes from its checkpoint and the clients' journals.
    """

    def __init__(
        self,
        config: Config,
        output_dir: str,
        tracking_uri: str,
        run_key: str,
        resume: bool = False,
    ) -> None:
        out = Path(output_dir)
        experiment = config.tracking.experiment or config.experiment.name
        retry = Retry(close_s=config.tracking.give_up_s)
        tracker: RunTracker = (
            Tracker(tracking_uri, experiment, out.name, output_dir=out, retry=retry)
            if config.tracking.enabled
            else Untracked()
        )
        self.core = CoordinatorCore(config, out, tracker, find_client=self._find(run_key))
        # Restarted by Ray mid-run it finds its clients; for a resumed run they register anew.
        self.core.restore(adopt_clients=not resume)
        self.stopping = threading.Event()
        self.loop = threading.Thread(target=self._control_loop, name="reconcile", daemon=True)
        self.loop.start()
        # MLflow is imported and the run created off the RPC path, while the ring starts.
        self.tracking = threading.Thread(
            target=self.core.open_tracking, name="mlflow-open", daemon=True
        )
        self.tracking.start()

    @staticmethod
    def _find(run_key: str):
        def find(client_id: int) -> ClientHandle | None:
            try:
                return RayClientHandle(ray.get_actor(actor_name(run_key, f"client-{client_id}")))
            except ValueError:
                return None

        return find

    def _control_loop(self) -> None:
        while not self.stopping.is_set():
            self.core.reconcile()
            self.stopping.wait(self.core.timeouts.reconcile_s)

    # ---- its own RPCs: a client actor wrapped in a handle first, or the loop stopped ------

    def register(self, client_id: int, actor: ray.actor.ActorHandle, node_id: str) -> None:
        self.core.register(client_id, RayClientHandle(actor), node_id)

    def adopt(self, client_id: int, actor: ray.actor.ActorHandle, node_id: str) -> bool:
        return self.core.adopt(client_id, RayClientHandle(actor), node_id)

    def admit(
        self,
        client_id: int,
        actor: ray.actor.ActorHandle,
        node_id: str,
        first_round: int | None = None,
    ) -> int | None:
        return self.core.admit(client_id, RayClientHandle(actor), node_id, first_round)

    def loaded_modules(self) -> list[str]:
        return loaded_modules()

    def finalize(self, wall_s: float) -> dict[str, Any]:
        """Write the output files, log them to MLflow, close the run; return the summary."""
        self.stopping.set()
        self.loop.join(timeout=LOOP_JOIN_S)
        self.tracking.join(timeout=TRACKING_OPEN_JOIN_S)
        return self.core.finalize(wall_s)
