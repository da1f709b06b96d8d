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
