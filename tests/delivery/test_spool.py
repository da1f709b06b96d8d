"""A push a client acknowledged survives its crash until a checkpoint has merged it."""

from __future__ import annotations

import errno
import math
import os
import threading
import time
from concurrent.futures import Future

import pytest
import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.lap_host import LapResult
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.outbox import NotKept
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.spool import Spool
from ring_actors.delivery.view import View
from ring_actors.in_process import LocalClient, LocalHandle
from tests.helpers.client_links import SHAPE, Peer, Reports, share
from tests.helpers.synthetic import separable

CONFIG = config_from_dict({"clients": {"count": 3}, "schedule": {"hop_timeout_s": 2}})


def checkpointing_core(path, client_id: int = 0, config=CONFIG) -> ClientCore:
    data = separable(32, 4, SHAPE)
    method = build_algorithm(config, client_id, 4, SHAPE, torch.device("cpu"))
    splits = ClientData(data, data, data)
    client = ClientCore(client_id, config, method, splits, Reports(), checkpoint_path=path)
    client.set_view(View(1, (0, 1, 2), (0, 0, 0)), {1: Peer(), 2: Peer()})
    return client


def test_the_spool_keeps_loads_and_drops_payloads(tmp_path):
    spool = Spool(tmp_path / "inbox")
    pushes = [Payload(s, r, 1, r, {"w": torch.full((3,), s + r)}) for s, r in ((2, 4), (1, 3))]
    for payload in pushes:
        spool.keep(payload)
    loaded = spool.load(torch.device("cpu"))
    assert [(p.sender, p.round) for p in loaded] == [(1, 3), (2, 4)]  # oldest round first
    assert torch.equal(loaded[1].tensors["w"], pushes[0].tensors["w"])
    assert spool.names() == spool.names_of(p.key for p in pushes)
    spool.discard(spool.names_of([pushes[0].key]))
    assert [(p.sender, p.round) for p in spool.load(torch.device("cpu"))] == [(1, 3)]


def test_a_dropped_push_file_is_written_over_by_the_next_push(tmp_path):
    spool = Spool(tmp_path / "inbox")
    first, second = (Payload(1, r, 1, r, {"w": torch.full((1000,), float(r))}) for r in (0, 1))
    spool.keep(first)
    (name,) = spool.names_of([first.key])
    inode = (tmp_path / "inbox" / name).stat().st_ino
    spool.discard([name])
    assert spool.names() == set() and spool.load(torch.device("cpu")) == []
    spool.keep(second)
    (again,) = spool.names_of([second.key])
    assert (tmp_path / "inbox" / again).stat().st_ino == inode  # the dropped push's file
    (loaded,) = spool.load(torch.device("cpu"))
    assert torch.equal(loaded.tensors["w"], second.tensors["w"])


@pytest.mark.parametrize("kept", ["the older push", "its first half"])
def test_a_push_holding_an_older_pushs_bytes_after_a_power_cut_is_refused(tmp_path, caplog, kept):
    """Renamed before its sync over an older push's file, a push may, after a power cut,
    hold that push's bytes (all of them, or pages of them): refused as torn, not merged."""
    spool = Spool(tmp_path / "inbox")
    old, new = (Payload(1, r, 1, r, {"w": torch.full((4096,), float(r))}) for r in (0, 1))
    spool.keep(old)
    spool.keep(new)
    (old_path,) = (tmp_path / "inbox" / n for n in spool.names_of([old.key]))
    (new_path,) = (tmp_path / "inbox" / n for n in spool.names_of([new.key]))
    old_bytes, new_bytes = old_path.read_bytes(), new_path.read_bytes()
    assert len(old_bytes) == len(new_bytes)  # one layout: a mix of pages still parses
    half = len(new_bytes) // 2
    mixed = old_bytes if kept == "the older push" else new_bytes[:half] + old_bytes[half:]
    old_path.unlink()
    new_path.write_bytes(mixed)
    assert spool.load(torch.device("cpu")) == []
    assert f"{new_path.name} is unreadable, a push lost" in caplog.text


