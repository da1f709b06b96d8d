"""The fault plan's entries: what a run injects, when, and into whom."""

from __future__ import annotations

from dataclasses import dataclass

from ring_actors.config.checks import check

CLIENT_FAULT_ACTIONS = ("crash", "hang", "slow", "error", "kill_node", "fail_start")  # client ids
FAULT_ACTIONS = (*CLIENT_FAULT_ACTIONS, "join", "kill_coordinator")


@dataclass(frozen=True)
class FaultSection:
    """One fault-plan entry, applied once the ring reaches ``at_round``.

    ``crash``: these clients' processes exit at the start of that round. ``hang``: they freeze
    (the whole process, heartbeats included) for ``for_s`` seconds. ``slow``: they sleep
    ``delay_s`` every round from then on. ``error``: their method raises in that round, as a
    bug would, and ``schedule.on_client_error`` decides what follows. ``join``: that many new
    clients (with data partitions of their own) are spliced into the running ring before it
    begins that round, which is the first they train. ``kill_node``: every client
    on the node that hosts each listed client dies at once. ``kill_coordinator``: the
    coordinator is killed; Ray restarts it and it recovers from its checkpoint.
    ``fail_start``: these clients' actor constructors raise, the first ``times`` attempts of
    each (``at_round`` must be 0: construction comes before round 0), as a node under pressure
    fails a start; the launch retries them (``clients.on_launch_failure``).
    """

    at_round: int
    crash: tuple[int, ...] = ()
    hang: tuple[int, ...] = ()
    for_s: float = 0.0
    slow: tuple[int, ...] = ()
    delay_s: float = 0.0
    error: tuple[int, ...] = ()
    join: int = 0
    kill_node: tuple[int, ...] = ()
    kill_coordinator: bool = False
    fail_start: tuple[int, ...] = ()
    times: int = 1

    def __post_init__(self) -> None:
        check(self.at_round >= 0, "faults[].at_round", "an int >= 0", self.at_round)
        actions = [name for name in FAULT_ACTIONS if getattr(self, name)]
        allowed = "an entry with exactly one of: " + ", ".join(FAULT_ACTIONS)
        check(len(actions) == 1, "faults[]", allowed, actions)
        if self.slow:
            check(self.delay_s > 0, "faults[].delay_s", "a number > 0", self.delay_s)
        if self.hang:
            check(self.for_s > 0, "faults[].for_s", "a number > 0", self.for_s)
        check(self.for_s >= 0, "faults[].for_s", "a number >= 0", self.for_s)
        check(self.delay_s >= 0, "faults[].delay_s", "a number >= 0", self.delay_s)
        check(self.join >= 0, "faults[].join", "an int >= 0 (clients joining)", self.join)
        check(self.times >= 1, "faults[].times", "an int >= 1 (failed starts)", self.times)
        if self.fail_start:
            check(self.at_round == 0, "faults[].at_round", "0 for fail_start", self.at_round)


def within_run(entry: FaultSection, rounds: int | None) -> bool:
    """Whether ``entry`` can take effect in a run of ``rounds`` rounds (None: no end): one
    at or past the end strikes nobody, and a joiner there would have no round to train."""
    return rounds is None or entry.at_round < rounds


def describe_entry(entry: FaultSection) -> str:
    """One entry as a person reads it: ``round 2: crash client 1``."""
    if entry.join:
        what = f"join {entry.join} new client{'s' if entry.join > 1 else ''}"
    elif entry.kill_coordinator:
        what = "kill the coordinator"
    else:
        action = next(name for name in CLIENT_FAULT_ACTIONS if getattr(entry, name))
        ids = getattr(entry, action)
        what = f"{action.replace('_', ' ')} client{'s' if len(ids) > 1 else ''} "
        what += ", ".join(str(c) for c in ids)
        if entry.hang:
            what += f" for {entry.for_s:g} s"
        elif entry.slow:
            what += f" by {entry.delay_s:g} s a round"
        elif entry.fail_start:
            what += f" ({entry.times} time{'s' if entry.times > 1 else ''})"
    return f"round {entry.at_round}: {what}"


def plan_lines(plan: tuple[FaultSection, ...], rounds: int) -> list[str]:
    """The fault plan as the dry run and a run's first lines print it, each entry past the
    run's end marked skipped: no fault runs that the user did not see announced."""
    last = f"skipped: the run's last round is {rounds - 1}"
    return [
        describe_entry(entry) + ("" if within_run(entry, rounds) else f" ({last})")
        for entry in plan
    ]
