"""What a run keeps: the clients' checkpoints and the tracking store's metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ring_actors.config.checks import check
from ring_actors.timeouts import TRACKING_CLOSE_S


@dataclass(frozen=True)
class CheckpointSection:
    """How often a client with ``clients.checkpoint`` saves its private state."""

    # After every this many rounds (aligned: rounds every_rounds-1, 2*every_rounds-1, ...)
    # and after the last; a resume redoes the rounds since, and peers keep that many more
    # rounds of history for it. No time-based policy: it would leave a checkpoint an
    # unbounded number of rounds behind, and the history with it. 4: what a checkpoint
    # costs a round falls within the framework's CPU budget (docs/faults-and-recovery.md).
    every_rounds: int = 4
    # Write on a thread of its own, the round going on with a copy of the method handed
    # over (``auto``: for clients on a GPU, whose host cores idle while it trains). Where
    # every core trains, the copy and the second thread cost more CPU than they hide.
    background: bool | Literal["auto"] = "auto"

    def __post_init__(self) -> None:
        every = self.every_rounds
        check(every >= 1, "checkpoint.every_rounds", "an int >= 1", every)

    def due(self, round_: int, last_round: int) -> bool:
        """Whether the state after ``round_`` is saved."""
        return (round_ + 1) % self.every_rounds == 0 or round_ >= last_round

    def rounds_kept(self, base: int) -> int:
        """Rounds of history (pushes, published state, laps' totals) peers keep: ``base``
        for a resume from the round before, plus the rounds a checkpoint may lag."""
        return base + self.every_rounds - 1


@dataclass(frozen=True)
class TrackingSection:
    # False: no MLflow run; what the run measured is only in its folder (the output files).
    enabled: bool = True
    # The run's own figures (``curves.png``, ``timeline.png``) drawn in its folder at the end.
    figures: bool = True
    uri: str | None = None
    experiment: str | None = None
    # The clients' checkpoints hold their private models, which the methods promise never
    # leave a client: they are uploaded to MLflow only when this says so.
    upload_checkpoints: bool = False
    # An MLflow run this run is nested under (a sweep's parent run).
    parent_run_id: str | None = None
    # How long the run's end keeps trying a tracking server that does not answer, before
    # what it never took goes to unsent_metrics.jsonl.
    give_up_s: float = TRACKING_CLOSE_S

    def __post_init__(self) -> None:
        check(self.give_up_s > 0, "tracking.give_up_s", "a number of seconds > 0")
        off = "as tracking.enabled is false"  # both name an MLflow run
        check(
            self.enabled or not self.upload_checkpoints,
            "tracking.upload_checkpoints",
            f"false, {off}",
        )
        check(self.enabled or not self.parent_run_id, "tracking.parent_run_id", f"null, {off}")
