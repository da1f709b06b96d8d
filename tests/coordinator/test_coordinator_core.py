"""The coordinator's control logic in-process: admission, probes, bypass, the error policy,
the round watchdog, and a checkpoint written before the coordinator acts."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from ring_actors.config import config_from_dict
from ring_actors.coordinator.core import CoordinatorCore
from ring_actors.coordinator.history import read_history
from ring_actors.coordinator.membership import MemberState
from ring_actors.coordinator.outputs import WRITE_COST_SHARE
from ring_actors.coordinator.tracking import Retry, Tracker
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import Joining
from ring_actors.storage.run_folder import RunFolder
from tests.helpers.scripted_clients import ScriptedClient, make


def settle(core, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        core.reconcile()
        time.sleep(0.01)


def until(core, done, timeout: float = 5.0) -> None:
    """Reconcile until ``done()``; fails the test if it never is."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the coordinator never got there"
        core.reconcile()
        time.sleep(0.01)


def test_start_sends_one_view_and_starts_everyone(tmp_path):
    core, handles = make(tmp_path)
    for c in range(3):
        (view,) = handles[c].views
        assert view.members == (0, 1, 2) and handles[c].started == [(0, None)]


def test_no_view_goes_out_while_the_launch_still_registers_members(tmp_path):
    """A pass between two registrations sends nothing: a partial view would have its
    members form a lap group of two that the start's view replaces at once."""
    config = config_from_dict({"experiment": {"rounds": 5}, "clients": {"count": 3}})
    handles = {c: ScriptedClient(c) for c in range(3)}
    core = CoordinatorCore(config, tmp_path, Tracker("unused", "t", "run"), handles.get)
    for c in range(3):
        core.register(c, handles[c], "node")
        core.reconcile()
    assert all(not h.views for h in handles.values())
    core.start_clients()
    core.reconcile()
    assert [len(h.views) for h in handles.values()] == [1, 1, 1]


def test_a_dead_member_is_bypassed_and_the_survivors_get_a_new_view(tmp_path):
    core, handles = make(tmp_path)
    handles[1].state = "dead"
    until(core, lambda: core.table.live == [0, 2])
    assert handles[0].views[-1].members == (0, 2)
    assert [e["kind"] for e in core.events][:2] == ["crash", "bypass"]


def test_a_silent_member_is_bypassed_as_hung_after_the_probe_timeout(tmp_path):
    core, handles = make(tmp_path)
    handles[2].state = "silent"
    core.reconcile()
    probed_at = core.health.probes[2][1]
    until(core, lambda: not core.table.is_live(2))
    assert time.monotonic() - probed_at >= 0.3 and 2 in core.health.hung  # after the probe timeout


def test_a_member_being_restarted_is_asked_again_and_bypassed_only_past_the_timeout(tmp_path):
    core, handles = make(tmp_path)
    handles[1].state = "restarting"
    core.reconcile()
    first_probe = core.health.probes[1][1]
    core.reconcile()
    assert core.table.is_live(1) and core.health.probes[1][1] == first_probe  # same deadline
    handles[1].state = "alive"
    settle(core, 0.5)
    assert core.table.is_live(1)
    handles[1].state = "restarting"
    until(core, lambda: not core.table.is_live(1))
    assert [e["kind"] for e in core.events if e["client"] == 1] == ["hang", "bypass"]


def test_admission_is_checkpointed_before_it_is_broadcast(tmp_path):
    core, handles = make(tmp_path)
    core.report_round(0, 0, {"loss": 1.0})
    core.admit(3, handles[3], "node")
    epoch = core.table.epoch
    # The coordinator dies now, before its timer would have saved anything.
    restarted = CoordinatorCore(core.config, tmp_path, Tracker("unused", "t", "run"), handles.get)
    assert restarted.restore()
    assert 3 in restarted.table.live and restarted.table.epoch == epoch
    restarted.report_event(EventKind.WAIT_TIMEOUT, 0, 0)
    handles[1].state = "dead"
    until(restarted, lambda: not restarted.table.is_live(1))
    assert restarted.table.epoch > epoch  # epochs never repeat across a restart


def test_a_retried_admission_changes_nothing(tmp_path):
    core, handles = make(tmp_path)
    after = core.admit(3, handles[3], "node")
    epoch = core.table.epoch
    assert core.admit(3, handles[3], "node") == after
    assert core.table.epoch == epoch and handles[3].started == [(1, Joining(0))]


