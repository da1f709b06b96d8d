"""Coordinator actor: membership, failure detection by reconcile loop, metrics and MLflow sink.

It is off the data path: clients talk to each other directly and only report to it.
"""

from __future__ import annotations

import logging
import random
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from ring_actors.config import Config
from ring_actors.membership import MembershipTable, MemberState
from ring_actors.recovery import actor_name, load, save_atomic
from ring_actors.tracking import Tracker, flatten, write_outputs

log = logging.getLogger(__name__)


CHECKPOINT = "coordinator.ckpt"  # in the output dir: what a restarted coordinator resumes from


class Coordinator:
    """One writer of membership and tracking state.

    RPCs only record facts and return; a background reconcile loop probes health, bypasses
    dead members (bumping the epoch and pushing new views) and flushes metrics in batches.
    """

    def __init__(self, config: Config, output_dir: str, tracking_uri: str, run_key: str) -> None:
        self.config = config
        self.run_key = run_key
        self.output_dir = Path(output_dir)
        self.checkpoint_path = self.output_dir / CHECKPOINT
        self.table = MembershipTable()
        self.handles: dict[int, ray.actor.ActorHandle] = {}
        self.lock = threading.RLock()
        self.started_at = time.monotonic()
        self.rows: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.by_round: dict[int, dict[int, dict[str, float]]] = defaultdict(dict)
        self.rounds_logged: set[int] = set()
        self.done: dict[int, dict[str, int]] = {}
        self.probes: dict[int, tuple[ray.ObjectRef, float]] = {}
        self.next_probe: dict[int, float] = {}
        self.suspects: set[int] = set()
        self.hung: set[int] = set()  # bypassed for silence, not death: may come back
        # Bypasses whose ring has not yet healed: (time of the bypass, the round every live
        # member must finish, having started it after the bypass).
        self.healing: list[tuple[float, int]] = []
        self.broadcast_epoch = -1
        self.saved_at = 0.0

        name = config.tracking.experiment or config.experiment.name
        saved = load(self.checkpoint_path)
        self.tracker = Tracker(
            tracking_uri, name, self.output_dir.name, run_id=saved["run_id"] if saved else None
        )
        if saved:
            self._restore(saved)
        self.stopping = threading.Event()
        self.loop = threading.Thread(target=self._control_loop, name="reconcile", daemon=True)
        self.loop.start()

    # ---- membership RPCs ----------------------------------------------------------------

    def register(self, client_id: int, handle: ray.actor.ActorHandle, node_id: str) -> None:
        with self.lock:
            self.handles[client_id] = handle
            self.table.add(client_id, node_id)

    def start_clients(self) -> None:
        """Push every member its first view, then start all round loops."""
        with self.lock:
            self.started_at = time.monotonic()
            self._broadcast()
            for client_id in self.table.live:
                self.table.mark(client_id, MemberState.RUNNING)
                self.handles[client_id].start.remote()
            self.broadcast_epoch = self.table.epoch  # RUNNING does not change the live set

    def admit(
        self,
        client_id: int,
        handle: ray.actor.ActorHandle,
        node_id: str,
        first_round: int | None = None,
    ) -> int:
        """Splice a new client in after a (seeded) random live member and start it there.

        The newcomer's predecessor hands it its latest shared state for ``init_from``; the
        newcomer first trains ``first_round``, or the earliest round the ring cannot have
        begun. Returns the predecessor's id.
        """
        with self.lock:
            live = self.table.live
            # The predecessor hands over its state: it must have trained (not another newcomer).
            members = self.table.members
            veterans = [c for c in live if members[c].rounds_trained > 0]
            rng = random.Random(self.config.experiment.seed * 7919 + client_id)
            after = rng.choice(veterans or live)
            first_round = self._entry_round(first_round)
            self.handles[client_id] = handle
            self.table.add(client_id, node_id, after=after, first_round=first_round)
            self._event("join", client_id, first_round, f"spliced in after {after}")
            self._broadcast()
            self.broadcast_epoch = self.table.epoch
            self.handles[after].hand_off.remote(client_id, handle)
            self.table.mark(client_id, MemberState.RUNNING)
            handle.start.remote(first_round, True)
            return after

    def rejoin(
        self,
        client_id: int,
        handle: ray.actor.ActorHandle,
        node_id: str,
        checkpoint_round: int | None,
    ) -> None:
        """A crashed client that Ray restarted is spliced in again and started.

        With a checkpoint it resumes its private state; without one it starts as a newcomer
        from its predecessor's hand-off.
        """
        with self.lock:
            if self.table.is_live(client_id):  # back before the probes noticed it was gone
                self._mark_dead(client_id, "crash", "restarted by Ray")
            self.probes.pop(client_id, None)  # a probe of the old process must not kill the new
            self.suspects.discard(client_id)
            live = self.table.live
            after = random.Random(self.table.epoch).choice(live)
            first_round = self._entry_round()
            self.handles[client_id] = handle
            self.table.members[client_id].node_id = node_id
            self.table.revive(client_id, after, first_round)
            how = (
                "as a new client" if checkpoint_round is None else f"from round {checkpoint_round}"
            )
            self._event("rejoin", client_id, first_round, f"after {after}, {how}")
            self._broadcast()
            self.broadcast_epoch = self.table.epoch
            if checkpoint_round is None:
                self.handles[after].hand_off.remote(client_id, handle)
            handle.start.remote(first_round, checkpoint_round is None)

    def _entry_round(self, wanted: int | None = None) -> int:
        """The first round a client spliced in now trains: ``wanted`` if the ring cannot
        have begun it. A member that reported round n may be in round n + 1 with its lap
        even finished, so a newcomer there would wait for a lap that never comes. Round
        n + 2 is safe: its lap needs every member to finish n + 1 first, and the new view
        reaches them long before.
        """
        return max(wanted or 0, self._newest_trained() + 2)

    def _newest_trained(self) -> int:
        """The furthest round any member has finished training; -1 before any has."""
        members = self.table.members.values()
        return max((m.last_round for m in members if m.rounds_trained > 0), default=-1)

    def report_round(self, client_id: int, round_: int, metrics: dict[str, float]) -> None:
        with self.lock:
            if client_id in self.hung and not self.table.is_live(client_id):
                self._rejoin(client_id)
            self.table.seen(client_id, round_)
            if client_id in self.by_round[round_]:
                return  # idempotent under retries
            self.by_round[round_][client_id] = metrics
            now = time.monotonic() - self.started_at
            self.tracker.add_metrics(
                {f"client_{client_id}/{k}": v for k, v in metrics.items()}, round_
            )
            if any(k.startswith("local_") for k in metrics):
                self.rows.append({"client": client_id, "round": round_, "time_s": now, **metrics})

    def report_event(self, kind: str, client_id: int, round_: int, detail: str = "") -> None:
        with self.lock:
            self._event(kind, client_id, round_, detail)

    def report_unreachable(self, reporter: int, target: int, epoch: int) -> None:
        """A sender got no acknowledgement; the loop probes ``target`` before bypassing it."""
        with self.lock:
            self._event(
                "unreachable",
                target,
                self.table.members[target].last_round,
                f"reported by {reporter} at epoch {epoch}",
            )
            self.suspects.add(target)

    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None:
        with self.lock:
            self.done[client_id] = {"lost": lost, "hops": hops, "bytes_sent": bytes_sent}
            self.table.mark(client_id, MemberState.DONE)

    def progress(self) -> dict[str, Any]:
        with self.lock:
            live = self.table.live
            members = self.table.members
            rounds = [members[c].last_round + 1 for c in live]
            trained = {c: m.rounds_trained for c, m in members.items()}
            planned = sum(
                self.config.experiment.rounds - members[c].first_round if c in live else done
                for c, done in trained.items()
            )
            return {
                "round": min(rounds, default=0),
                "newest": self._newest_trained(),
                "epoch": self.table.epoch,
                "live": len(live),
                "done": sum(1 for c in live if c in self.done),
                # Rounds trained, departed members' included, and the rounds the run will
                # have trained when the members live now finish: a joiner adds only its own.
                "rounds_done": sum(trained.values()),
                "rounds_planned": planned,
                "finished": bool(live) and all(c in self.done for c in live),
            }

    def ring_order(self) -> list[int]:
        with self.lock:
            return self.table.live

    # ---- reconcile loop -----------------------------------------------------------------

    def _control_loop(self) -> None:
        self._open_tracking()
        while not self.stopping.is_set():
            for step in (
                self._settle_probes,
                self._start_probes,
                self._reconcile_views,
                self._settle_heals,
                self._log_round_means,
                self.tracker.flush,
                self._checkpoint,
            ):
                try:
                    with self.lock:
                        step()
                except Exception:  # one failing step must not stop the loop
                    log.exception("coordinator step %s failed", step.__name__)
            self.stopping.wait(min(0.2, self.config.schedule.heartbeat_s))

    def _open_tracking(self) -> None:
        """Create the MLflow run off the RPC path (a restarted coordinator reopens its own)."""
        config = self.config
        tags = {
            "algorithm": config.algorithm.name,
            "dataset": config.data.dataset,
            "topology": config.topology.kind,
            "mode": config.schedule.mode,
            "output_dir": str(self.output_dir),
        }
        try:
            self.tracker.open(flatten(config.to_dict()), tags)
        except Exception:  # the loop must run; finalize retries and then reports the error
            log.exception("could not open the MLflow run")

    def _settle_probes(self) -> None:
        """STEP 1: a probe that raised means crashed; one unanswered past the timeout, hung."""
        now = time.monotonic()
        for client_id, (ref, sent_at) in list(self.probes.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                del self.probes[client_id]
                try:
                    self.table.seen(client_id, ray.get(ref))
                    self.suspects.discard(client_id)
                except RayActorError as err:
                    self._mark_dead(client_id, "crash", type(err).__name__)
            elif now - sent_at > self.config.schedule.hop_timeout_s:
                del self.probes[client_id]
                self._mark_dead(client_id, "hang", "no heartbeat answer")
                self.hung.add(client_id)

    def _start_probes(self) -> None:
        """STEP 2: at most one probe per member, on a jittered period; suspects at once."""
        now = time.monotonic()
        for client_id in self.table.live:
            due = self.next_probe.get(client_id, 0.0) <= now or client_id in self.suspects
            if client_id not in self.probes and due:
                self.probes[client_id] = (self.handles[client_id].ping.remote(), now)
                period = self.config.schedule.heartbeat_s * random.uniform(0.9, 1.1)
                self.next_probe[client_id] = now + period

    def _reconcile_views(self) -> None:
        """STEP 3: broadcast new views only when the live set changed."""
        if self.table.epoch != self.broadcast_epoch:
            self._broadcast()
            self.broadcast_epoch = self.table.epoch

    def _settle_heals(self) -> None:
        """STEP 4: a bypass has healed once every live member finished a round it began after
        it; the event records how long that took."""
        live = self.table.live
        if not live:
            return
        slowest = min(self.table.members[c].last_round for c in live)
        now = self._now()
        for bypassed_at, target in [h for h in self.healing if slowest >= h[1]]:
            self.healing.remove((bypassed_at, target))
            self._event(
                "healed",
                -1,
                target,
                "every live member passed the bypass",
                latency_s=now - bypassed_at,
            )

    def _log_round_means(self) -> None:
        """STEP 5: client means of a round once every live member has reported it."""
        live = set(self.table.live)
        for round_ in sorted(self.by_round):
            reports = self.by_round[round_]
            if round_ in self.rounds_logged or not live <= set(reports):
                continue
            self.rounds_logged.add(round_)
            self.tracker.add_metrics(_means(reports.values()), round_)

    def _checkpoint(self) -> None:
        """STEP 7: save what a restarted coordinator needs, at most twice a second."""
        if time.monotonic() - self.saved_at < 0.5:
            return
        self.saved_at = time.monotonic()
        save_atomic(
            self.checkpoint_path,
            {
                "run_id": self.tracker.run_id,
                "table": self.table,
                "started_at": self.started_at,
                "rows": self.rows,
                "events": self.events,
                "by_round": dict(self.by_round),
                "rounds_logged": self.rounds_logged,
                "done": self.done,
                "hung": self.hung,
                "healing": self.healing,
            },
        )

    def _restore(self, saved: dict[str, Any]) -> None:
        """Come back after a crash: membership and results from the checkpoint, what the
        clients reported since from their journals; then views go out again."""
        self.table = saved["table"]
        self.started_at = saved["started_at"]
        self.rows, self.events = saved["rows"], saved["events"]
        self.by_round.update(saved["by_round"])
        self.rounds_logged, self.done, self.hung = (
            saved["rounds_logged"],
            saved["done"],
            saved["hung"],
        )
        self.healing = saved.get("healing", [])
        for client_id in self.table.live:
            try:
                self.handles[client_id] = ray.get_actor(
                    actor_name(self.run_key, f"client-{client_id}")
                )
            except ValueError:  # gone while we were down: the probes will not find it
                self._mark_dead(client_id, "crash", "gone while the coordinator was down")
        journals = {c: h.journal.remote() for c, h in self.handles.items()}
        replayed = 0
        for client_id, ref in journals.items():
            try:
                entries = ray.get(ref, timeout=self.config.schedule.hop_timeout_s)
            except (RayActorError, ray.exceptions.GetTimeoutError):
                continue  # the probes will settle it
            for entry in entries:
                replayed += self._replay(client_id, entry)
        self._event("coordinator_restored", -1, -1, f"replayed {replayed} client reports")

    def _replay(self, client_id: int, entry: tuple) -> int:
        """Apply one journal entry a client kept; 1 if it was news to us."""
        kind, *args = entry
        if kind == "round" and client_id not in self.by_round.get(args[0], {}):
            self.report_round(client_id, *args)
            return 1
        if kind == "done" and client_id not in self.done:
            self.report_done(client_id, *args)
            return 1
        return 0

    # ---- helpers ------------------------------------------------------------------------

    def _broadcast(self) -> None:
        """One view for everyone: neighbour sets are derived from it, per round, by each client."""
        view = self.table.view()
        handles = {c: self.handles[c] for c in view.members}
        for client_id in view.members:
            self.handles[client_id].set_view.remote(view, handles)

    def _mark_dead(self, client_id: int, cause: str, detail: str) -> None:
        """Bypass a member; its event's latency is the time since it was last heard from
        (a bound on the detection latency: the fault came after its last sign of life)."""
        member = self.table.members[client_id]
        if self.table.mark(client_id, MemberState.DEAD):
            self.suspects.discard(client_id)
            silent = time.monotonic() - member.last_seen
            self._event(cause, client_id, member.last_round, detail, latency_s=silent)
            self._event("bypass", client_id, member.last_round, f"ring now {self.table.live}")
            live = self.table.live
            if live:
                newest = max(self.table.members[c].last_round for c in live)
                self.healing.append((self._now(), newest + 1))

    def _rejoin(self, client_id: int) -> None:
        """A member bypassed as hung is back, with its private state: splice it in again."""
        after = random.Random(self.table.epoch).choice(self.table.live)
        self.table.revive(client_id, after)
        self.hung.discard(client_id)
        self.probes.pop(client_id, None)
        round_ = self.table.members[client_id].last_round
        self._event("rejoin", client_id, round_, f"spliced in after {after}")

    def _now(self) -> float:
        """Seconds since the rounds began: the events' clock."""
        return time.monotonic() - self.started_at

    def _event(
        self, kind: str, client_id: int, round_: int, detail: str, **measured: float
    ) -> None:
        self.events.append(
            {
                "time_s": self._now(),
                "kind": kind,
                "client": client_id,
                "round": round_,
                "epoch": self.table.epoch,
                "detail": detail,
                **measured,
            }
        )

    # ---- results ------------------------------------------------------------------------

    def finalize(self, wall_s: float) -> dict[str, Any]:
        """Write the output files, log them to MLflow, close the run; return the summary."""
        self.stopping.set()
        self.loop.join(timeout=5)
        self._open_tracking()
        with self.lock:
            self._log_round_means_all()
            summary = self._summary(wall_s)
            self.tracker.add_metrics(
                {
                    "final_local_acc": summary["local_acc"]["mean"],
                    "final_global_acc": summary["global_acc"]["mean"],
                },
                summary["rounds_completed"],
            )
            write_outputs(self.output_dir, self.config.to_dict(), summary, self.rows, self.events)
            self.tracker.log_artifacts(self.output_dir)
            self.tracker.end()
            return summary

    def _log_round_means_all(self) -> None:
        for round_, reports in sorted(self.by_round.items()):
            if round_ not in self.rounds_logged:
                self.rounds_logged.add(round_)
                self.tracker.add_metrics(_means(reports.values()), round_)

    def _summary(self, wall_s: float) -> dict[str, Any]:
        last_eval: dict[int, dict[str, float]] = {}
        for row in self.rows:  # rows arrive in round order per client; keep each one's latest
            last_eval[row["client"]] = row
        hops = sum(d["hops"] for d in self.done.values())
        sent = sum(d["bytes_sent"] for d in self.done.values())
        reports = [m for r in self.by_round.values() for m in r.values()]
        samples = sum(m.get("samples", 0.0) for m in reports)
        per_round = statistics.fmean([m.get("bytes_sent", 0.0) for m in reports] or [0.0])
        kinds = [e["kind"] for e in self.events]
        detected = [e["latency_s"] for e in self.events if e["kind"] in ("crash", "hang")]
        healed = [e["latency_s"] for e in self.events if e["kind"] == "healed"]
        return {
            "algorithm": self.config.algorithm.name,
            "dataset": self.config.data.dataset,
            "clients": len(self.table.members),
            "rounds_completed": min(
                (self.table.members[c].last_round + 1 for c in self.table.live), default=0
            ),
            "mode": self.config.schedule.mode,
            "topology": self.config.topology.kind,
            "local_acc": _stat(last_eval, "local_acc"),
            "global_acc": _stat(last_eval, "global_acc"),
            # The papers quote the mean of the last 10 evaluated rounds as well as the end.
            "local_acc_last10": _last_mean(self.rows, "local_acc", 10),
            "global_acc_last10": _last_mean(self.rows, "global_acc", 10),
            "mb_per_round_per_client": per_round / 1e6,
            "bytes_per_hop": sent / hops if hops else 0.0,
            "hops": hops,
            "bytes_total": sent,
            "events": {
                "crashes": kinds.count("crash"),
                "hangs": kinds.count("hang"),
                "bypasses": kinds.count("bypass"),
                "joins": kinds.count("join"),
                "rejoins": kinds.count("rejoin"),
                "lost_payloads": sum(d["lost"] for d in self.done.values()),
            },
            # Seconds from a bypassed member's last sign of life to its bypass, and from the
            # bypass until every survivor finished a round begun after it.
            "recovery": {"detection_s": detected, "heal_s": healed},
            "wall_s": wall_s,
            "samples_per_s": samples / wall_s if wall_s > 0 else 0.0,
            "ring_order": self.table.live,
            "mlflow": {"tracking_uri": self.tracker.uri, "run_id": self.tracker.run_id},
        }


def _means(reports) -> dict[str, float]:
    """Mean over clients of every metric, as ``<name>_mean``."""
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in reports:
        for key, value in metrics.items():
            values[key].append(value)
    return {f"{k}_mean": statistics.fmean(v) for k, v in values.items()}


def _last_mean(rows: list[dict[str, Any]], key: str, count: int) -> float:
    """Client mean of each client's mean ``key`` over its last ``count`` evaluated rounds."""
    by_client: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        if key in row:
            by_client[row["client"]].append((row["round"], row[key]))
    means = [
        statistics.fmean(v for _, v in sorted(values)[-count:]) for values in by_client.values()
    ]
    return statistics.fmean(means) if means else 0.0


def _stat(rows: dict[int, dict[str, float]], key: str) -> dict[str, Any]:
    per_client = {str(c): row[key] for c, row in sorted(rows.items()) if key in row}
    values = list(per_client.values())
    return {
        "mean": statistics.fmean(values) if values else 0.0,
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "per_client": per_client,
    }
