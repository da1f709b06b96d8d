"""How the coordinator survives its own death: a record written before every change it acts
on, read back by a restarted coordinator, and the clients' journals replayed for what they
reported while nobody was recording."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ring_actors.coordinator.changes import RingChanges
from ring_actors.coordinator.history import read_history
from ring_actors.coordinator.membership import MemberState
from ring_actors.coordinator.record import CoordinatorRecord, read_record, write_record
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.roster import Roster
from ring_actors.coordinator.untracked import RunTracker
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.journal import JournalEntry
from ring_actors.delivery.transport import ClientHandle, Pending, wait_all
from ring_actors.timeouts import Timeouts

RECORD_EVERY_S = 0.5  # the record is rewritten at most this often, unforced


class Reports(Protocol):
    """Where a replayed journal entry goes: the coordinator's own RPCs, as if just sent."""

    def report_round(self, client_id: int, round_: int, metrics: dict[str, float]) -> None: ...

    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None: ...


@dataclass(eq=False)
class Recovery:
    """The coordinator's checkpoint and restore."""

    checkpoint_path: Path
    timeouts: Timeouts
    lock: threading.RLock
    roster: Roster
    # a restarted coordinator finds its clients again
    find_client: Callable[[int], ClientHandle | None]
    results: Results
    tracker: RunTracker
    changes: RingChanges
    reports: Reports
    saved_at: float = field(default=0.0, init=False)

    def checkpoint(self, force: bool = False) -> None:
        """Save what a restarted coordinator needs: at once before acting on a change,
        else at most every ``RECORD_EVERY_S``."""
        if not force and time.monotonic() - self.saved_at < RECORD_EVERY_S:
            return
        self.saved_at = time.monotonic()
        results, roster = self.results, self.roster
        results.history.flush()  # first: the record never runs ahead of the history
        write_record(
            self.checkpoint_path,
            CoordinatorRecord(
                run_id=self.tracker.run_id,
                table=roster.table.to_record(),
                elapsed_s=results.now(),
                rows=[],  # in the history log
                events=[],
                by_round={},
                rounds_logged=sorted(results.rounds_logged),
                done=results.done,
                errors=results.errors,
                hung=sorted(roster.health.hung),
                healing=roster.health.healing,
                unsent_metrics=self.tracker.unsent(),
                written_at=time.time(),
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
            roster = self.roster
            roster.restore(saved.table, saved.hung, saved.healing)
            results = self.results
            # Mid-run, the time it was down is the run's; a resumed run's downtime is not.
            down_s = time.time() - saved.written_at if adopt_clients and saved.written_at else 0
            results.started_at = time.monotonic() - saved.elapsed_s - max(0.0, down_s)
            # A record of an older version holds the history itself; ours, the log.
            history = read_history(results.history.path)
            results.rows = saved.rows + history.rows
            results.events = saved.events + history.events
            results.by_round.update(saved.by_round)
            for round_, reports in history.by_round.items():
                results.by_round[round_].update(reports)
            results.rounds_logged = set(saved.rounds_logged)
            results.done, results.errors = saved.done, saved.errors
            if not adopt_clients:
                return True
            self.changes.ring_started = True  # its views go out again on the next pass
            for client_id in roster.table.live:
                handle = self.find_client(client_id)
                if handle is None:  # gone while we were down
                    self.changes.mark_dead(
                        client_id, EventKind.CRASH, "gone while the coordinator was down"
                    )
                else:
                    roster.reconnect(client_id, handle)
            journals = {c: roster.handles[c].journal() for c in roster.table.live}
        self._replay_journals(journals)
        return True

    def resume_run(self) -> None:
        """Continue a resumed run: every member with rounds left, from its own checkpoint,
        the live ones all from the newest round each of them holds (``common_round``).

        Live members resume in the view. One away when the run stopped resumes too, or its
        new actor's loop never starts and the run never ends: one offline and due back later
        sits out the rest of its off period and comes back itself; one due back by now is
        back at once, from the round the ring cannot have begun; one bypassed as hung
        rejoins with its next report."""
        with self.lock:
            roster = self.roster
            unfinished = [c for c in roster.table.order if c not in self.results.done]
            running = [c for c in roster.table.live if c in unfinished]
            for client_id in running:
                roster.resume(client_id)
            away = [c for c in unfinished if self._away_with_a_loop(c)]
            back = [c for c in roster.table.offline if c in away and self._due_back(c)]
            first_rounds = {}
            for client_id in back:
                last = roster.table.members[client_id].last_round
                first_rounds[client_id] = first = self.changes.entry_round(last + 1, client_id)
                roster.come_back(client_id, first)
                detail = f"back from offline as the run resumed, from round {first}"
                self.changes.event(EventKind.REJOIN, client_id, first, detail)
            journals = {c: roster.handles[c].journal() for c in running + away}
            saved = {c: roster.handles[c].saved_rounds() for c in running}
        self._replay_journals(journals)
        self._restart_together(running, wait_all(saved, self.timeouts.journal_s))
        with self.lock:
            detail = f"members {running}" + (f", away {away}" if away else "")
            self.changes.event(EventKind.RUN_RESUMED, -1, -1, detail)
            self.checkpoint(force=True)
            self.changes.broadcast()
            handles = roster.handles
            members = roster.table.members
            for client_id in running:
                handles[client_id].resume(members[client_id].last_round)
            for client_id in away:
                if client_id in back:
                    handles[client_id].start(first_rounds[client_id])
                else:
                    handles[client_id].resume(members[client_id].last_round)

    def _restart_together(self, running: list[int], answers: Mapping[int, object]) -> None:
        """Restore the live members at one round, before any view has them send again."""
        saved = {c: r for c, r in answers.items() if isinstance(r, (tuple, list)) and r}
        at_most = common_round(saved)
        if at_most is None:
            return
        restarts = {c: restart_round(rounds, at_most) for c, rounds in saved.items()}
        handles = self.roster.handles
        calls = {c: handles[c].restore(at_most, restarts) for c in running}
        wait_all(calls, self.timeouts.journal_s)

    def _away_with_a_loop(self, client_id: int) -> bool:
        """Offline, or bypassed as hung, with an actor of this run to resume."""
        roster = self.roster
        state = roster.table.members[client_id].state
        away = state == MemberState.OFFLINE or (
            state == MemberState.DEAD and client_id in roster.health.hung
        )
        return away and client_id in roster.handles

    def _due_back(self, client_id: int) -> bool:
        return (self.roster.table.members[client_id].due_back_s or 0.0) <= self.results.now()

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
            self.changes.event(
                EventKind.COORDINATOR_RESTORED, -1, -1, f"replayed {replayed} client reports"
            )

    def _replay(self, client_id: int, entry: JournalEntry) -> int:
        """Apply one journal entry a client kept; 1 if it was news to us."""
        if entry.kind == "round" and not self.results.has_round(client_id, entry.round):
            self.reports.report_round(client_id, entry.round, entry.metrics)
            return 1
        if entry.kind == "done" and client_id not in self.results.done:
            m = entry.metrics
            self.reports.report_done(
                client_id, int(m["lost"]), int(m["hops"]), int(m["bytes_sent"])
            )
            return 1
        return 0


def common_round(saved: Mapping[int, Sequence[int]]) -> int | None:
    """The round the live members of a resumed run restart after: the oldest of their
    newest checkpoints (each also holds the one before). A member rolled back with the
    rest redoes rounds its peers redo too, so no peer needs a lap's total or a push that
    only a newer checkpoint of its had. None: no member holds a checkpoint."""
    return min((rounds[-1] for rounds in saved.values()), default=None)


def restart_round(rounds: Sequence[int], at_most: int) -> int:
    """The round of the checkpoint a member with checkpoints of ``rounds`` (oldest first)
    restores when asked for one of ``at_most`` or before: its newest, else the one before."""
    return rounds[-1] if rounds[-1] <= at_most else rounds[0]
