"""The thread-safe inbox: duplicates, newest-per-sender selection, and timed waits."""

from __future__ import annotations

import threading
import time

import torch

from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.payloads import Channel, LapHeader, Payload


def msg(sender: int, round_: int, seq: int = 0, kind: str = "share", value: float = 0.0):
    lap = LapHeader("a", leader=0, attempt=seq, epoch=0) if kind == "lap" else None
    tensors = {"w": torch.tensor([value])}
    return Payload(sender, round_, 0, seq, tensors, channel=Channel(kind), lap=lap)


def test_duplicate_delivery_is_dropped():
    inbox = Inbox()
    assert inbox.put(msg(1, 0, seq=0, value=1.0))
    assert not inbox.put(msg(1, 0, seq=0, value=2.0))  # re-send of the same delivery
    assert len(inbox) == 1
    (kept,) = inbox.take("share")
    assert kept.tensors["w"].item() == 1.0  # the first arrival, not the re-send


def test_deliveries_differing_in_any_key_field_are_kept():
    inbox = Inbox()
    assert inbox.put(msg(1, 0, seq=0))
    assert inbox.put(msg(1, 0, seq=1))
    assert inbox.put(msg(1, 0, seq=0, kind="init"))
    assert inbox.put(msg(1, 1, seq=0))
    assert inbox.put(msg(2, 0, seq=0))
    assert len(inbox) == 5


def test_duplicate_stays_dropped_after_take():
    inbox = Inbox()
    inbox.put(msg(1, 0))
    assert len(inbox.take("share")) == 1
    assert not inbox.put(msg(1, 0))
    assert len(inbox) == 0


def test_take_keeps_newest_per_sender_sorted_by_sender():
    inbox = Inbox()
    for sender, round_ in [(3, 0), (1, 0), (3, 2), (1, 1), (3, 1)]:
        inbox.put(msg(sender, round_))
    taken = inbox.take("share")
    assert [(p.sender, p.round) for p in taken] == [(1, 1), (3, 2)]
    assert len(inbox) == 0  # older rounds are consumed, not left behind


def test_take_respects_max_round_and_leaves_later_rounds_queued():
    inbox = Inbox()
    for sender, round_ in [(1, 0), (1, 1), (1, 2), (2, 3)]:
        inbox.put(msg(sender, round_))
    taken = inbox.take("share", max_round=1)
    assert [(p.sender, p.round) for p in taken] == [(1, 1)]
    assert len(inbox) == 2
    assert len(inbox.peek(lambda p: p.channel == Channel.SHARE)) == 2
    later = inbox.take("share", max_round=5)
    assert [(p.sender, p.round) for p in later] == [(1, 2), (2, 3)]
    assert len(inbox) == 0


def test_take_separates_kinds():
    inbox = Inbox()
    inbox.put(msg(1, 0, kind="share", value=1.0))
    inbox.put(msg(1, 0, kind="init", value=2.0))
    inbox.put(msg(2, 0, kind="init", value=3.0))
    assert len(inbox.peek(lambda p: p.channel == Channel.INIT)) == 2
    assert len(inbox.peek(lambda p: p.channel == Channel.SHARE)) == 1
    shares = inbox.take("share")
    assert [(p.sender, p.channel, p.tensors["w"].item()) for p in shares] == [(1, "share", 1.0)]
    assert len(inbox) == 2
    inits = inbox.take("init")
    assert [p.tensors["w"].item() for p in inits] == [2.0, 3.0]
    assert inbox.take("share") == [] and len(inbox) == 0


def test_newest_tracks_the_highest_round_per_sender_and_kind():
    inbox = Inbox()
    assert inbox.newest("share", 1) == -1
    inbox.put(msg(1, 2))
    inbox.put(msg(1, 0))  # a late, older delivery does not lower it
    inbox.put(msg(4, 5, kind="init"))
    assert (inbox.newest("share", 1), inbox.newest("init", 4)) == (2, 5)
    assert inbox.newest("share", 4) == -1  # another channel does not count
    inbox.take("share")
    assert inbox.newest("share", 1) == 2  # kept after the payloads are consumed


def test_pop_removes_exactly_the_matching_payloads():
    inbox = Inbox()
    for sender in range(4):
        inbox.put(msg(sender, 0, kind="lap" if sender % 2 else "share"))
    popped = inbox.pop(lambda p: p.channel == Channel.LAP)
    assert [p.sender for p in popped] == [1, 3]
    assert len(inbox) == 2 and not inbox.peek(lambda p: p.channel == Channel.LAP)


def test_wait_returns_true_when_a_payload_arrives_from_another_thread():
    inbox = Inbox()
    ticks: list[float] = []
    sender = threading.Timer(0.1, lambda: inbox.put(msg(7, 0)))
    sender.start()
    try:
        start = time.monotonic()
        ok = inbox.wait(lambda: inbox.newest("share", 7) == 0, 5.0, lambda: ticks.append(1))
        elapsed = time.monotonic() - start
    finally:
        sender.cancel()
        sender.join()
    assert ok
    assert 0.05 < elapsed < 4.5  # woken by the put, well before the 5 s timeout
    assert ticks  # tick runs between the short waits


def test_wait_returns_true_at_once_when_already_ready():
    inbox = Inbox()
    inbox.put(msg(1, 0))
    ticks: list[int] = []
    start = time.monotonic()
    assert inbox.wait(lambda: len(inbox) == 1, 5.0, lambda: ticks.append(1))
    assert time.monotonic() - start < 0.5
    assert ticks == [1]


def test_wait_times_out_and_keeps_calling_tick():
    inbox = Inbox()
    ticks: list[int] = []
    start = time.monotonic()
    ok = inbox.wait(lambda: len(inbox) > 0, 0.25, lambda: ticks.append(1))
    elapsed = time.monotonic() - start
    assert not ok
    assert 0.2 <= elapsed < 3.0
    assert len(ticks) >= 2


def test_forgetting_old_rounds_keeps_each_senders_newest_share_however_old():
    """A straggler's push that lands many rounds late is still merged, not forgotten."""
    inbox = Inbox()
    for payload in (msg(1, 2), msg(1, 3), msg(2, 9), msg(1, 2, kind="lap")):
        inbox.put(payload)
    inbox.forget_before(8, keep_newest=Channel.SHARE)
    assert [(p.sender, p.round) for p in inbox.take("share")] == [(1, 3), (2, 9)]
    assert inbox.peek(lambda p: p.channel == Channel.LAP) == []  # other channels: forgotten
    assert not inbox.put(msg(1, 3))  # a duplicate of the kept one is still recognised


def test_forgetting_after_a_round_drops_only_the_named_senders_later_pushes_and_takes_them_again():
    """A resumed run restarts sender 1 after round 2: its pushes of rounds 3 and 4 come
    again and must be taken then; sender 2, who goes on from round 4, keeps its own."""
    inbox = Inbox()
    for sender, round_ in [(1, 2), (1, 3), (1, 4), (2, 4)]:
        inbox.put(Payload(sender, round_, 1, round_, {"x": torch.zeros(1)}))
    dropped = inbox.forget_after(Channel.SHARE, {1: 2, 2: 4})
    assert sorted((p.sender, p.round) for p in dropped) == [(1, 3), (1, 4)]
    assert inbox.newest(Channel.SHARE, 1) == 2 and inbox.newest(Channel.SHARE, 2) == 4
    assert inbox.put(Payload(1, 3, 1, 3, {"x": torch.ones(1)}))  # sent again: not a duplicate
    assert [(p.sender, p.round) for p in inbox.take(Channel.SHARE)] == [(1, 3), (2, 4)]
