"""The coordinator's control logic with no Ray in it: membership, probes, bypass, heal,
admission, the error policy, the watchdog and results.

Clients are :class:`~ring_actors.delivery.transport.ClientHandle` s whose calls return pending
answers, so every reconcile step is testable in-process; the Ray actor (``coordinator.py``)
only builds handles and runs ``reconcile`` on a thread. Every RPC records facts and returns;
a change the coordinator acts on (a bypass, an admission) is checkpointed before it is
broadcast, so a restarted coordinator never forgets a member or re-issues an epoch.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ring_actors.config import Config
from ring_actors.coordinator.membership import MembershipTable, MemberState
from ring_actors.coordinator.progress import Progress
from ring_actors.coordinator.record import CoordinatorRecord, read_record, write_record
from ring_actors.coordinator.run_summary import (
    RunFacts,
    draw_run_figures,
    round_means,
    run_level_metrics,
    summarise_run,
)
from ring_actors.coordinator.tracking import Tracker, flatten, write_outputs
from ring_actors.delivery.events import EventKind
from ring_actors.delivery.payloads import JournalEntry
from ring_actors.delivery.transport import (
    ClientHandle,
    PeerGone,
    PeerUnavailable,
    Pending,
    Readmission,
)
from ring_actors.timeouts import Timeouts

log = logging.getLogger(__name__)

CHECKPOINT = "coordinator.json"  # in the output dir: what a restarted coordinator resumes from
# Output entries that hold clients' private state: checkpoints, never uploaded unless asked.
PRIVATE_OUTPUTS = ("clients", CHECKPOINT)
OUTPUTS_EVERY_S = 5.0  # the output tables are rewritten at most this often while a run goes on
MAX_EVENTS = 100_000  # events kept for the summary; a long faulty run must not grow without end


class CoordinatorCore:
    """One writer of membership and results; ``reconcile`` is one non-blocking pass."""

    def __init__(
        self,
        config: Config,
        output_dir: Path,
        tracker: Tracker,
        find_client: Callable[[int], ClientHandle | None] = lambda client_id: None,
    ) -> None:
        self.config = config
        self.timeouts = Timeouts.from_schedule(config.schedule)
        self.output_dir = output_dir
        self.checkpoint_path = output_dir / CHECKPOINT
        self.tracker = tracker
        self.find_client = find_client  # a restarted coordinator finds its clients again
        self.table = MembershipTable()
        self.handles: dict[int, ClientHandle] = {}
        self.lock = threading.RLock()
        self.started_at = time.monotonic()
        self.rows: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.by_round: dict[int, dict[int, dict[str, float]]] = defaultdict(dict)
        self.rounds_logged: set[int] = set()
        self.done: dict[int, dict[str, int]] = {}
        self.errors: list[dict[str, Any]] = []  # client failures, tracebacks included
        self.stop_reason: str | None = None
        self.probes: dict[int, tuple[Pending[int], float]] = {}
        self.next_probe: dict[int, float] = {}
        self.suspects: set[int] = set()
        self.hung: set[int] = set()  # bypassed for silence, not death: may come back
        self.last_report: dict[int, float] = {}  # when each member last finished a round
        # Bypasses whose ring has not yet healed: (time of the bypass, the round every live
        # member must finish, having started it after the bypass).
        self.healing: list[tuple[float, int]] = []
        self.broadcast_epoch = -1
        self.saved_at = 0.0
        self.outputs_at, self.rows_written = 0.0, 0

    # ---- membership RPCs ----------------------------------------------------------------

    def register(self, client_id: int, handle: ClientHandle, node_id: str) -> None:
        with self.lock:
            self.handles[client_id] = handle
            self.table.add(client_id, node_id)

    def adopt(self, client_id: int, handle: ClientHandle, node_id: str) -> bool:
        """A resumed run's new actor for a member the checkpoint knows; False if unknown."""
        with self.lock:
            member = self.table.members.get(client_id)
            if member is None:
                return False
            self.handles[client_id] = handle
            member.node_id = node_id
            return True

    def start_clients(self) -> None:
        """Push every member its first view, then start all round loops."""
        with self.lock:
            self.started_at = time.monotonic()
            for client_id in self.table.live:
                self.table.mark(client_id, MemberState.RUNNING)
                self.last_report[client_id] = time.monotonic()
            self.checkpoint(force=True)
            self._broadcast()
            for client_id in self.table.live:
                self.handles[client_id].start()

    def admit(
        self, client_id: int, handle: ClientHandle, node_id: str, first_round: int | None = None
    ) -> int:
        """Splice a new client in after a (seeded) random live member and start it there.

        The newcomer's predecessor hands it its latest shared state for ``init_from``; the
        newcomer first trains ``first_round``, or the earliest round the ring cannot have
        begun. Returns the predecessor's id.
        """
        with self.lock:
            if client_id in self.table.members:  # a retried admission changes nothing
                return self._predecessor(client_id)
            live = self.table.live
            # The predecessor hands over its state: it must have trained (not another newcomer).
            members = self.table.members
            veterans = [c for c in live if members[c].rounds_trained > 0]
            rng = random.Random(self.config.experiment.seed * 7919 + client_id)
            after = rng.choice(veterans or live)
            first_round = self._entry_round(first_round)
            self.handles[client_id] = handle
            self.table.add(client_id, node_id, after=after, first_round=first_round)
            self.table.mark(client_id, MemberState.RUNNING)
            self.last_report[client_id] = time.monotonic()
            self._event(EventKind.JOIN, client_id, first_round, f"spliced in after {after}")
            self.checkpoint(force=True)  # written before anyone acts on the new member
            self._broadcast()
            self._hand_off(after, client_id, handle)
            handle.start(first_round, True)
            return after

    def rejoin(
        self, client_id: int, handle: ClientHandle, node_id: str, checkpoint_round: int | None
    ) -> Readmission | None:
        """A crashed client that was restarted is spliced in again; it starts itself from
        the answer. With a checkpoint it resumes its private state; without one it starts
        as a newcomer from its predecessor's hand-off. None when nobody is left to join.
        """
        with self.lock:
            if self.table.is_live(client_id):  # back before the probes noticed it was gone
                self._mark_dead(client_id, EventKind.CRASH, "restarted")
            self.probes.pop(client_id, None)  # a probe of the old process must not kill the new
            self.suspects.discard(client_id)
            self.hung.discard(client_id)
            live = self.table.live
            if not live:
                return None
            after = random.Random(self.table.epoch).choice(live)
            first_round = self._entry_round()
            self.handles[client_id] = handle
            self.table.members[client_id].node_id = node_id
            self.table.revive(client_id, after, first_round)
            self.last_report[client_id] = time.monotonic()
            how = (
                "as a new client" if checkpoint_round is None else f"from round {checkpoint_round}"
            )
            self._event(EventKind.REJOIN, client_id, first_round, f"after {after}, {how}")
            self.checkpoint(force=True)
            self._broadcast()
            if checkpoint_round is None:
                self._hand_off(after, client_id, handle)
            view = self.table.view()
            handles = {c: self.handles[c] for c in view.members}
            return Readmission(first_round, checkpoint_round is None, view, handles)

    def _hand_off(self, after: int, client_id: int, handle: ClientHandle) -> None:
        """Ask ``after`` to hand the newcomer its state, unless newcomers start fresh."""
        if self.config.clients.join_start == "hand_off":
            self.handles[after].hand_off(client_id, handle)

    def _predecessor(self, client_id: int) -> int:
        order = self.table.order
        return order[order.index(client_id) - 1]

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
            if client_id not in self.table.members:
                return  # not a member of this run: nothing to record
            if client_id in self.hung and not self.table.is_live(client_id):
                self._rejoin(client_id)
            self.table.seen(client_id, round_)
            self.last_report[client_id] = time.monotonic()
            if client_id in self.by_round[round_]:
                return  # idempotent under retries
            self.by_round[round_][client_id] = metrics
            self.tracker.add_metrics(
                {f"client_{client_id}/{k}": v for k, v in metrics.items()}, round_
            )
            if any(k.startswith("local_") for k in metrics):
                now = self._now()
                self.rows.append({"client": client_id, "round": round_, "time_s": now, **metrics})

    def report_event(self, kind: EventKind, client_id: int, round_: int, detail: str = "") -> None:
        with self.lock:
            self._event(kind, client_id, round_, detail)

    def report_unreachable(self, reporter: int, target: int, epoch: int) -> None:
        """A sender got no acknowledgement; the loop probes ``target`` before bypassing it."""
        with self.lock:
            if target not in self.table.members:
                return
            self._event(
                EventKind.UNREACHABLE,
                target,
                self.table.members[target].last_round,
                f"reported by {reporter} at epoch {epoch}",
            )
            self.suspects.add(target)

    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None:
        with self.lock:
            if client_id not in self.table.members:
                return
            self.done[client_id] = {"lost": lost, "hops": hops, "bytes_sent": bytes_sent}
            self.table.mark(client_id, MemberState.DONE)

    def report_failed(self, client_id: int, round_: int, error: str) -> None:
        """A client's round raised: record it with its traceback and apply the policy.

        ``drop`` bypasses the client as if it had crashed (its data leaves the run, the
        ring heals); ``stop`` ends the run. With no live member left, the run stops too.
        """
        with self.lock:
            if client_id not in self.table.members:
                return
            self.errors.append({"client": client_id, "round": round_, "error": error})
            summary = error.strip().splitlines()[-1] if error.strip() else "error"
            self._event(EventKind.CLIENT_ERROR, client_id, round_, summary)
            if self.config.schedule.on_client_error == "stop":
                self._stop(f"client {client_id} failed in round {round_}: {summary}")
                return
            self._mark_dead(client_id, EventKind.ERROR, summary)
            if not self.table.live:
                self._stop(f"no client can go on: the last one failed ({summary})")

    def progress(self) -> Progress:
        with self.lock:
            live = self.table.live
            members = self.table.members
            rounds = [members[c].last_round + 1 for c in live]
            trained = {c: m.rounds_trained for c, m in members.items()}
            planned = sum(
                self.config.experiment.rounds - members[c].first_round if c in live else done
                for c, done in trained.items()
            )
            return Progress(
                round=min(rounds, default=0),
                newest=self._newest_trained(),
                epoch=self.table.epoch,
                live=len(live),
                done=sum(1 for c in live if c in self.done),
                # Rounds trained, departed members' included, and the rounds the run will
                # have trained when the members live now finish: a joiner adds only its own.
                rounds_done=sum(trained.values()),
                rounds_planned=planned,
                finished=bool(live) and all(c in self.done for c in live),
                stopped=self.stop_reason,
                errors=list(self.errors),
                latest=self._latest_means(),
            )

    def _latest_means(self) -> dict[str, float]:
        """Client means of the newest round every live member has reported."""
        if not self.rounds_logged:
            return {}
        round_ = max(self.rounds_logged)
        means = round_means(self.by_round[round_].values())
        keys = ("local_acc_mean", "global_acc_mean", "loss_mean")
        return {"round": round_, **{k: means[k] for k in keys if k in means}}

    def ring_order(self) -> list[int]:
        with self.lock:
            return self.table.live

    # ---- reconcile ----------------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass of every step; nothing in it waits on a client or on MLflow."""
        for step in (
            self._settle_probes,
            self._start_probes,
            self._watch_rounds,
            self._reconcile_views,
            self._settle_heals,
            self._log_round_means,
            self.checkpoint,
        ):
            try:
                with self.lock:
                    step()
            except Exception:  # one failing step must not stop the loop
                log.exception("coordinator step %s failed", step.__name__)
        try:
            self._write_partial_outputs()
        except Exception:
            log.exception("writing the run's tables failed")

    def _write_partial_outputs(self) -> None:
        """The output files as they stand, so a run that dies keeps every finished round;
        ``summary.json`` says ``partial`` until the run is finalized."""
        now = time.monotonic()
        with self.lock:
            if len(self.rows) == self.rows_written or now - self.outputs_at < OUTPUTS_EVERY_S:
                return
            self.outputs_at, self.rows_written = now, len(self.rows)
            summary = {**self.summary(self._now()), "partial": True}
            config, rows, events = self.config.to_dict(), list(self.rows), list(self.events)
        write_outputs(self.output_dir, config, summary, rows, events)

    def open_tracking(self) -> None:
        """Start the tracker's writer, which creates the MLflow run (a restarted coordinator
        reopens its own) and then sends buffered metrics on its own thread: a slow or absent
        tracking server never delays failure detection."""
        config = self.config
        tags = {
            "algorithm": config.algorithm.name,
            "dataset": config.data.dataset,
            "topology": config.topology.kind,
            "mode": config.schedule.mode,
            "output_dir": str(self.output_dir),
        }
        if config.tracking.parent_run_id:  # MLflow shows the run under its sweep
            tags["mlflow.parentRunId"] = config.tracking.parent_run_id
        self.tracker.open(flatten(config.to_dict()), tags)

    def _settle_probes(self) -> None:
        """A probe that raised means crashed; one unanswered past the timeout, hung."""
        now = time.monotonic()
        for client_id, (answer, sent_at) in list(self.probes.items()):
            if answer.done():
                del self.probes[client_id]
                try:
                    self.table.seen(client_id, answer.result(0))
                    self.suspects.discard(client_id)
                except PeerGone as err:
                    self._mark_dead(client_id, EventKind.CRASH, str(err))
                except PeerUnavailable:  # being restarted: ask again, same deadline
                    if now - sent_at > self.timeouts.probe_s:
                        self._mark_dead(
                            client_id, EventKind.HANG, "unavailable past the probe timeout"
                        )
                        self.hung.add(client_id)
                    else:
                        self.probes[client_id] = (self.handles[client_id].ping(), sent_at)
            elif now - sent_at > self.timeouts.probe_s:
                del self.probes[client_id]
                self._mark_dead(client_id, EventKind.HANG, "no heartbeat answer")
                self.hung.add(client_id)

    def _start_probes(self) -> None:
        """At most one probe per member, on a jittered period; suspects at once."""
        now = time.monotonic()
        for client_id in self.table.live:
            due = self.next_probe.get(client_id, 0.0) <= now or client_id in self.suspects
            if client_id not in self.probes and due:
                self.probes[client_id] = (self.handles[client_id].ping(), now)
                period = self.config.schedule.heartbeat_s * random.uniform(0.9, 1.1)
                self.next_probe[client_id] = now + period

    def _watch_rounds(self) -> None:
        """A running member that answers pings but finishes no round for the stall time is
        hung all the same (a method stuck in a loop). When every member still running stalls
        and none has finished, nothing advances: the run stops. Members that finished show
        the ring worked; then the stalled ones are bypassed and the run ends with the rest."""
        if self.stop_reason is not None:
            return
        limit = self.timeouts.stall_s
        now = time.monotonic()
        states = {c: self.table.members[c].state for c in self.table.live}
        running = [c for c, state in states.items() if state == MemberState.RUNNING]
        finished = [c for c, state in states.items() if state == MemberState.DONE]
        stalled = [c for c in running if now - self.last_report.get(c, now) > limit]
        if stalled and len(stalled) == len(running) and not finished:
            self._stop(f"no member finished a round for {limit:g} s: {self._diagnosis()}")
            return
        for client_id in stalled:
            self._mark_dead(client_id, EventKind.HANG, f"no round finished in {limit:g} s")
            self.hung.add(client_id)

    def _diagnosis(self) -> str:
        members = self.table.members
        return "; ".join(
            f"client {c} last finished round {members[c].last_round} "
            f"({time.monotonic() - self.last_report.get(c, self.started_at):.0f} s ago)"
            for c in self.table.live
        )

    def _reconcile_views(self) -> None:
        """Broadcast new views only when the live set changed (after checkpointing it)."""
        if self.table.epoch != self.broadcast_epoch:
            self.checkpoint(force=True)
            self._broadcast()

    def _settle_heals(self) -> None:
        """A bypass has healed once every live member finished a round it began after it;
        the event records how long that took."""
        live = self.table.live
        if not live:
            return
        slowest = min(self.table.members[c].last_round for c in live)
        now = self._now()
        for bypassed_at, target in [h for h in self.healing if slowest >= h[1]]:
            self.healing.remove((bypassed_at, target))
            self._event(
                EventKind.HEALED,
                -1,
                target,
                "every live member passed the bypass",
                latency_s=now - bypassed_at,
            )

    def _log_round_means(self) -> None:
        """Client means of a round once every live member has reported it."""
        live = set(self.table.live)
        for round_ in sorted(self.by_round):
            reports = self.by_round[round_]
            if round_ in self.rounds_logged or not live <= set(reports):
                continue
            self.rounds_logged.add(round_)
            self.tracker.add_metrics(round_means(reports.values()), round_)

    # ---- checkpoint ---------------------------------------------------------------------

    def checkpoint(self, force: bool = False) -> None:
        """Save what a restarted coordinator needs: at once before acting on a change,
        else at most twice a second."""
        if not force and time.monotonic() - self.saved_at < 0.5:
            return
        self.saved_at = time.monotonic()
        write_record(
            self.checkpoint_path,
            CoordinatorRecord(
                run_id=self.tracker.run_id,
                table=self.table.to_record(),
                elapsed_s=self._now(),
                rows=self.rows,
                events=self.events,
                by_round={r: dict(reports) for r, reports in self.by_round.items()},
                rounds_logged=sorted(self.rounds_logged),
                done=self.done,
                errors=self.errors,
                hung=sorted(self.hung),
                healing=self.healing,
                unsent_metrics=self.tracker.unsent(),
            ),
        )

    def restore(self, adopt_clients: bool = True) -> bool:
        """Come back after a crash: membership and results from the checkpoint, what the
        clients reported since from their journals; views go out again on the next pass.
        False when there is no checkpoint (a new run). Without ``adopt_clients`` (a run
        resumed by a new driver) the clients register anew and ``resume_run`` follows."""
        saved = read_record(self.checkpoint_path)
        if saved is None:
            return False
        with self.lock:
            self.tracker.run_id = saved.run_id
            self.tracker.requeue(saved.unsent_metrics)
            self.table = MembershipTable.from_record(saved.table)
            self.started_at = time.monotonic() - saved.elapsed_s
            self.rows, self.events = saved.rows, saved.events
            self.by_round.update(saved.by_round)
            self.rounds_logged = set(saved.rounds_logged)
            self.done, self.errors = saved.done, saved.errors
            self.hung, self.healing = set(saved.hung), saved.healing
            if not adopt_clients:
                return True
            for client_id in self.table.live:
                handle = self.find_client(client_id)
                if handle is None:  # gone while we were down
                    self._mark_dead(
                        client_id, EventKind.CRASH, "gone while the coordinator was down"
                    )
                else:
                    self.handles[client_id] = handle
                    self.last_report[client_id] = time.monotonic()
            journals = {c: self.handles[c].journal() for c in self.table.live}
        self._replay_journals(journals)
        return True

    def resume_run(self) -> None:
        """Continue a resumed run: every registered live member from its own checkpoint."""
        with self.lock:
            now = time.monotonic()
            running = [c for c in self.table.live if c not in self.done]
            for client_id in running:
                self.table.members[client_id].state = MemberState.RUNNING
                self.last_report[client_id] = now
            journals = {c: self.handles[c].journal() for c in running}
        self._replay_journals(journals)
        with self.lock:
            self._event(EventKind.RUN_RESUMED, -1, -1, f"members {running}")
            self.checkpoint(force=True)
            self._broadcast()
            for client_id in running:
                self.handles[client_id].resume()

    def _replay_journals(self, journals: dict[int, Pending[list[dict]]]) -> None:
        """Apply what the clients reported while nobody recorded it."""
        replayed = 0
        for client_id, answer in journals.items():
            try:
                entries = answer.result(self.timeouts.journal_s)
            except Exception:  # noqa: BLE001 - gone or silent: the probes will settle it
                continue
            for entry in entries:
                replayed += self._replay(client_id, JournalEntry.from_dict(entry))
        with self.lock:
            self._event(
                EventKind.COORDINATOR_RESTORED, -1, -1, f"replayed {replayed} client reports"
            )

    def _replay(self, client_id: int, entry: JournalEntry) -> int:
        """Apply one journal entry a client kept; 1 if it was news to us."""
        if entry.kind == "round" and client_id not in self.by_round.get(entry.round, {}):
            self.report_round(client_id, entry.round, entry.metrics)
            return 1
        if entry.kind == "done" and client_id not in self.done:
            m = entry.metrics
            self.report_done(client_id, int(m["lost"]), int(m["hops"]), int(m["bytes_sent"]))
            return 1
        return 0

    # ---- helpers ------------------------------------------------------------------------

    def _broadcast(self) -> None:
        """One view for everyone: neighbour sets are derived from it, per round, by each client."""
        view = self.table.view()
        handles = {c: self.handles[c] for c in view.members}
        for client_id in view.members:
            self.handles[client_id].set_view(view, handles)
        self.broadcast_epoch = view.epoch

    def _mark_dead(self, client_id: int, cause: EventKind, detail: str) -> None:
        """Bypass a member; its event's latency is the time since it was last heard from
        (a bound on the detection latency: the fault came after its last sign of life)."""
        member = self.table.members[client_id]
        if self.table.mark(client_id, MemberState.DEAD):
            self.suspects.discard(client_id)
            silent = time.monotonic() - member.last_seen
            self._event(cause, client_id, member.last_round, detail, latency_s=silent)
            self._event(
                EventKind.BYPASS, client_id, member.last_round, f"ring now {self.table.live}"
            )
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
        self._event(EventKind.REJOIN, client_id, round_, f"spliced in after {after}")

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self._event(EventKind.RUN_STOPPED, -1, -1, reason)

    def _now(self) -> float:
        """Seconds since the rounds began: the events' clock."""
        return time.monotonic() - self.started_at

    def _event(
        self, kind: EventKind, client_id: int, round_: int, detail: str, **measured: float
    ) -> None:
        if len(self.events) >= MAX_EVENTS:
            return
        self.events.append(
            {
                "time_s": self._now(),
                "kind": EventKind(kind).value,  # an unknown kind fails here, not in a report
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
        self.open_tracking()
        with self.lock:
            for round_, reports in sorted(self.by_round.items()):
                if round_ not in self.rounds_logged:
                    self.rounds_logged.add(round_)
                    self.tracker.add_metrics(round_means(reports.values()), round_)
            summary = {**self.summary(wall_s), "partial": False}
            self.tracker.add_metrics(
                {
                    "final_local_acc": summary["local_acc"]["mean"],
                    "final_global_acc": summary["global_acc"]["mean"],
                    **run_level_metrics(summary),
                },
                summary["rounds_completed"],
            )
            config, rows, events = self.config.to_dict(), list(self.rows), list(self.events)
        write_outputs(self.output_dir, config, summary, rows, events)
        draw_run_figures(self.output_dir)  # uploaded with the outputs below
        private = () if self.config.tracking.upload_checkpoints else PRIVATE_OUTPUTS
        self.tracker.log_artifacts(self.output_dir, private)
        unsent = self.tracker.end()
        if unsent is not None:  # MLflow did not take everything: the summary says where it is
            summary["mlflow"]["unsent_metrics"] = str(unsent)
            write_outputs(self.output_dir, config, summary, rows, events)
        return summary

    def summary(self, wall_s: float) -> dict[str, Any]:
        live = self.table.live
        return summarise_run(
            self.config,
            RunFacts(
                members=len(self.table.members),
                rounds_completed=min(
                    (self.table.members[c].last_round + 1 for c in live), default=0
                ),
                ring_order=live,
                rows=self.rows,
                reports=[m for r in self.by_round.values() for m in r.values()],
                done=list(self.done.values()),
                events=self.events,
                stop_reason=self.stop_reason,
                mlflow={"tracking_uri": self.tracker.uri, "run_id": self.tracker.run_id},
            ),
            wall_s,
        )
