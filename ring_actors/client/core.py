"""One client's round loop, with no Ray in it, composed of parts that each own their state.

The core owns a round (gather, merge, train, laps, evaluate, publish) and talks to the world
only through the transport's interfaces: peers are :class:`ClientHandle` s, the coordinator a
:class:`ControlLink`. Its parts are built here with what each uses: ``Exchange`` (gather,
pulls, push), ``Training`` (merge, train, laps, scores), ``PeerAnswers`` (the calls it
answers), ``Availability`` (the run's clock, budget and off periods) and ``Checkpointing``.
The Ray actor (``runtime/client_actor.py``) and the in-process ring (``in_process.py``) are
thin shells that build a core and forward calls to it.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path

from ring_actors.algorithms import Algorithm
from ring_actors.client.answers import PeerAnswers
from ring_actors.client.availability import Availability
from ring_actors.client.checkpoint import Checkpointing, PushSpool
from ring_actors.client.chunked_lap import chunk_limit
from ring_actors.client.collective_lap import CollectiveLaps
from ring_actors.client.exchange import Exchange
from ring_actors.client.isolation_and_noise import ExchangeControl
from ring_actors.client.lap_host import LapResult
from ring_actors.client.method_factory import client_seed
from ring_actors.client.resources import ClientData, SlotHolder, Ungated
from ring_actors.client.ring_lap import RingLaps
from ring_actors.client.round_meter import RoundMeter
from ring_actors.client.slot_release import IdleRelease, idle_facts, offloads, offloads_parameters
from ring_actors.client.state import Journal, Membership, PayloadSpecs, Progress, Published
from ring_actors.client.training import Training, scored
from ring_actors.config import Config
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.journal import JournalEntry
from ring_actors.delivery.outbox import Outbox
from ring_actors.delivery.payloads import Channel, Payload, detach_to_cpu
from ring_actors.delivery.rendezvous import Rendezvous
from ring_actors.delivery.transport import ClientHandle, ControlLink, Joining, PeerGone, Pending
from ring_actors.delivery.view import View
from ring_actors.delivery.wire import WirePayload
from ring_actors.faults.client_side import FaultActions, slow_delay, strike
from ring_actors.heterogeneity.model import Heterogeneity
from ring_actors.timeouts import Timeouts
from topologies import build_topology

log = logging.getLogger(__name__)

KEEP_ROUNDS = 3  # rounds of inbox history and lap results kept: older ones never matter


class LeftTheRing(Exception):
    """An off period began mid-round: the round stops where it is."""


class ClientCore:
    """Private data and model, a ``receive`` that only enqueues, and a round loop.

    ``receive``, ``serve``, ``ping`` and ``set_view`` are called from the transport's
    threads while ``run`` trains on its own thread, so they answer at once even
    mid-training. Every exchange (pushes, offers and pulls, ring laps, hand-offs) is a
    Payload on one channel or another, sent through one acknowledged outbox.
    ``run_clock`` asks the coordinator how far the run is (``client/availability.py``);
    ``cores``, the CPUs the ring's members step on (the cluster's; None: this machine's),
    decides which laps go in chunks (``schedule.chunked_laps``); ``rendezvous``, where the
    members of a lap's process group find each other (None: no collective engine).
    """

    def __init__(
        self,
        client_id: int,
        config: Config,
        algorithm: Algorithm,
        data: ClientData,
        control: ControlLink,
        slots: SlotHolder | None = None,
        faults: FaultActions | None = None,
        checkpoint_path: Path | None = None,
        run_clock: Callable[[], Pending[float]] | None = None,
        cores: int | None = None,
        rendezvous: Rendezvous | None = None,
    ) -> None:
        self.id = client_id
        self.config = config
        self.algorithm = algorithm  # the method now: a restored checkpoint replaces it
        self.device = algorithm.device
        self.data = data
        self.control = control
        offload = offloads(config.clients.offload_idle, self.device)
        self.slots = IdleRelease(
            slots or Ungated(),
            lambda: self.algorithm,
            self.device,
            offload,
            offloads_parameters(offload, config.clients.offload_parameters_mb, algorithm),
        )
        self.faults = faults
        self.timeouts = Timeouts.from_schedule(config.schedule)
        self.topology = build_topology(config.topology, config.experiment.seed)
        self.hetero = Heterogeneity(
            config.heterogeneity, config.experiment.seed, config.total_clients
        )
        exchange_control = ExchangeControl(
            config.schedule.exchange, client_seed(config.experiment.seed, client_id)
        )
        hand_off = detach_to_cpu(algorithm.hand_off_state())
        self.specs = PayloadSpecs.of(algorithm, hand_off, config)
        lock = threading.Lock()  # the view and what was pushed under it change together
        self.membership = Membership(lock)
        self.published = Published(lock, hand_off)
        self.progress = Progress()
        self.reports = Journal()  # what the coordinator was told
        self.inbox = Inbox()
        self.outbox = Outbox(self.timeouts, self.report_unreachable, self.event)
        ring_cores = cores or os.cpu_count() or 1
        engine = None
        # Simulated links delay hops between actors; the engine's TCP would bypass them.
        wanted = config.schedule.lap_engine != "ring" and not self.hetero.links_apply
        if rendezvous is not None and wanted:
            silent = config.schedule.lap_engine == "auto"
            engine = CollectiveLaps(self, rendezvous, self.timeouts.lap_retry_s, silent)
        self.laps = RingLaps(
            self, self.timeouts, chunk_limit(config.schedule.chunked_laps, ring_cores), engine
        )
        self.kept = PushSpool(client_id, checkpoint_path, self.inbox, config)
        self.answers = PeerAnswers(
            client_id, self.specs, progress=self.progress, membership=self.membership,
            published=self.published, inbox=self.inbox, kept=self.kept, outbox=self.outbox,
            laps=self.laps, topology=self.topology, hetero=self.hetero,
            num_samples=len(data.train), host=self,
        )  # fmt: skip
        self.exchange = Exchange(
            client_id, config, self.specs, progress=self.progress, membership=self.membership,
            published=self.published, inbox=self.inbox, outbox=self.outbox,
            topology=self.topology, control=exchange_control, slots=self.slots,
            num_samples=len(data.train), timeouts=self.timeouts, host=self,
        )  # fmt: skip
        self.training = Training(
            client_id, data, self.slots, exchange_control, self.laps, self.hetero, host=self
        )
        self.availability = Availability(
            client_id, config, self.progress, self.hetero, control, run_clock, self.timeouts,
            host=self,
        )  # fmt: skip
        self.checkpoint = Checkpointing(
            client_id, checkpoint_path, self.device, config.checkpoint,
            config.experiment.rounds - 1, progress=self.progress,
            published=self.published, journal=self.reports, laps=self.laps,
            outbox=self.outbox, kept=self.kept, control=control, host=self,
        )  # fmt: skip
        self.thread: threading.Thread | None = None
        self.resumed_after = -1  # a restarted client does not re-enter its fatal round's fault
        self.meter = RoundMeter(
            self.outbox, self.slots, self.exchange, len(data.train), self.device
        )
        self.slots.release()  # what building the method cached is not kept while waiting

    def start(self, first_round: int = 0, joining: Joining | None = None) -> None:
        """Start the round loop on its own thread and return at once; a joining client
        first waits for its donor's hand-off and initialises from it."""
        if self.thread is None:
            if self.progress.completed >= 0:  # restored from a checkpoint: skip its fault
                self.resumed_after = first_round
            self.progress.first_round = first_round
            self.progress.completed = first_round - 1
            self._start_thread(first_round, joining)

    def resume(self, struck_through: int = -1) -> None:
        """Continue a run from the round after the checkpoint's; the plan's entries strike
        after ``struck_through`` (the last round the coordinator heard of): the rounds redone
        since the checkpoint struck theirs before the run stopped."""
        if self.thread is None:
            self.resumed_after = max(self.progress.completed, struck_through)
            self._start_thread(self.progress.completed + 1, joining=None)

    def _start_thread(self, first_round: int, joining: Joining | None) -> None:
        self.thread = threading.Thread(
            target=self.run, args=(first_round, joining), name=f"client-{self.id}", daemon=True
        )
        self.thread.start()

    # ---- the calls it answers, and the checkpoint -----------------------------------------

    def receive(self, payload: Payload | WirePayload) -> bool:
        return self.answers.receive(payload)

    def serve(self, round_: int, keys: tuple[str, ...]) -> Payload | None:
        return self.answers.serve(round_, keys)

    def lap_result(self, name: str, round_: int) -> LapResult | None:
        return self.answers.lap_result(name, round_)

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None:
        self.answers.set_view(view, handles)
        if self.laps.engine is not None:  # the epoch's lap group forms while it trains
            self.laps.engine.on_view(self.current_view)

    def hand_off(self, joiner: int, handle: ClientHandle, round_: int) -> None:
        self.answers.hand_off(joiner, handle, round_)

    def ping(self) -> int:
        """Heartbeat: the last round this client finished."""
        return self.progress.completed

    def saved_rounds(self) -> tuple[int, ...]:
        return self.checkpoint.saved_rounds()

    def restore(self, at_most: int, restarts: Mapping[int, int]) -> int:
        """Before a resumed run's loop: its state of round ``at_most`` or before."""
        ready = self.thread is None
        return self.checkpoint.roll_back(at_most, restarts) if ready else self.completed

    def journal(self) -> list[dict]:
        """Every report sent to the coordinator, for a restarted coordinator to replay."""
        return self.reports.dicts()

    def stats(self) -> dict:
        """Counters for tests and debugging."""
        return {
            "round": self.progress.round,
            "completed": self.progress.completed,
            "epoch": self.membership.view.epoch,
            "inbox": len(self.inbox),
            "rejected": self.answers.rejected,
            "hops": self.outbox.hops,
            "bytes_sent": self.outbox.bytes_acked,
            **idle_facts(self.algorithm, self.device),
        }

    def save_checkpoint(self, round_: int) -> None:
        """The state after ``round_``, on disk when this returns."""
        self.checkpoint.save(round_)
        self.checkpoint.writer.flush()

    def load_checkpoint(self) -> int | None:
        return self.checkpoint.load()

    @property
    def completed(self) -> int:
        """The last round finished."""
        return self.progress.completed

    @property
    def max_payload_bytes(self) -> int:
        return self.specs.max_payload_bytes

    # ---- what the laps and the parts call back --------------------------------------------

    @property
    def current_view(self) -> View:
        return self.membership.current

    def send(self, target: int, payload: Payload) -> None:
        self.outbox.send(target, payload)

    def tick(self) -> None:
        self.outbox.poll()

    def event(self, kind: EventKind, round_: int, detail: str = "", **measured: float) -> None:
        self.control.report_event(kind, self.id, round_, detail, **measured)

    def fetch_lap_result(self, leader: int, name: str, round_: int) -> LapResult | None:
        handle = self.membership.handle(leader)
        if handle is None:
            return None
        try:
            return handle.lap_result(name, round_).result(self.timeouts.lap_fetch_s)
        except (PeerGone, TimeoutError):
            return None

    def time_left(self) -> float:
        return self.availability.time_left()

    def reject(self, reason: str) -> bool:
        return self.answers.reject(reason)

    def report_unreachable(self, target: int) -> None:
        self.control.report_unreachable(self.id, target, self.current_view.epoch)

    # ---- round loop ---------------------------------------------------------------------

    def run(self, first_round: int, joining: Joining | None) -> None:
        """Every round from ``first_round`` on; a failure is reported, never swallowed."""
        try:
            self.availability.take_run_clock()
            self.availability.watch()
            self.exchange.await_first_view()
            if joining is not None:
                with self.slots.resident():
                    self.algorithm.joining(first_round)
                self.exchange.initialise_from_hand_off(joining.donor)
                self.checkpoint.joined(first_round - 1)
            self._rounds(first_round)
            self.availability.rounds_over()
            self._score_at_budget_end()
            self.checkpoint.finish(self.progress.completed)
            self._report_done()
        except Exception as err:  # reported with its traceback: the coordinator decides
            log.exception("client %d failed in round %d", self.id, self.progress.round)
            text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
            self.control.report_failed(self.id, self.progress.round, text)
        finally:
            self.availability.stop()

    def _rounds(self, round_: int) -> None:
        """Round after round, to the last one or the end of the time budget."""
        while round_ < self.config.experiment.rounds and self.time_left() > 0:
            round_ = self.availability.away_if_due(round_)
            self.progress.round = round_
            self.availability.round_started()
            try:
                trained = self.run_round(round_)
            except LeftTheRing:  # an off period began: away, then the round the ring allows
                continue
            finally:
                self.availability.round_ended()
            if not trained:
                return  # the time budget ran out while it waited
            self.progress.completed = round_
            kept = self.config.checkpoint.rounds_kept(KEEP_ROUNDS)
            self.laps.forget_before(round_ - kept)
            self.inbox.forget_before(round_ - kept, Channel.SHARE)
            round_ += 1

    def run_round(self, round_: int) -> bool:
        """Gather, merge and train, run the laps, evaluate, publish, and report; False
        when the time budget ran out during the gather (nothing trained). An off period
        that begins before the publish stops it (:class:`LeftTheRing`)."""
        if round_ > self.resumed_after and self.faults is not None:
            strike(self.config.faults, self.id, round_, self.faults)
        before = self.meter.start()
        received = self.exchange.gather(round_)
        if self.time_left() <= 0:
            return False
        delay = slow_delay(self.config.faults, self.id, round_)
        if delay:
            self.availability.pause(delay)
        self._stay_in_ring()
        trained = self.training.train(round_, received)
        self._stay_in_ring()
        metrics = trained.metrics
        self.training.run_laps(round_, metrics)
        self._stay_in_ring()
        if self.availability.evaluates(round_):
            metrics.update(self.training.evaluate(round_))
        if not self.availability.commit_round():
            raise LeftTheRing
        self.exchange.publish(round_)
        self.answers.hand_offs_due()
        metrics.update(self.meter.measured(before, len(received), trained, delay))
        self._report_round(round_, metrics)
        return True

    def _stay_in_ring(self) -> None:
        """Stop the round here if an off period began during it: what it trained stays in
        the model, nothing of it goes out."""
        if self.availability.departing():
            raise LeftTheRing

    def departing(self) -> bool:
        return self.availability.departing()

    def count_collective(self, nbytes: int, members: int) -> None:
        self.outbox.count_collective(nbytes, members)

    def _report_round(self, round_: int, metrics: dict[str, float]) -> None:
        """Journal the report, hand a due checkpoint to its writer, then tell the coordinator
        (a crash before the write is done resumes from an older round and redoes this one)."""
        self.reports.add(JournalEntry("round", round_, dict(metrics)))
        self.checkpoint.after_round(round_)
        self.control.report_round(self.id, round_, metrics)

    def _score_at_budget_end(self) -> None:
        """A budget that ended the loop while the client was offline or gathering (or after
        its round's evaluation was decided) left the newest model unscored: score it once,
        reported again as the round it finished. The coordinator adds the scores to that
        round's report (a row, not a second round)."""
        round_ = self.progress.completed
        report = self.reports.round_report(round_)
        if self.time_left() > 0 or report is None or scored(report):
            return
        report.update(self.training.evaluate(round_))
        self.reports.add(JournalEntry("round", round_, dict(report)))  # replaces the first
        self.control.report_round(self.id, round_, report)

    def _report_done(self) -> None:
        """Wait for the acknowledgements still owed, then report the run's end counters."""
        lost = self.outbox.drain(self.timeouts.drain_s)
        if lost:
            unacknowledged = "; ".join(self.outbox.unacknowledged())
            self.event(EventKind.PAYLOADS_LOST, self.progress.round, unacknowledged)
        done = {"lost": lost, "hops": self.outbox.hops, "bytes_sent": self.outbox.bytes_acked}
        self.reports.add(JournalEntry("done", self.progress.round, dict(done)))
        self.control.report_done(self.id, lost, self.outbox.hops, self.outbox.bytes_acked)
