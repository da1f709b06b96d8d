"""The checkpoint writer: the round hands a write over and goes on; one write at a time, the
newest queued one replacing an older, and a failed write raised where the round can see it."""

from __future__ import annotations

import threading

import pytest

from ring_actors.client.checkpoint_writer import CheckpointWriter


def test_a_newer_snapshot_replaces_one_still_queued_and_the_one_in_flight_finishes():
    writer = CheckpointWriter("test")
    started, release = threading.Event(), threading.Event()
    done: list[int] = []

    def slow_first() -> None:
        started.set()
        release.wait(10)
        done.append(1)

    writer.submit(slow_first)
    assert started.wait(10)  # in flight: submit returned without waiting for it
    writer.submit(lambda: done.append(2))
    writer.submit(lambda: done.append(3))  # replaces 2, which never started
    release.set()
    writer.flush()
    assert done == [1, 3]


def test_a_failed_write_is_raised_on_the_rounds_thread_once():
    writer = CheckpointWriter("test")

    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    writer.submit(full_disk)
    with pytest.raises(OSError, match="No space"):
        writer.flush()
    writer.submit(lambda: None)  # raised once: the next write goes ahead
    writer.flush()
