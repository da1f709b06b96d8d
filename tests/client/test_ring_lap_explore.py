"""The ring lap of three members under every schedule of a few network events, not a random
sample: a depth-first search over the choices open at each step (deliver any queued
message, at most one each of a loss, a duplicate, a reorder, a crash and an epoch change),
replaying each schedule on fresh client cores, and not expanding a state reached before.
Both kinds of lap: one token, and chunks (the ring all-reduce, its size threshold set to
nothing; after a crash two members are left, and the new epoch's lap goes as one token);
each searched from its start and from where members finish.

After every step: each member holding the lap's total holds the same total (but for one
that crashed holding it), and it is exactly the sum of the contributions of the members it
names. After the schedule, with a fair network: every live member's wait ends, every live
member's contribution is in the total (nothing acknowledged is lost) and no token circles
for ever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from ring_actors.client.lap_host import LapResult, lap_leader
from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.delivery.view import View
from tests.helpers.lap_sums import CHUNKED_SHAPE, LAP, ROUND, contribution, lap_value
from tests.helpers.scheduled_network import Net, adopt, ring

MEMBERS = 3
EVENTS = 3  # scheduled steps; past them the network is fair
BUDGET = {"lose": 1, "duplicate": 1, "reorder": 1, "crash": 1, "epoch": 1}
Choice = tuple[str, tuple]


def describe(target: int, payload: Payload) -> tuple:
    """A queued message, as a schedule names it (its position changes between replays)."""
    lap = payload.lap
    assert lap is not None
    return (
        target,
        payload.sender,
        payload.channel.value,
        lap.leader,
        lap.attempt,
        lap.epoch,
        lap.visited,
        lap.contributors,
        lap.chunk,
        lap.step,
    )


@dataclass
class Run:
    """One replay: a fresh ring of real client cores, each running the lap on its thread."""

    net: Net
    view: View
    threads: dict[int, threading.Thread]
    chunked: bool
    results: dict[int, LapResult | None] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    died_holding: set[int] = field(default_factory=set)  # members that crashed with a total

    @classmethod
    def start(cls, chunked: bool, fair: int) -> Run:
        """A fresh ring, its lap begun and ``fair`` messages delivered in order."""
        net, view = ring(MEMBERS, chunked=chunked)
        run = cls(net, view, {}, chunked)
        for m in range(MEMBERS):
            run.threads[m] = threading.Thread(target=run._lap, args=(m,), daemon=True)
            run.threads[m].start()
        first = MEMBERS if chunked else 1  # every member's own chunk, or the leader's token
        run.settle(lambda: len(net.queue) >= first)
        run.check_exact()
        for _ in range(fair):
            net.step("deliver", 0)
            run.settle(lambda: bool(net.queue))
            run.check_exact()
        return run

    def _lap(self, member: int) -> None:
        shape = CHUNKED_SHAPE if self.chunked else (1,)
        part = contribution(member, shape)
        self.results[member] = self.net.cores[member].laps.run(LAP, ROUND, part)

    @property
    def live(self) -> tuple[int, ...]:
        return self.view.members

    def quiet(self) -> bool:
        """No live member has a token to handle or a failed send it has not acted on yet
        (an acknowledgement only settles its send: nothing waits for it to be read)."""
        for m in self.live:
            core = self.net.cores[m]
            if core.inbox.peek(lambda p: p.channel == Channel.LAP):
                return False
            with core.outbox.lock:
                flights = list(core.outbox.in_flight)
            if any(f.answer.done() and f.answer.exception() is not None for f in flights):
                return False
        return True

    def settle(self, also: Callable[[], bool] = lambda: True, limit_s: float = 0.5) -> None:
        """Wait until every member has acted on what the last step gave it."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if also() and self.quiet():
                time.sleep(0.003)  # a forward between its pop and its send
                if also() and self.quiet():
                    return
            time.sleep(0.002)

    # ---- the choices --------------------------------------------------------------------

    def choices(self) -> list[Choice]:
        """Every step open now: one entry per distinct queued message and event left."""
        left = {k: v - self.used.get(k, 0) for k, v in BUDGET.items()}
        with self.net.lock:
            queued = [describe(t, p) for t, p, _ in self.net.queue]
        options: list[Choice] = []
        for index, message in enumerate(dict.fromkeys(queued)):
            options.append(("deliver" if index == 0 else "reorder", message))
            options += [(kind, message) for kind in ("lose", "duplicate") if left[kind]]
        if left["crash"] and len(self.live) == MEMBERS:
            options += [("crash", (m,)) for m in self.live]
        if left["epoch"]:
            options.append(("epoch", ()))
        return [c for c in options if c[0] != "reorder" or left["reorder"]]

    def step(self, choice: Choice) -> bool:
        """Take one step and check the totals; False when the message it names is not
        queued on this replay."""
        taken = self._apply(choice)
        self.check_exact()
        return taken

    def _apply(self, choice: Choice) -> bool:
        kind, what = choice
        self.used[kind] = self.used.get(kind, 0) + 1
        if kind in ("crash", "epoch"):
            gone = set(what)
            self.died_holding |= gone & set(self.held())
            self.net.crashed |= gone
            members = tuple(m for m in self.live if m not in gone)
            self.view = View(self.view.epoch + 1, members, (0,) * len(members))
            for m in members:
                adopt(self.net, m, self.view)
            self.settle(self._leader_restarted)
            return True
        with self.net.lock:
            queued = [describe(t, p) for t, p, _ in self.net.queue]
        if what not in queued:
            return False
        self.net.step("deliver" if kind == "reorder" else kind, queued.index(what))
        self.settle()
        return True

    def _leader_restarted(self) -> bool:
        """The new view's leader has sent a token of its epoch, or the lap is over."""
        leader = lap_leader(self.view, ROUND)
        if leader is None or self.net.cores[leader].laps.result(LAP, ROUND) is not None:
            return True
        with self.net.lock:
            return any(p.lap.epoch == self.view.epoch for _, p, _ in self.net.queue)

    def key(self) -> tuple:
        """The state a schedule reached: the network, every member's total, the view and
        the events left to spend."""
        with self.net.lock:
            queued = tuple(describe(t, p) for t, p, _ in self.net.queue)
        held = tuple(self.held().get(m, (None,))[0] for m in range(MEMBERS))
        return queued, held, self.view.members, self.view.epoch, tuple(sorted(self.used.items()))

    # ---- the invariants -----------------------------------------------------------------

    def held(self) -> dict[int, tuple[tuple[int, ...], float]]:
        """Every member's total (the dead's too: what it applied before dying counts)."""
        held = {}
        for m, core in self.net.cores.items():
            result = core.laps.result(LAP, ROUND)
            if result is not None:
                held[m] = (tuple(sorted(result.contributors)), lap_value(result.total))
        return held

    def check_exact(self) -> None:
        """Every total exact, and one total among the members, but for a member that
        crashed holding one: finished and gone before its total left it (as a token lap's
        leader can), it takes that total along, and the survivors sum themselves over
        their new view."""
        held = self.held()
        for contributors, total in held.values():
            assert len(set(contributors)) == len(contributors), held
            assert total == sum(2**c for c in contributors), held
        agreeing = {m: h for m, h in held.items() if m not in self.died_holding}
        assert len(set(agreeing.values())) <= 1, f"members hold different totals: {held}"

    def finish(self) -> None:
        """A fair network from here: every live wait ends, all live members are summed,
        and what is left in the network dies out."""
        give_up = self.net.cores[0].timeouts.lap_give_up_s
        deadline = time.monotonic() + give_up + 5
        while any(self.threads[m].is_alive() for m in self.live):
            assert time.monotonic() < deadline, "a member's wait never ended"
            self.net.step("deliver", 0)
            time.sleep(0.002)
        self.check_exact()
        for m in self.live:
            result = self.results[m]
            assert result is not None, f"member {m} gave up"
            assert set(self.live) <= set(result.contributors), (m, result.contributors)
        for _ in range(50 * MEMBERS):
            if not self.net.queue:
                break
            self.net.step("deliver", 0)
        assert not self.net.queue, f"tokens still circling: {self.net.queue[:3]}"


