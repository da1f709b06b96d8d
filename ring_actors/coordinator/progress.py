"""The coordinator's answer to "where is the run?": one typed snapshot, polled by the driver,
the in-process ring and the benchmarks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ring_actors.coordinator.membership import MembershipTable
    from ring_actors.coordinator.results import Results


@dataclass(frozen=True)
class Progress:
    """A run's state at one moment, as the coordinator's membership table and results hold it."""

    round: int  # the lowest round a live member is in
    newest: int  # the newest round some member finished training
    epoch: int  # the membership epoch
    live: int  # live members
    done: int  # live members that finished all their rounds
    rounds_done: int  # client-rounds trained, departed members' included
    rounds_planned: int  # client-rounds trained when the members still in the run finish
    finished: bool  # every member still in the run is done (none is offline)
    stopped: str | None  # why the run was stopped, if it was
    offline: int = 0  # members away for an off period, due back: not live, not gone
    errors: list[dict[str, Any]] = field(default_factory=list)  # client errors, oldest first
    latest: dict[str, float] = field(default_factory=dict)  # means of the newest full round


def snapshot(
    table: MembershipTable, results: Results, rounds: int, stopped: str | None
) -> Progress:
    """The run as ``table`` and ``results`` hold it, for a run of ``rounds`` rounds. A member
    offline is still in the run: it will train its rounds when back, so the run is not
    finished while one is away."""
    live, remaining, members = table.live, table.remaining, table.members
    trained = {c: m.rounds_trained for c, m in members.items()}
    planned = sum(
        members[c].trained_before + rounds - members[c].first_round if c in remaining else done
        for c, done in trained.items()
    )
    return Progress(
        round=min((members[c].last_round + 1 for c in live), default=0),
        newest=table.newest_trained,
        epoch=table.epoch,
        live=len(live),
        offline=len(remaining) - len(live),
        done=sum(1 for c in live if c in results.done),
        # Rounds trained, departed members' included, and the rounds the run will have
        # trained when the members still in it finish: a joiner adds only its own.
        rounds_done=sum(trained.values()),
        rounds_planned=planned,
        finished=bool(remaining) and all(c in results.done for c in remaining),
        stopped=stopped,
        errors=list(results.errors),
        latest=results.latest_means(),
    )
