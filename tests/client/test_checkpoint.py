"""Checkpoints are data: the coordinator's a versioned JSON record, a client's a torch file
that names only allowed classes, so reading either runs no code."""

from __future__ import annotations

import importlib
import io
import os
import sys
import threading

import pytest
import torch

from ring_actors.algorithms import ALGORITHMS
from ring_actors.client.checkpoint import load_client_state
from ring_actors.client.core import ClientCore
from ring_actors.client.lap_host import LapResult
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.coordinator.record import CoordinatorRecord, read_record, write_record
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.view import View
from ring_actors.faults.client_side import strike
from ring_actors.storage.run_folder import CheckpointError
from tests.helpers.client_links import SHAPE, Peer, Reports
from tests.helpers.synthetic import separable


class Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_a_client_state_comes_back_whole(tmp_path, method):
    config = config_from_dict({"algorithm": {"name": method}, "clients": {"batch_size": 16}})
    data = separable(32, 4, (1, 28, 28))
    algorithm = build_algorithm(config, 0, 4, (1, 28, 28), torch.device("cpu"))
    algorithm.train_round(data)
    torch.save({"algorithm": algorithm, "torch_rng": torch.get_rng_state()}, tmp_path / "c.pt")
    restored = load_client_state(tmp_path / "c.pt", torch.device("cpu"))["algorithm"]
    for name, tensor in algorithm.shared_state().items():
        assert torch.equal(tensor, restored.shared_state()[name]), name
    assert restored.evaluate(data) == algorithm.evaluate(data)


def test_a_client_checkpoint_that_names_other_code_is_refused_unrun(tmp_path):
    marker = tmp_path / "ran"
    torch.save({"algorithm": Exploit(str(marker))}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="posix.system|os.system"):
        load_client_state(tmp_path / "evil.pt", torch.device("cpu"))
    assert not marker.exists()


def test_a_client_checkpoint_that_names_a_project_function_is_refused(tmp_path):
    # strike() with a forged plan would start a shell: classes may be named, functions never.
    torch.save({"algorithm": strike}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="ring_actors.faults.client_side.strike"):
        load_client_state(tmp_path / "evil.pt", torch.device("cpu"))