def explore(chunked: bool, fair: int = 0, events: int = EVENTS) -> tuple[int, int]:
    """Every schedule of ``events`` steps after ``fair`` in-order deliveries, depth first;
    (schedules run, distinct states).

    A run goes on with its first choice; each other choice replays the schedule so far on
    a fresh ring. A state reached before in as few steps is not expanded again.
    """
    seen: dict[tuple, int] = {}  # a state, and the fewest steps it was reached in
    stack: list[tuple[tuple[Choice, ...], Run | None]] = [((), None)]
    runs = 0
    while stack:
        schedule, run = stack.pop()
        if run is None:
            run, runs = Run.start(chunked, fair), runs + 1
            steps = schedule
        else:
            steps = schedule[-1:]
        if not all(run.step(choice) for choice in steps):
            run.finish()  # a fetch or restart fired sooner on this replay: another branch
            continue
        state, depth = run.key(), len(schedule)
        choices = run.choices() if depth < min(events, seen.get(state, events)) else []
        seen[state] = min(depth, seen.get(state, depth))
        if not choices:
            run.finish()
            continue
        stack.extend(((*schedule, c), None) for c in reversed(choices[1:]))
        stack.append(((*schedule, choices[0]), run))
    return runs, len(seen)


# Each search: the kind of lap, the messages delivered in order before it, its events, and
# the fewest distinct states it must reach (it went deep, not down one schedule). From the
# start, and where members finish: the token back at its leader, the chunks' last steps.
SEARCHES = {
    "token": (False, 0, EVENTS, 100),
    "token-finishing": (False, 2, 2, 40),
    "chunks": (True, 0, 2, 100),
    "chunks-finishing": (True, 3 * MEMBERS, 2, 100),
}


@pytest.mark.slow
@pytest.mark.parametrize("search", SEARCHES)
def test_every_schedule_of_a_few_events_keeps_the_lap_exact_and_every_wait_bounded(search):
    chunked, fair, events, least = SEARCHES[search]
    runs, states = explore(chunked, fair, events)
    print(f"explored {runs} schedules, {states} distinct states")
    assert states > least
