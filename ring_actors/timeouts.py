"""Every wait in the runtime, derived by name from the one configured hop timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ring_actors.config import ClientsSection, ScheduleSection

LAP_FETCH_CAP_S = 5.0  # a lap result is a small call to one peer: never wait long for it
RESEND_CAP_S = 1.0  # a send to a peer being restarted is tried again at least this often
RECONCILE_CAP_S = 0.2  # the coordinator's reconcile pass runs at least this often
SLOT_LEASE_S = 10.0  # a compute slot not renewed this long goes back to its pool
LINK_WAKE_CAP_S = 60.0  # the link scheduler looks at its next hop at least this often
LAUNCH_PAUSE_CAP_S = 1.0  # between a failed client start and the next; the launch's poll
TRACKING_CLOSE_S = 60.0  # the tracker's ``end`` retries MLflow this long (tracking.give_up_s)
TRACKING_REQUEST_S = 10  # one MLflow HTTP request's timeout (MLFLOW_HTTP_REQUEST_TIMEOUT)
# The coordinator's finalize joins its reconcile loop and its MLflow-open thread this long at
# most before it closes the tracker.
LOOP_JOIN_S = 5.0
TRACKING_OPEN_JOIN_S = 30.0


@dataclass(frozen=True)
class Timeouts:
    """Named waits: ``schedule.hop_timeout_s`` sets them all, each at the multiple it needs."""

    hop_s: float  # a send unacknowledged this long gets its target reported
    gather_s: float  # the longest a round waits for its in-neighbours' payloads
    round_wait_s: float  # what a round waits for them: schedule.max_wait_s, at most gather_s
    # The longest a joiner waits for its donor's hand-off: the donor sends it once it ends the
    # round before the joiner's first, and a member that ends no round this long is hung.
    hand_off_s: float
    pull_s: float  # the longest a pull waits for the peers' answers
    lap_retry_s: float  # a lap leader restarts an attempt that has not come back
    lap_give_up_s: float  # a lap that has not finished by then is abandoned
    lap_fetch_s: float  # a client missing a lap's result asks the leader this long
    drain_s: float  # at the end, the longest a client waits for its last acknowledgements
    probe_s: float  # the coordinator declares a member hung after this long without a ping
    journal_s: float  # a restarted coordinator's wait for each client's journal
    resend_s: float  # a send to a peer being restarted is tried again after this long
    stall_s: float  # a member that finishes no round this long is hung (the run, if all are)
    reconcile_s: float  # the coordinator's reconcile loop sleeps this long between passes
    slot_lease_s: float  # a slot not renewed this long goes back to its pool
    # A client waits this long for a compute slot, then computes without one: half the stall
    # limit, so a pool that grants nothing never gets its waiting clients taken as hung.
    slot_wait_s: float
    control_s: float  # the driver's call to the coordinator, answered under its lock
    # A client's call that waits for the coordinator's answer (leave, come back, rejoin, the
    # run's clock): a coordinator being restarted must not hold a client for good.
    client_control_s: float
    # A client's call it cannot start without (the run's clock, a restarted client's rejoin)
    # is asked again while unanswered: after control_retry_s, the pause doubling up to
    # client_control_s, until control_give_up_s, as long as a coordinator may take to come back.
    control_retry_s: float
    control_give_up_s: float
    coordinator_back_s: float  # a coordinator unanswering this long is gone: the run ends
    finalize_s: float  # the driver's wait for the outputs, the tracker's close included

    @classmethod
    def from_schedule(
        cls, schedule: ScheduleSection, tracking_give_up_s: float = TRACKING_CLOSE_S
    ) -> Timeouts:
        """A lap restart covers a full circuit of hops (2x); giving up allows several (6x).
        A restarted coordinator reads its record and waits for the clients' journals
        (``journal_s`` each, in flight together): ten hops bound its return. The end waits
        for the tracker's close as well, ``tracking_give_up_s`` at most."""
        hop_s = schedule.hop_timeout_s
        return cls(
            hop_s=hop_s,
            gather_s=hop_s,
            round_wait_s=min(
                hop_s, schedule.max_wait_s if schedule.max_wait_s is not None else hop_s
            ),
            hand_off_s=schedule.stall_hops * hop_s,
            pull_s=hop_s,
            lap_retry_s=2 * hop_s,
            lap_give_up_s=6 * hop_s,
            lap_fetch_s=min(LAP_FETCH_CAP_S, hop_s),
            drain_s=3 * hop_s,
            probe_s=hop_s,
            journal_s=hop_s,
            resend_s=min(RESEND_CAP_S, hop_s / 4),
            stall_s=schedule.stall_hops * hop_s,
            reconcile_s=min(RECONCILE_CAP_S, schedule.heartbeat_s),
            slot_lease_s=SLOT_LEASE_S,
            slot_wait_s=schedule.stall_hops * hop_s / 2,
            control_s=2 * hop_s,
            client_control_s=2 * hop_s,
            control_retry_s=min(RESEND_CAP_S, hop_s / 4),
            control_give_up_s=10 * hop_s,
            coordinator_back_s=10 * hop_s,
            finalize_s=2 * hop_s
            + LOOP_JOIN_S
            + TRACKING_OPEN_JOIN_S
            + tracking_give_up_s
            + TRACKING_REQUEST_S
            + 5,
        )

    def control_attempts(self) -> Iterator[float]:
        """The wait of each attempt at a client's call that is asked again while unanswered:
        the first at once, each next after a pause, none begun past ``control_give_up_s``.
        The caller stops at its first answer; the loop's end is the call given up."""
        deadline = time.monotonic() + self.control_give_up_s
        pause_s = self.control_retry_s
        while True:
            yield min(self.client_control_s, max(0.0, deadline - time.monotonic()))
            if time.monotonic() + pause_s >= deadline:
                return
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, self.client_control_s)


@dataclass(frozen=True)
class LaunchTimeouts:
    """The launch's waits (``runtime/client_starts.py``), from ``clients.start_timeout_s``."""

    construct_s: float  # one attempt at a client actor: placed, process started, constructed
    retry_pause_s: float  # after a failed attempt, before the next (Ray frees the actor's name)
    poll_s: float  # the launch looks at expired attempts and memory at least this often

    @classmethod
    def from_clients(cls, clients: ClientsSection) -> LaunchTimeouts:
        """An attempt may take the whole start timeout; pauses stay short beside it."""
        start_s = clients.start_timeout_s
        return cls(
            construct_s=start_s,
            retry_pause_s=min(LAUNCH_PAUSE_CAP_S, start_s / 10),
            poll_s=min(LAUNCH_PAUSE_CAP_S, start_s / 10),
        )