def test_a_plug_in_method_comes_back_and_an_unimported_module_is_never_imported(tmp_path):
    config = config_from_dict({"algorithm": {"name": "examples.fedprox:FedProx"}})
    algorithm = build_algorithm(config, 0, 4, (1, 28, 28), torch.device("cpu"))
    torch.save({"algorithm": algorithm}, tmp_path / "c.pt")
    restored = load_client_state(tmp_path / "c.pt", torch.device("cpu"))["algorithm"]
    assert type(restored).__name__ == "FedProx"
    marker = tmp_path / "imported"
    (tmp_path / "side_effect.py").write_text(
        f"open({str(marker)!r}, 'a').write('x')\nclass Model(__import__('torch').nn.Linear): ...\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("side_effect")
        torch.save({"model": module.Model(2, 2)}, tmp_path / "m.pt")
        del sys.modules["side_effect"]
        marker.unlink()
        with pytest.raises(CheckpointError, match="side_effect.Model"):
            load_client_state(tmp_path / "m.pt", torch.device("cpu"))
        assert not marker.exists()
    finally:
        sys.path.remove(str(tmp_path))


def test_the_coordinator_record_round_trips_and_refuses_another_version(tmp_path):
    record = CoordinatorRecord(
        run_id="abc",
        table={"epoch": 3, "order": [0, 1], "members": []},
        elapsed_s=1.5,
        rows=[{"client": 0, "round": 0, "local_acc": 0.5}],
        events=[],
        by_round={0: {1: {"loss": 0.25}}},
        rounds_logged=[0],
        done={1: {"lost": 0, "hops": 2, "bytes_sent": 8}},
        errors=[],
        hung=[1],
        healing=[(0.5, 2)],
    )
    path = tmp_path / "coordinator.json"
    write_record(path, record)
    assert read_record(path) == record
    assert [p.name for p in tmp_path.iterdir()] == ["coordinator.json"]  # no temp file left
    path.write_text(path.read_text().replace('"version": 1', '"version": 99'))
    with pytest.raises(CheckpointError, match="version-1"):
        read_record(path)


def _checkpointing_client(tmp_path, algorithm: str, **sections):
    config = config_from_dict(
        {
            "clients": {"count": 3},
            "algorithm": {"name": algorithm},
            "schedule": {"hop_timeout_s": 2},
            "checkpoint": {"every_rounds": 1},  # each round's state, whatever the default
            **sections,
        }
    )
    data = separable(32, 4, SHAPE)
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    client = ClientCore(
        0,
        config,
        method,
        ClientData(data, data, data),
        Reports(),
        checkpoint_path=tmp_path / "c.pt",
    )
    client.set_view(View(1, (0, 1, 2), (0, 0, 0)), {1: Peer(), 2: Peer()})
    return client, data


def _bytes_saved(state) -> int:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.tell()


@pytest.mark.parametrize("algorithm", ["dfedavg", "drdfl"])
def test_a_last_push_equal_to_the_model_is_written_once_and_restored_apart_from_it(
    tmp_path, algorithm
):
    client, data = _checkpointing_client(tmp_path, algorithm)
    assert client.run_round(0)
    client.checkpoint.writer.flush()  # written off the round's path
    push = client.published.last_push
    method_bytes = _bytes_saved(client.algorithm)
    push_bytes = sum(t.numel() * t.element_size() for t in push.tensors.values())
    # the method and the rest of the state, and no more than half the push again
    assert (tmp_path / "c.pt").stat().st_size < method_bytes + push_bytes / 2

    restored, _ = _checkpointing_client(tmp_path, algorithm)
    assert restored.load_checkpoint() == 0
    again = restored.published.last_push
    assert again.key == push.key and set(again.tensors) == set(push.tensors)
    restored.algorithm.train_round(data)  # the model moves on; the push it sent does not
    for name, tensor in push.tensors.items():
        assert torch.equal(again.tensors[name], tensor), name


def test_only_the_last_rounds_checkpoint_writes_the_laps_totals_and_a_restore_gets_them(
    tmp_path,
):
    """Every member of a resumed run restarts at one round, so no peer asks a checkpoint for
    a lap's total but a finished member's: only the last round's checkpoint keeps them."""
    client, _ = _checkpointing_client(tmp_path, "fedavg", experiment={"rounds": 5})
    totals = {r: {"x": torch.full((2**18,), float(r), dtype=torch.float64)} for r in range(5)}
    total_bytes = 2**18 * 8
    for round_ in range(4):
        client.laps.results[("avg", round_)] = LapResult(totals[round_], (0, 1, 2))
    client.save_checkpoint(3)
    assert list((tmp_path / "c.laps").glob("*.pt")) == []
    assert (tmp_path / "c.pt").stat().st_size < _bytes_saved(client.algorithm) + total_bytes / 2
    client.laps.results[("avg", 4)] = LapResult(totals[4], (0, 1))
    client.laps.forget_before(2)
    client.save_checkpoint(4)  # the last round
    assert sorted(p.name for p in (tmp_path / "c.laps").glob("*.pt")) == [
        "avg-2.pt",
        "avg-3.pt",
        "avg-4.pt",
    ]

    restored, _ = _checkpointing_client(tmp_path, "fedavg", experiment={"rounds": 5})
    assert restored.load_checkpoint() == 4
    assert sorted(restored.laps.kept()) == [("avg", 2), ("avg", 3), ("avg", 4)]
    for round_ in (2, 3, 4):
        kept = restored.lap_result("avg", round_)
        assert kept is not None and torch.equal(kept.total["x"], totals[round_]["x"])
    assert restored.lap_result("avg", 4).contributors == (0, 1)


def test_a_checkpoint_keeps_the_one_before_and_is_written_over_the_one_before_that(tmp_path):
    """Two checkpoints on disk, a resumed run's choice; the third goes over the first's
    pages, and the loop's end leaves the last state alone, no draft beside it."""
    client, _ = _checkpointing_client(tmp_path, "fedavg", experiment={"rounds": 5})
    path, previous = tmp_path / "c.pt", tmp_path / "c.previous"
    client.save_checkpoint(0)
    first = path.stat().st_ino
    client.save_checkpoint(1)
    assert previous.stat().st_ino == first and client.checkpoint.saved_rounds() == (0, 1)
    client.save_checkpoint(2)
    assert path.stat().st_ino == first  # round 0's file, round 2's checkpoint
    assert torch.load(previous, weights_only=False)["round"] == 1
    assert client.checkpoint.saved_rounds() == (1, 2)
    spool = client.checkpoint.kept.spool
    spool.keep(Payload(1, 3, 1, 3, {"w": torch.ones(8)}))
    spool.discard(spool.names())  # a dropped push's file, kept for the next push
    assert list((tmp_path / "c.inbox").glob(".spare-*.tmp"))
    client.checkpoint.finish(3)  # the loop's end: the last state saved, no draft beside it
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["c.pt"]
    assert torch.load(path, weights_only=False)["round"] == 3
    assert client.checkpoint.saved_rounds() == (3,)


def test_a_restore_at_most_a_round_takes_the_checkpoint_before_and_drops_the_newer(tmp_path):
    client, data = _checkpointing_client(tmp_path, "dfedavg")
    client.save_checkpoint(0)
    at_round_0 = {k: t.clone() for k, t in client.algorithm.shared_state().items()}
    client.algorithm.train_round(data)
    client.save_checkpoint(1)

    restored, _ = _checkpointing_client(tmp_path, "dfedavg")
    assert restored.load_checkpoint() == 1
    assert restored.saved_rounds() == (0, 1)
    assert restored.checkpoint.load(restore_at_most=1) == 1  # the newest is not past it
    assert restored.checkpoint.load(restore_at_most=0) == 0
    assert restored.completed == 0 and restored.saved_rounds() == (0,)
    for name, tensor in at_round_0.items():
        assert torch.equal(restored.algorithm.shared_state()[name], tensor), name
    assert not (tmp_path / "c.previous").exists()  # round 1 is redone, never resumed again
    restored.save_checkpoint(1)
    assert restored.saved_rounds() == (0, 1)


def test_a_push_the_newest_checkpoint_merged_is_kept_until_the_one_before_is_replaced(
    tmp_path,
):
    """A resumed run may restore the checkpoint before the newest: the pushes it had not
    merged stay on disk until a checkpoint replaces it too."""
    client, _ = _checkpointing_client(tmp_path, "dfedavg")
    push = Payload(1, 0, 1, 0, {"w": torch.ones(8)})
    client.checkpoint.kept.put(push)
    spooled = lambda: sorted(p.name for p in (tmp_path / "c.inbox").glob("*.pt"))  # noqa: E731
    client.save_checkpoint(0)  # before the merge
    client.inbox.take(push.channel)  # round 1 merges it
    client.save_checkpoint(1)
    assert len(spooled()) == 1  # the checkpoint of round 0 has not merged it
    client.save_checkpoint(2)
    assert spooled() == []


def test_a_kill_between_the_laps_files_and_the_checkpoint_listing_them_costs_nothing(tmp_path):
    """The writer puts the last round's totals on disk, then the checkpoint that lists them;
    killed in between, the client resumes from the older checkpoint, and the total it finds
    for the round it redoes is the one it computes again, not the orphan."""
    client, _ = _checkpointing_client(tmp_path, "fedavg", experiment={"rounds": 2})
    total = {r: {"x": torch.full((4,), float(r))} for r in (0, 1)}
    client.laps.results[("avg", 0)] = LapResult(total[0], (0, 1, 2))
    client.save_checkpoint(0)
    client.laps.results[("avg", 1)] = LapResult(total[1], (0, 1, 2))
    client.checkpoint.lap_files.keep(client.laps.kept())  # then the kill
    restored, _ = _checkpointing_client(tmp_path, "fedavg", experiment={"rounds": 2})
    assert restored.load_checkpoint() == 0
    assert sorted(restored.laps.kept()) == []
    redone = {"x": torch.full((4,), 7.0)}
    restored.laps.results[("avg", 1)] = LapResult(redone, (0, 1))
    restored.save_checkpoint(1)
    again, _ = _checkpointing_client(tmp_path, "fedavg", experiment={"rounds": 2})
    assert again.load_checkpoint() == 1
    assert torch.equal(again.lap_result("avg", 1).total["x"], redone["x"])


def test_a_client_saves_after_every_nth_round_and_after_the_last(tmp_path):
    client, _ = _checkpointing_client(
        tmp_path, "dfedavg", checkpoint={"every_rounds": 3}, experiment={"rounds": 7}
    )
    path, saved = tmp_path / "c.pt", []
    for round_ in range(7):
        client.checkpoint.after_round(round_)
        client.checkpoint.writer.flush()
        on_disk = load_client_state(path, torch.device("cpu")) if path.exists() else None
        saved.append(on_disk and on_disk["round"])
    assert saved == [None, None, 2, 2, 2, 5, 6]


@pytest.mark.parametrize(("background", "expected"), [("auto", False), (True, True)])
def test_a_cpu_client_writes_inline_unless_told_and_a_background_write_gets_a_copy(
    tmp_path, background, expected
):
    client, data = _checkpointing_client(tmp_path, "dfedavg", checkpoint={"background": background})
    writer = client.checkpoint.writer
    assert writer.background is expected
    before = {k: t.clone() for k, t in client.algorithm.shared_state().items()}
    disk_busy = threading.Event()
    if writer.background:
        writer.submit(lambda: disk_busy.wait(10))  # the snapshot's write waits behind it
    client.checkpoint.save(0)
    client.algorithm.train_round(data)  # the round goes on while the write is queued
    disk_busy.set()
    writer.flush()
    saved = load_client_state(tmp_path / "c.pt", torch.device("cpu"))["algorithm"]
    for name, tensor in before.items():
        assert torch.equal(saved.shared_state()[name], tensor), name


def test_drafts_a_kill_left_are_removed_at_the_next_start_and_only_the_clients_own(tmp_path):
    """A writer killed mid-write leaves its draft; the client's next start deletes its own
    (checkpoint, spool, laps' totals), never a draft of a neighbour writing beside it."""
    spool, laps = tmp_path / "c.inbox", tmp_path / "c.laps"
    spool.mkdir()
    laps.mkdir()
    own = [
        tmp_path / ".c.pt.111-222.tmp",
        spool / ".share-None-1-3-0.pt.111-222.tmp",
        laps / ".avg-3.pt.111-222.tmp",
        tmp_path / ".c.pt.spare.tmp",  # the drafts kept for the next writes, too
        laps / ".spare-0.tmp",
    ]
    neighbour = tmp_path / ".d.pt.333-444.tmp"
    for draft in [*own, neighbour]:
        draft.write_bytes(b"half a file")
    _checkpointing_client(tmp_path, "dfedavg")
    assert [p for p in own if p.exists()] == []
    assert neighbour.exists()


def test_a_core_restored_before_its_loop_drops_the_pushes_its_peers_redo(tmp_path):
    """Peer 1 restarts after round 0 and sends its round 1 again; peer 2 goes on from round 1,
    so its push of round 1 stays. Once the loop runs, a restore changes nothing."""
    client, data = _checkpointing_client(tmp_path, "dfedavg")
    client.save_checkpoint(0)
    client.algorithm.train_round(data)
    client.save_checkpoint(1)
    restored, _ = _checkpointing_client(tmp_path, "dfedavg")
    assert restored.load_checkpoint() == 1
    for sender in (1, 2):
        restored.inbox.put(Payload(sender, 1, 1, 1, {"w": torch.ones(2)}))
    assert restored.restore(0, {1: 0, 2: 1}) == 0
    assert [(p.sender, p.round) for p in restored.inbox.peek(lambda p: True)] == [(2, 1)]
    restored.thread = threading.Thread(target=lambda: None)  # its loop has begun
    assert restored.restore(-1, {2: -1}) == 0 and len(restored.inbox) == 1