@pytest.mark.parametrize("policy", ["drop", "stop"])
def test_a_client_error_follows_the_policy(tmp_path, policy):
    core, _ = make(tmp_path, on_client_error=policy)
    core.report_failed(1, 2, "Traceback ...\nRuntimeError: boom\n")
    assert core.errors[0]["error"].endswith("boom\n")
    if policy == "drop":
        assert core.table.live == [0, 2] and core.progress().stopped is None
    else:
        assert core.table.live == [0, 1, 2]
        assert core.progress().stopped == "client 1 failed in round 2: RuntimeError: boom"


def test_the_last_client_failing_stops_the_run(tmp_path):
    core, _ = make(tmp_path, clients=2)
    core.report_failed(0, 1, "RuntimeError: a")
    assert core.progress().stopped is None
    core.report_failed(1, 1, "RuntimeError: b")
    assert "no client can go on" in core.progress().stopped


def test_a_member_that_answers_pings_but_finishes_no_round_is_hung(tmp_path):
    core, _ = make(tmp_path, stall_hops=2)  # 0.6 s without a round
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        for c in (0, 1):
            core.report_round(c, int((time.monotonic() - deadline + 1.0) * 10), {})
        core.reconcile()
        time.sleep(0.02)
    assert core.table.live == [0, 1]
    (hang,) = [e for e in core.events if e["kind"] == "hang"]
    assert hang["client"] == 2 and "no round finished" in hang["detail"]


def test_when_no_member_advances_the_run_stops_with_a_diagnosis(tmp_path):
    core, _ = make(tmp_path, stall_hops=2)
    until(core, lambda: core.progress().stopped is not None)
    reason = core.progress().stopped
    assert "no member finished a round" in reason and "client 2 last finished round -1" in reason


def test_a_member_stalled_after_the_others_finished_is_bypassed_and_the_run_ends(tmp_path):
    core, _ = make(tmp_path, stall_hops=2)
    for c in (0, 1):
        for round_ in range(5):
            core.report_round(c, round_, {})
        core.report_done(c, 0, 5, 100)
    until(core, lambda: core.table.live == [0, 1])  # client 2 never finished a round
    assert core.progress().stopped is None
    (hang,) = [e for e in core.events if e["kind"] == "hang"]
    assert hang["client"] == 2
    assert core.summary(1.0)["rounds_completed"] == 5


def test_reports_from_outside_the_run_are_ignored(tmp_path):
    core, _ = make(tmp_path)
    core.report_round(42, 0, {"loss": 1.0})
    core.report_done(42, 0, 0, 0)
    core.report_unreachable(0, 42, 1)
    core.report_failed(42, 0, "x")
    assert 42 not in core.table.members and not core.errors and not core.done


