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