def test_a_push_acknowledged_after_the_last_checkpoint_is_there_after_a_crash(tmp_path):
    path = tmp_path / "client-0.pt"
    before = checkpointing_core(path)
    before.save_checkpoint(0)
    push = share(before, 2, 0)
    assert before.receive(push)  # acknowledged: the sender forgets it
    # The process dies before round 1 is checkpointed; its successor starts from the file.
    after = checkpointing_core(path)
    assert after.load_checkpoint() == 0
    gathered: list[Payload] = []
    thread = threading.Thread(target=lambda: gathered.extend(after.exchange.gather(1)))
    thread.start()
    thread.join(5)
    assert [(p.sender, p.round) for p in gathered] == [(2, 0)]  # no wait for a timeout
    assert not [e for e in after.control.events if e[0] == "wait_timeout"]
    for name, tensor in push.tensors.items():
        assert torch.equal(gathered[0].tensors[name], tensor)


def test_a_checkpoint_drops_what_it_merged_and_keeps_what_it_did_not(tmp_path):
    path = tmp_path / "client-0.pt"
    client = checkpointing_core(path)
    client.save_checkpoint(0)
    client.receive(share(client, 2, 0))
    client.receive(share(client, 2, 1))  # arrived early, for the round after
    client.inbox.take("share", max_round=0)  # round 1 merges round 0's push
    client.save_checkpoint(1)
    restarted = checkpointing_core(path)
    restarted.load_checkpoint()
    assert [(p.sender, p.round) for p in restarted.inbox.peek(lambda p: True)] == [(2, 1)]


def test_a_push_merged_after_a_checkpoints_snapshot_is_kept_until_one_covers_it(tmp_path):
    """The checkpoint is written off the round's path: a push the next round merges while
    the write is still queued is not covered by it, so the spool keeps it."""
    path = tmp_path / "client-0.pt"
    background = config_from_dict({**CONFIG.to_dict(), "checkpoint": {"background": True}})
    client = checkpointing_core(path, config=background)
    disk_busy = threading.Event()
    client.checkpoint.writer.submit(lambda: disk_busy.wait(10))
    client.checkpoint.save(0)  # the snapshot is taken; its write waits for the disk
    client.receive(share(client, 2, 0))
    client.inbox.take("share", max_round=0)  # round 1 merges it, after the snapshot
    disk_busy.set()
    client.checkpoint.writer.flush()
    restarted = checkpointing_core(path)
    assert restarted.load_checkpoint() == 0
    assert [(p.sender, p.round) for p in restarted.inbox.peek(lambda p: True)] == [(2, 0)]


def test_a_client_that_does_not_checkpoint_writes_nothing(tmp_path):
    client = checkpointing_core(None)
    assert client.receive(share(client, 2, 0)) and client.kept.spool is None
    assert list(tmp_path.iterdir()) == []


class Silent:
    """A peer that never acknowledges."""

    def receive(self, payload) -> Future:
        return Future()


def test_a_checkpoint_keeps_the_newest_push_and_those_not_yet_acknowledged(tmp_path):
    path = tmp_path / "client-0.pt"
    client = checkpointing_core(path)
    client.set_view(View(2, (0, 1, 2), (0, 0, 0)), {1: Silent()})
    unanswered, answered, newest = (share(client, 0, r) for r in (1, 2, 3))
    client.outbox.send(1, unanswered)
    client.outbox.send(2, answered)  # peer 2 acknowledges at once
    client.tick()
    client.published.last_push = newest
    client.save_checkpoint(3)
    restarted = checkpointing_core(path)
    restarted.load_checkpoint()
    assert [p.round for p in restarted.published.recent_pushes] == [1]
    assert restarted.published.last_push.round == 3


def test_a_push_the_spool_could_not_keep_is_refused_whole_and_taken_when_resent(tmp_path):
    client = checkpointing_core(tmp_path / "client-0.pt")
    client.kept.spool.directory.parent.mkdir(parents=True, exist_ok=True)
    client.kept.spool.directory.write_text("not a folder")  # every write into it fails
    push = share(client, 2, 0)
    with pytest.raises(NotKept):  # refused: the sender keeps it and sends it again
        client.receive(push)
    assert not client.inbox.peek(lambda p: True)  # and nothing unsaved is merged
    client.kept.spool.directory.unlink()
    assert client.receive(push)  # the re-send is not mistaken for a duplicate
    assert [(p.sender, p.round) for p in client.inbox.peek(lambda p: True)] == [(2, 0)]
    assert len(list(client.kept.spool.directory.glob("*.pt"))) == 1


class FullDisk(Spool):
    """A spool whose disk has no room for its first ``full_for`` writes."""

    def __init__(self, directory, full_for: float) -> None:
        super().__init__(directory)
        self.full_for = full_for
        self.writes = 0

    def keep(self, payload: Payload) -> None:
        self.writes += 1
        if self.writes <= self.full_for:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().keep(payload)


