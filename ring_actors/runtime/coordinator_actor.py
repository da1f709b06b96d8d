"""The coordinator's Ray shell: it wraps client actors in handles, runs the core's reconcile
loop on a thread and forwards every RPC. It is off the data path: clients talk to each other
directly and only report to it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import ray

from ring_actors.config import Config
from ring_actors.coordinator.core import CoordinatorCore
from ring_actors.coordinator.progress import Progress
from ring_actors.coordinator.tracking import Tracker
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import ClientHandle, Readmission
from ring_actors.runtime.actor_names import actor_name
from ring_actors.runtime.ray_transport import RayClientHandle
from ring_actors.runtime.worker_env import loaded_modules
from ring_actors.timeouts import LOOP_JOIN_S, TRACKING_OPEN_JOIN_S

__all__ = ["Coordinator"]


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
        tracker = Tracker(tracking_uri, experiment, out.name, output_dir=out)
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

    # ---- RPCs ---------------------------------------------------------------------------

    def register(self, client_id: int, actor: ray.actor.ActorHandle, node_id: str) -> None:
        self.core.register(client_id, RayClientHandle(actor), node_id)

    def adopt(self, client_id: int, actor: ray.actor.ActorHandle, node_id: str) -> bool:
        return self.core.adopt(client_id, RayClientHandle(actor), node_id)

    def start_clients(self) -> None:
        self.core.start_clients()

    def resume_run(self) -> None:
        self.core.resume_run()

    def admit(
        self,
        client_id: int,
        actor: ray.actor.ActorHandle,
        node_id: str,
        first_round: int | None = None,
    ) -> int | None:
        return self.core.admit(client_id, RayClientHandle(actor), node_id, first_round)

    def rejoin(
        self, client_id: int, handle: ClientHandle, node_id: str, checkpoint_round: int | None
    ) -> Readmission | None:
        return self.core.rejoin(client_id, handle, node_id, checkpoint_round)

    def report_round(self, client_id: int, round_: int, metrics: dict[str, float]) -> None:
        self.core.report_round(client_id, round_, metrics)

    def report_event(
        self, kind: EventKind, client_id: int, round_: int, detail: str = "", **measured: float
    ) -> None:
        self.core.report_event(kind, client_id, round_, detail, **measured)

    def leave(self, client_id: int, round_: int, off_s: float) -> None:
        self.core.leave(client_id, round_, off_s)

    def come_back(self, client_id: int, round_: int) -> Readmission | None:
        return self.core.come_back(client_id, round_)

    def run_elapsed_s(self) -> float:
        return self.core.run_elapsed_s()

    def report_unreachable(self, reporter: int, target: int, epoch: int) -> None:
        self.core.report_unreachable(reporter, target, epoch)

    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None:
        self.core.report_done(client_id, lost, hops, bytes_sent)

    def report_failed(self, client_id: int, round_: int, error: str) -> None:
        self.core.report_failed(client_id, round_, error)

    def progress(self) -> Progress:
        return self.core.progress()

    def ring_order(self) -> list[int]:
        return self.core.ring_order()

    def loaded_modules(self) -> list[str]:
        return loaded_modules()

    def finalize(self, wall_s: float) -> dict[str, Any]:
        """Write the output files, log them to MLflow, close the run; return the summary."""
        self.stopping.set()
        self.loop.join(timeout=LOOP_JOIN_S)
        self.tracking.join(timeout=TRACKING_OPEN_JOIN_S)
        return self.core.finalize(wall_s)
