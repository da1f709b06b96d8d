"""A client's time budget, evaluation marks and off periods, on the run's clock.

The coordinator starts the run's clock once; every client takes it as its round loop begins,
a restarted one, a resumed one and a joiner included. A coordinator being restarted meanwhile
leaves the call unanswered: it is asked again until ``timeouts.control_give_up_s``, then the
client counts on from its own clock (since it was built), with one warning. The time budget
and the off periods of the availability model (``heterogeneity``) are seconds of the run, not
of the client's own loop: a client back from a restart gets no fresh budget and does not live
its off periods again, and those over before its loop began are none of its own.

An off period takes effect when it starts, as a device that goes away mid-round does: a
watcher leaves the ring at that moment, so nobody waits for this client from then on. The
round in progress stops at its next step (after the gather, the compute delay, training, each
pass of a lap wait, before publishing): what it trained stays in its model, and nothing of the
round goes out (no lap contribution, no push, no report). The client then stays off for the
rest of the period and comes back into the round the ring lets it run. A period that begins at
a round boundary is applied there; one that begins and ends while the client is not in a round
(or before the watcher saw it) is recorded all the same, as an ``offline`` event of 0 s
carrying its span, and not applied.
Leaving and coming back are calls with a deadline (``timeouts.client_control_s``); one left
unanswered is logged and the client goes on: a coordinator that missed the leave kept waiting
for it, and one that missed the come-back bypasses it as hung once it is overdue, until its
next report splices it in again.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from ring_actors.client.state import Events, Progress
from ring_actors.config import Config
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import UNANSWERED, ClientHandle, ControlLink, Pending
from ring_actors.delivery.view import View
from ring_actors.heterogeneity.model import Heterogeneity
from ring_actors.timeouts import Timeouts

log = logging.getLogger(__name__)

PAUSE_TICK_S = 0.05  # how often a compute delay looks for an off period that began


class AvailabilityHost(Events, Protocol):
    """What coming back asks of the client: the view the coordinator answered with."""

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None: ...


@dataclass(eq=False)
class Availability:
    """One client's time budget, evaluation marks and off periods, on the run's clock."""

    id: int
    config: Config
    progress: Progress
    hetero: Heterogeneity
    control: ControlLink
    run_clock: Callable[[], Pending[float]] | None  # how far the run is, by the coordinator
    timeouts: Timeouts
    host: AvailabilityHost

    def __post_init__(self) -> None:
        self.run_started_at = time.monotonic()  # the loop takes the run's clock as it begins
        self.next_period = 0  # the first off period not yet applied or recorded
        self.next_mark_s = self.config.eval.every_s or math.inf
        self.lock = threading.Lock()  # the periods, between the watcher and the round loop
        self.in_round = False
        self.departed: tuple[float, float] | None = None  # a period applied mid-round
        self.stopped = threading.Event()

    def watch(self) -> None:
        """Apply each off period that starts during a round when it starts (on a thread of
        its own, until :meth:`stop`)."""
        if self.hetero.offline_periods(self.id):
            threading.Thread(target=self._watch, name=f"away-{self.id}", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    def round_started(self) -> None:
        with self.lock:
            self.in_round = True

    def round_ended(self) -> None:
        with self.lock:
            self.in_round = False

    def commit_round(self) -> bool:
        """Whether the round may go out (publish, report): False if an off period began
        during it. From here on a period that begins waits for the round's end."""
        with self.lock:
            self.in_round = False
            return self.departed is None

    def departing(self) -> bool:
        """Whether an off period began during this round: the round stops at its next step."""
        return self.departed is not None

    def pause(self, delay_s: float) -> None:
        """Sleep ``delay_s`` (a compute delay), cut short by an off period that begins."""
        deadline = time.monotonic() + delay_s
        while not self.departing() and time.monotonic() < deadline:
            self.stopped.wait(min(PAUSE_TICK_S, deadline - time.monotonic()))

    def _watch(self) -> None:
        periods = self.hetero.offline_periods(self.id)
        while not self.stopped.is_set():
            with self.lock:
                index = self.next_period
            if index >= len(periods):
                return
            start, end = periods[index]
            if self.stopped.wait(max(0.0, start - self.run_s())):
                return
            with self.lock:  # still the next, and mid-round: applied now, by this thread
                leaves = self.next_period == index and self.in_round and end > self.run_s()
                if leaves:
                    self.next_period += 1
                    self.departed = (start, end)
            if leaves:
                self._leave(end - self.run_s())
            else:
                self.stopped.wait(PAUSE_TICK_S)  # the round loop handles it at its boundary

    def take_run_clock(self) -> None:
        """Anchor this process's clock to the run's, and skip the off periods already over.
        A client with no coordinator to ask (alone, in a test) counts from now."""
        if self.run_clock is None:
            self.run_started_at = time.monotonic()
        else:
            self.run_started_at = self._run_started_at(self.run_clock)
        elapsed_s = self.run_s()
        periods = self.hetero.offline_periods(self.id)
        self.next_period = 0
        while self.next_period < len(periods) and periods[self.next_period][1] <= elapsed_s:
            self.next_period += 1

    def _run_started_at(self, run_clock: Callable[[], Pending[float]]) -> float:
        """When the run began, on this process's clock: by the coordinator's answer, asked
        again while unanswered; past ``timeouts.control_give_up_s``, by this client's own."""
        unanswered: BaseException | None = None
        for wait_s in self.timeouts.control_attempts():
            try:
                return time.monotonic() - run_clock().result(wait_s)
            except UNANSWERED as err:
                unanswered = err
        log.warning(
            "client %d: the run's clock unanswered for %g s (%r); counting on from its own, "
            "%.2f s of the run",
            self.id,
            self.timeouts.control_give_up_s,
            unanswered,
            self.run_s(),
        )
        return self.run_started_at

    def run_s(self) -> float:
        """Seconds of the run so far."""
        return time.monotonic() - self.run_started_at

    def time_left(self) -> float:
        """Seconds of the run's time budget left (inf without a budget)."""
        budget = self.config.experiment.time_budget_s
        return math.inf if budget is None else budget - self.run_s()

    def evaluates(self, round_: int) -> bool:
        """Every ``eval.every`` rounds, each of the last ``eval.last_rounds`` rounds, and the
        first round past each ``eval.every_s`` mark of the run's clock."""
        every, end = self.config.eval.every, self.config.experiment.rounds
        final = round_ >= end - self.config.eval.last_rounds
        due = round_ % every == every - 1 or final or self.time_left() <= 0
        elapsed = self.run_s()
        if elapsed >= self.next_mark_s:
            every_s = self.config.eval.every_s or math.inf
            self.next_mark_s = (math.floor(elapsed / every_s) + 1) * every_s
            due = True
        return due

    def away_if_due(self, round_: int) -> int:
        """At a round boundary: stay off for the rest of a period applied mid-round, record
        each off period begun since the last one and over, and go offline for the rest of one
        under way. The round to run next."""
        if self.departed is not None:
            end = self.departed[1]
            round_ = self._come_back(round_, end - self.run_s())
            self.departed = None
        for start, end in self._begun():
            rest_s = end - self.run_s()
            if rest_s > 0:
                round_ = self._go_offline(round_, rest_s)
            else:
                self._not_applied(start, end)
        return round_

    def rounds_over(self) -> None:
        """The off periods begun during the last round, recorded: no round is left to
        leave after."""
        for start, end in self._begun():
            self._not_applied(start, end)

    def _begun(self) -> Iterator[tuple[float, float]]:
        """The off periods begun by now and not yet handed out, each handed out once."""
        periods = self.hetero.offline_periods(self.id)
        while True:
            with self.lock:
                index = self.next_period
                if index >= len(periods) or periods[index][0] > self.run_s():
                    return
                self.next_period += 1
            yield periods[index]

    def _not_applied(self, start: float, end: float) -> None:
        round_ = self.progress.round
        detail = f"{start:.2f}-{end:.2f} s of the run, begun during round {round_}"
        self.host.event(EventKind.OFFLINE, round_, detail, duration_s=0.0, from_s=start, to_s=end)

    def _go_offline(self, round_: int, off_s: float) -> int:
        """Leave the ring for ``off_s`` (the model, data and pending sends stay here; never
        past the time budget) and come back. The round to run next: the ring may have moved
        on while this client was away."""
        self._leave(off_s)
        return self._come_back(round_, off_s)

    def _leave(self, off_s: float) -> None:
        try:
            self.control.leave(self.id, self.progress.completed, off_s)
        except UNANSWERED as err:
            log.warning("client %d: leave unanswered (%r); offline all the same", self.id, err)

    def _come_back(self, round_: int, off_s: float) -> int:
        time.sleep(max(0.0, min(off_s, self.time_left())))
        try:
            back = self.control.come_back(self.id, self.progress.completed)
        except UNANSWERED as err:
            log.warning("client %d: come-back unanswered (%r); going on", self.id, err)
            return round_
        if back is None:  # nobody left to rejoin: go on alone
            return round_
        self.host.set_view(back.view, back.handles)
        return max(round_, back.first_round)