def test_a_tracking_server_that_never_answers_holds_up_no_report_or_reconcile(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    tracker = Tracker(dead, "t", "run", output_dir=tmp_path, retry=Retry(close_s=1.0))
    core, _ = make(tmp_path, tracker=tracker)
    opening = threading.Thread(target=core.open_tracking)
    opening.start()  # the writer keeps trying in the background
    started = time.monotonic()
    for round_ in range(3):
        for client in range(3):
            core.report_round(client, round_, {"loss": 1.0})
        core.reconcile()  # probes, views and checkpoints go on meanwhile
    assert time.monotonic() - started < 0.5
    assert core.tracker._pending  # the means wait in the buffer, none dropped
    core.tracker.end()
    opening.join()


def test_metrics_mlflow_had_not_taken_are_queued_again_by_a_restarted_coordinator(tmp_path):
    core, handles = make(tmp_path)
    core.report_round(0, 0, {"loss": 1.0})
    core.tracker.add_metrics({"local_acc_mean": 0.5}, 0)
    core.checkpoint(force=True)  # the tracker never opened: nothing was sent
    queued = core.tracker.unsent()
    assert ("local_acc_mean", 0.5) in [(key, value) for key, value, _, _ in queued]
    restarted = CoordinatorCore(core.config, tmp_path, Tracker("unused", "t", "run"), handles.get)
    restarted.restore()
    assert restarted.tracker.unsent() == queued  # timestamps too: MLflow keeps one copy


def test_a_restarted_coordinator_finds_a_member_gone_while_it_was_down(tmp_path):
    core, handles = make(tmp_path)
    core.checkpoint(force=True)
    restarted = CoordinatorCore(
        core.config,
        tmp_path,
        Tracker("unused", "t", "run"),
        lambda c: None if c == 1 else handles[c],
    )
    restarted.restore()
    assert restarted.table.live == [0, 2]
    assert restarted.table.members[1].state == MemberState.DEAD


def test_the_output_tables_follow_the_run_and_say_they_are_partial(tmp_path):

    import pyarrow.parquet as pq

    core, _ = make(tmp_path)
    for client in range(3):
        core.report_round(client, 0, {"local_acc": 0.5, "global_acc": 0.25})
    core.reconcile()
    rows = pq.read_table(tmp_path / "metrics.parquet").to_pylist()
    assert sorted(r["client"] for r in rows) == [0, 1, 2]
    assert json.loads((tmp_path / "summary.json").read_text())["partial"] is True


@pytest.mark.parametrize("upload", [False, True])
def test_private_checkpoints_are_uploaded_only_when_asked(tmp_path, mlflow_uri, upload):
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    out.mkdir()
    config = config_from_dict({"clients": {"count": 2}, "tracking": {"upload_checkpoints": upload}})
    uri = mlflow_uri
    core = CoordinatorCore(config, out, Tracker(uri, "t", "run"))
    for c in range(2):
        core.register(c, ScriptedClient(c), "node")
    (out / "clients").mkdir()
    (out / "clients" / "client-0.pt").write_bytes(b"private model")
    core.checkpoint(force=True)
    summary = core.finalize(1.0)
    uploaded = {a.path for a in MlflowClient(uri).list_artifacts(summary["mlflow"]["run_id"])}
    assert {"summary.json", "config.yaml", "metrics.parquet", "events.parquet"} <= uploaded
    assert ("clients" in uploaded) == upload and ("coordinator.json" in uploaded) == upload


def test_a_finished_runs_history_on_disk_holds_every_report(tmp_path, mlflow_uri):
    core, _ = make(tmp_path, tracker=Tracker(mlflow_uri, "t", "run"))
    core.checkpoint(force=True)  # the timer's last save, before the final round's reports
    for client in range(3):
        core.report_round(client, 0, {"loss": 1.0, "train_cpu_s": 0.1})
    core.finalize(1.0)
    reports = read_history(RunFolder(tmp_path).coordinator_history).by_round
    assert {c: m["train_cpu_s"] for c, m in reports[0].items()} == {0: 0.1, 1: 0.1, 2: 0.1}


@pytest.mark.parametrize("fault", ["dead", "silent"])
def test_the_run_stops_with_a_reason_when_its_last_live_member_is_gone(tmp_path, fault):
    core, handles = make(tmp_path)
    for c in range(3):
        handles[c].state = fault
    until(core, lambda: core.progress().stopped is not None)
    assert not core.table.live and "no live client left" in core.progress().stopped
    assert core.events[-1]["kind"] == "run_stopped"


def test_a_hung_member_reporting_after_everyone_left_is_not_spliced_into_nothing(tmp_path):
    core, handles = make(tmp_path, clients=2)
    for c in range(2):
        handles[c].state = "silent"
    until(core, lambda: not core.table.live)
    core.report_round(0, 0, {"loss": 1.0})  # raised IndexError from random.choice before
    assert not core.table.live and core.progress().stopped is not None


def test_the_history_is_appended_not_rewritten_and_a_restart_reads_it_back(tmp_path):
    core, handles = make(tmp_path)
    core.checkpoint(force=True)
    small = (tmp_path / "coordinator.json").stat().st_size
    for round_ in range(300):
        for client in range(3):
            core.report_round(client, round_, {"local_acc": 0.5, "loss": 1.0})
        core.report_event(EventKind.WAIT_TIMEOUT, 0, round_, "x" * 50)
    core.checkpoint(force=True)
    # The record no longer carries the history: what is written every 0.5 s stays small
    # (but for the metrics MLflow has not taken, which this test's tracker never sends).
    record = json.loads((tmp_path / "coordinator.json").read_text())
    unsent = len(json.dumps(record.pop("unsent_metrics")))
    assert (record["rows"], record["events"], record["by_round"]) == ([], [], {})
    assert (tmp_path / "coordinator.json").stat().st_size - unsent < small + 2000
    with open(tmp_path / "coordinator.history.jsonl", "a") as file:
        file.write('{"kind": "row", "entry": {"cli')  # a kill in the middle of an append
    restarted = CoordinatorCore(core.config, tmp_path, Tracker("unused", "t", "run"), handles.get)
    restarted.restore()
    assert restarted.rows == core.rows and len(restarted.rows) == 900
    assert restarted.events[:-1] == core.events  # and then its own: coordinator_restored
    assert restarted.by_round == core.by_round


def test_a_round_every_member_finished_is_in_the_outputs_at_the_next_pass(tmp_path):
    """A write of a half-reported round must not hold back the round once it is whole: a run
    killed or interrupted then loses no finished round, and a waiter sees it at once."""
    core, _ = make(tmp_path)
    core.report_round(0, 0, {"local_acc": 0.5, "global_acc": 0.25})
    core.reconcile()  # the first row: written, no round whole yet
    assert json.loads((tmp_path / "summary.json").read_text())["rounds_completed"] == 0
    for client in (1, 2):
        core.report_round(client, 0, {"local_acc": 0.5, "global_acc": 0.25})
    time.sleep(WRITE_COST_SHARE * core.outputs.outputs_cost_s)  # a write of these files is quick
    core.reconcile()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds_completed"] == 1 and summary["partial"] is True


def test_whole_rounds_are_written_no_oftener_than_their_files_cost_allows(tmp_path):
    """The files are rewritten whole, so their writes grow with the run: after a write that
    took ``c`` seconds, the next waits ``WRITE_COST_SHARE * c`` (a long run's coordinator
    must not spend its time rewriting tables)."""
    core, _ = make(tmp_path)

    def completed() -> int:
        return json.loads((tmp_path / "summary.json").read_text())["rounds_completed"]

    for round_ in (0, 1):
        for client in range(3):
            core.report_round(client, round_, {"local_acc": 0.5, "global_acc": 0.25})
        if round_ == 0:
            core.reconcile()
            assert completed() == 1
            core.outputs.outputs_cost_s = 0.05  # as if the tables had grown to take 50 ms to write
    core.reconcile()
    assert completed() == 1  # within 20 x 50 ms of the last write
    until(core, lambda: completed() == 2, timeout=5.0)


def test_an_offline_member_is_out_of_the_view_but_neither_dead_nor_probed(tmp_path):
    core, handles = make(tmp_path)
    core.leave(1, 0, 5.0)
    handles[1].state = "dead"  # a probe would now find it crashed: it must get none
    settle(core, 0.3)
    assert core.table.members[1].state == MemberState.OFFLINE
    assert handles[0].views[-1].members == (0, 2)
    state = core.progress()
    assert (state.live, state.offline, state.finished) == (2, 1, False)
    for c in (0, 2):
        core.report_done(c, 0, 0, 0)
    assert not core.progress().finished  # it is due back, with rounds to train
    back = core.come_back(1, 0)
    assert back is not None and back.view.members == (0, 1, 2)  # back in its own place
    assert core.table.members[1].state == MemberState.RUNNING
    assert not [e for e in core.events if e["kind"] in ("crash", "hang", "run_stopped")]


def test_a_ring_whose_every_member_is_offline_waits_for_the_first_back(tmp_path):
    core, handles = make(tmp_path, clients=2)
    core.leave(0, 0, 0.5)
    core.leave(1, 0, 5.0)
    settle(core, 0.3)
    assert core.stop_reason is None and not core.table.live
    back = core.come_back(0, 0)
    assert back is not None and back.view.members == (0,)
    assert core.stop_reason is None


def test_every_member_offline_until_past_the_time_budget_stops_the_run(tmp_path):
    budget = {"experiment": {"rounds": 5, "time_budget_s": 2.0}}
    core, handles = make(tmp_path, clients=2, sections=budget)
    core.leave(0, 0, 30.0)
    core.leave(1, 0, 20.0)
    until(core, lambda: core.stop_reason is not None)
    assert "time budget" in core.stop_reason and "client 1" in core.stop_reason


def test_members_offline_and_never_back_are_bypassed_after_the_stall_limit(tmp_path):
    core, handles = make(tmp_path, clients=2, stall_hops=2)  # 0.6 s
    core.leave(0, 0, 0.1)
    core.leave(1, 0, 0.1)
    until(core, lambda: core.stop_reason is not None)
    hangs = [e for e in core.events if e["kind"] == "hang"]
    assert sorted(e["client"] for e in hangs) == [0, 1]
    assert all("not back from offline" in e["detail"] for e in hangs)
    assert "no client can go on" in core.stop_reason
    assert "not back from offline" in core.stop_reason


def joined_ring(tmp_path, reported: tuple[int, ...], bypassed: tuple[int, ...] = ()) -> list[int]:
    """The live ring after client 3 joins a ring of three in which ``reported`` had finished
    round 0 and ``bypassed`` had been written off when the join came."""
    core, handles = make(tmp_path)
    for client_id in reported:
        core.report_round(client_id, 0, {"loss": 1.0})
    for client_id in bypassed:
        core.report_failed(client_id, 1, "RuntimeError: boom")
    core.admit(3, handles[3], "node", first_round=2)
    return core.table.live


def test_where_a_joiner_is_spliced_in_does_not_depend_on_who_reported_first(tmp_path):
    """A resumed run, or a rerun, must build the uninterrupted run's ring: which members
    had reported or been bypassed when the driver noticed the join was due is timing."""
    rings = [
        joined_ring(tmp_path / "first", reported=(0,)),
        joined_ring(tmp_path / "second", reported=(1,)),
        joined_ring(tmp_path / "third", reported=(2, 1)),
        joined_ring(tmp_path / "fourth", reported=(0, 1, 2), bypassed=(2,)),
    ]
    without_2 = [[c for c in ring if c != 2] for ring in rings]
    assert without_2[1:] == without_2[:-1], rings


def test_a_joiner_is_handed_the_state_of_the_round_before_its_first_by_its_predecessor(tmp_path):
    core, handles = make(tmp_path)
    core.report_round(2, 0, {"loss": 1.0})  # who reported first does not choose the donor
    after = core.admit(3, handles[3], "node", first_round=2)
    ring = core.table.order
    assert ring[ring.index(3) - 1] == after
    assert handles[after].handed_to == [(3, 1)]  # the state at the end of round 2 - 1
    assert handles[3].started == [(2, Joining(after))]
    assert all(not handles[c].handed_to for c in (0, 1, 2) if c != after)


def test_a_joiner_that_can_have_no_round_is_not_admitted_and_holds_no_run_open(tmp_path):
    """A run of 5 rounds whose members finished round 3: a joiner spliced in now would start
    at round 5, past the last; admitted, it waited for a hand-off nobody sends."""
    core, handles = make(tmp_path)
    for client_id in range(3):
        core.report_round(client_id, 3, {"loss": 1.0})
    core.admit(3, handles[3], "node", first_round=4)
    assert 3 not in core.table.members
    assert handles[3].started == [] and all(not handles[c].handed_to for c in range(3))
    skipped = [e for e in core.events if e["kind"] == EventKind.JOIN_SKIPPED]
    assert [e["client"] for e in skipped] == [3]
    for client_id in range(3):
        core.report_round(client_id, 4, {"loss": 1.0})
        core.report_done(client_id, 0, 0, 0)
    assert core.progress().finished


def test_a_front_runner_back_from_offline_skips_no_round_and_keeps_its_rounds(tmp_path):
    """Client 0 trained rounds 0-1 while the others finished round 0, then left: back, it
    goes on from round 2 (the others may be in round 1 with its lap done, never in 2), and
    the rounds it trained before leaving still count."""
    core, handles = make(tmp_path)
    for round_ in (0, 1):
        core.report_round(0, round_, {"loss": 1.0})
    for client_id in (1, 2):
        core.report_round(client_id, 0, {"loss": 1.0})
    core.leave(0, 1, 0.5)
    back = core.come_back(0, 1)
    assert back is not None and back.first_round == 2
    assert core.table.members[0].rounds_trained == 2
    core.report_round(0, 2, {"loss": 1.0})
    assert core.table.members[0].rounds_trained == 3
    progress = core.progress()
    assert progress.rounds_done == 3 + 1 + 1
    assert progress.rounds_planned == 5 + 5 + 5  # nothing skipped: 5 rounds each
