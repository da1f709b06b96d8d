"""Writes that survive a kill: a reader finds the old file or the new, never a torn one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ring_actors.storage.durable import write_atomic

WRITER = """
import sys, time
from pathlib import Path
from ring_actors.coordinator.output_files import write_outputs
out = Path(sys.argv[1])
events = [{"time_s": float(i), "kind": "hop", "client": i % 7, "round": i, "epoch": 1,
           "detail": "x" * 200} for i in range(20000)]
n = 0
while True:
    n += 1
    summary = {"n": n, "events": events[:2000]}
    write_outputs(out, {"experiment": {"n": n}}, summary, [{"client": 0, "round": n}], events)
    print(n, flush=True)
"""


def test_a_spare_is_written_over_and_holds_only_the_new_content(tmp_path):
    spare, path = tmp_path / ".spare.tmp", tmp_path / "new"
    spare.write_bytes(b"x" * 10_000)
    inode = spare.stat().st_ino
    write_atomic(path, b"short", spare=spare)
    assert path.read_bytes() == b"short" and path.stat().st_ino == inode
    assert not spare.exists()
    write_atomic(path, b"fresh", spare=spare)  # no spare left: a new file
    assert path.read_bytes() == b"fresh" and sorted(os.listdir(tmp_path)) == ["new"]


def test_the_replaced_version_is_kept_as_the_next_writes_spare(tmp_path):
    path, spare = tmp_path / "state", tmp_path / ".state.spare.tmp"
    write_atomic(path, b"one", spare=spare, replaced_to=spare)
    assert not spare.exists()  # nothing was replaced
    first = path.stat().st_ino
    write_atomic(path, b"two", spare=spare, replaced_to=spare)
    assert path.read_bytes() == b"two" and spare.read_bytes() == b"one"
    assert spare.stat().st_ino == first
    write_atomic(path, b"three", spare=spare, replaced_to=spare)
    assert path.read_bytes() == b"three" and path.stat().st_ino == first  # "one"'s file

    def half(file):
        file.write(b"fo")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_atomic(path, half, spare=spare, replaced_to=spare)
    assert path.read_bytes() == b"three"  # never written over through a second name
    assert sorted(os.listdir(tmp_path)) == ["state"]


def test_a_failed_write_leaves_the_old_file_and_no_draft(tmp_path):
    path = tmp_path / "record.json"
    write_atomic(path, '{"old": 1}')

    def half(file):
        file.write(b'{"new": ')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, half)
    assert json.loads(path.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


@pytest.mark.slow
def test_outputs_killed_mid_write_are_whole_every_time(tmp_path):
    """Kill a process rewriting the run's outputs at many moments; each file parses."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for attempt in range(6):
        out = tmp_path / f"run{attempt}"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(out)], env=env, stdout=subprocess.PIPE, text=True
        )
        writer.stdout.readline()  # one full write exists
        time.sleep(0.05 + 0.37 * attempt % 1.0)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        summary = json.loads((out / "summary.json").read_text())
        assert summary["n"] >= 1
        assert pq.read_table(out / "events.parquet").num_rows == 20000
        assert pq.read_table(out / "metrics.parquet").num_rows == 1