def push_to_a_full_disk(tmp_path, full_for: float) -> tuple[ClientCore, ClientCore, int]:
    """Client 2 pushes its round 0 to client 0, whose spool fails ``full_for`` writes, and
    waits for the acknowledgement as a client at the end of its run does; the lost count."""
    receiver = checkpointing_core(tmp_path / "client-0.pt")
    receiver.kept.spool = FullDisk(receiver.kept.spool.directory, full_for)
    sender = checkpointing_core(None, client_id=2)
    sender.set_view(View(2, (0, 1, 2), (0, 0, 0)), {0: LocalHandle(LocalClient(receiver))})
    sender.send(0, share(receiver, 2, 0))
    return receiver, sender, sender.outbox.drain(sender.timeouts.drain_s)


def test_a_push_the_receiver_had_no_room_for_is_sent_again_and_merged(tmp_path):
    receiver, sender, lost = push_to_a_full_disk(tmp_path, full_for=1)
    assert receiver.kept.spool.writes == 2  # refused once, kept when sent again
    assert lost == 0 and sender.outbox.hops == 1
    assert [(p.sender, p.round) for p in receiver.exchange.gather(1)] == [(2, 0)]
    assert len(list(receiver.kept.spool.directory.glob("*.pt"))) == 1


def test_a_push_no_receiver_write_keeps_is_counted_lost_once_the_sender_gives_up(tmp_path):
    receiver, sender, lost = push_to_a_full_disk(tmp_path, full_for=math.inf)
    assert receiver.kept.spool.writes >= 2  # sent again before it was given up
    assert lost == 1 and sender.outbox.hops == 0 and sender.control.unreachable == []
    assert not receiver.inbox.peek(lambda p: True)
    (given_up,) = [e for e in sender.control.events if e[0] == "payload_not_kept"]
    assert given_up[1] == 0 and "share round 0 to 0" in given_up[2]
    assert os.strerror(errno.ENOSPC) in given_up[2]


def test_what_peers_a_round_behind_ask_for_is_there_after_a_restart(tmp_path):
    """A restarted client answers a pull of what it published as it would have, and, once
    it finished the run, a lap's total: peers that resumed a round behind it ask for both."""
    path = tmp_path / "client-0.pt"
    before = checkpointing_core(path)
    total = {"x": torch.tensor([7.0], dtype=torch.float64)}
    before.laps.results[("avg", 2)] = LapResult(total, (0, 1, 2))
    before.published.by_round[2] = {"w": torch.arange(3.0)}
    before.checkpoint.finish(2)

    after = checkpointing_core(path)
    assert after.load_checkpoint() == 2
    kept = after.lap_result("avg", 2)
    assert kept is not None and kept.contributors == (0, 1, 2)
    assert torch.equal(kept.total["x"], total["x"])
    pulled = after.serve(2, ("w",))
    assert pulled is not None and torch.equal(pulled.tensors["w"], torch.arange(3.0))


def test_a_push_is_synced_to_disk_off_the_keepers_thread_and_in_one_pass(tmp_path, monkeypatch):
    synced_on: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced_on.append(threading.get_ident()), real_fsync(fd))
    )
    spool = Spool(tmp_path / "inbox")
    pushes = [Payload(1, r, 1, r, {"w": torch.full((3,), float(r))}) for r in range(3)]
    for payload in pushes:
        spool.keep(payload)
    assert threading.get_ident() not in synced_on  # the acknowledgement waits for no fsync
    deadline = time.monotonic() + 10
    while spool.unsynced or not synced_on:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert spool.syncer is not None and set(synced_on) == {spool.syncer.ident}
    assert spool.sync() == 0  # nothing left to sync
    assert len(spool.load(torch.device("cpu"))) == 3


def test_a_push_torn_by_a_machine_that_stopped_before_its_sync_is_skipped_and_named(
    tmp_path, caplog
):
    spool = Spool(tmp_path / "inbox")
    whole, torn = (Payload(1, r, 1, r, {"w": torch.ones(3)}) for r in (0, 1))
    spool.keep(whole)
    spool.keep(torn)
    (name,) = spool.names_of([torn.key])
    path = tmp_path / "inbox" / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    loaded = spool.load(torch.device("cpu"))
    assert [p.round for p in loaded] == [0]
    assert f"{name} is unreadable, a push lost" in caplog.text
