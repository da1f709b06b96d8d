"""Every kind of event a run records, defined once.

Clients report events to the coordinator and the coordinator records its own; both name them
here, the run summary counts them by these names, and ``events.parquet`` holds their values.
"""

from __future__ import annotations

import enum


class EventKind(str, enum.Enum):
    """An event's kind; its value is what ``events.parquet`` and MLflow hold."""

    # membership
    JOIN = "join"
    REJOIN = "rejoin"
    CRASH = "crash"
    HANG = "hang"
    ERROR = "error"
    CLIENT_ERROR = "client_error"
    UNREACHABLE = "unreachable"
    BYPASS = "bypass"
    HEALED = "healed"
    # heterogeneity: a client offline (with its duration_s), and the delays it is given
    OFFLINE = "offline"
    LEAVE = "leave"
    COMPUTE_DELAY = "compute_delay"
    LINK_DELAY = "link_delay"
    # a persistent straggler taken off (and put back on) the ring's critical path
    STRAGGLER = "straggler"
    STRAGGLER_CLEARED = "straggler_cleared"
    # the run
    RUN_RESUMED = "run_resumed"
    RUN_STOPPED = "run_stopped"
    COORDINATOR_RESTORED = "coordinator_restored"
    # joining
    JOIN_FRESH = "join_fresh"
    JOIN_SKIPPED = "join_skipped"  # its first round would be past the run's last
    JOIN_WITHOUT_HAND_OFF = "join_without_hand_off"
    JOIN_INITIALISED = "join_initialised"
    # delivery
    PAYLOAD_REJECTED = "payload_rejected"
    STALE_PAYLOAD_DROPPED = "stale_payload_dropped"
    DELIVERY_FAILED = "delivery_failed"
    PAYLOADS_LOST = "payloads_lost"
    PAYLOAD_NOT_KEPT = "payload_not_kept"  # its receiver never saved it, however often sent
    WAIT_TIMEOUT = "wait_timeout"
    PULL_FAILED = "pull_failed"
    NON_FINITE_CONTRIBUTION = "non_finite_contribution"
    # laps
    LAP_RESTARTED = "lap_restarted"
    LAP_RESULT_FETCHED = "lap_result_fetched"
    LAP_RESULT_REFUSED = "lap_result_refused"
    LAP_TOKEN_DROPPED = "lap_token_dropped"
    LAP_TOKEN_REFUSED = "lap_token_refused"  # its tensors would broadcast into ours
    LAP_FAILED = "lap_failed"
    LAP_GROUP_FORMED = "lap_group_formed"  # the epoch's collective group, with its duration_s
    LAP_ENGINE_FALLBACK = "lap_engine_fallback"  # the collective could not sum: the ring lap

    def __str__(self) -> str:
        return self.value
