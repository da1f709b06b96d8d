"""The benchmarks' shared /proc readers see this process, its CPU time, its command line and
its children."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from benchmarks.common import (
    command_line,
    descendants,
    process_facts,
    process_table,
    settled_tree_cpu_s_by_kind,
    tree_cpu_s_by_kind,
)


def test_a_process_reads_its_own_cpu_time():
    before = process_facts(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    after = process_facts(os.getpid())
    assert before is not None and after is not None
    assert after.cpu_s - before.cpu_s >= 0.1
    assert process_facts(2**22 + 1) is None  # beyond pid_max: gone, not an error


def test_a_process_command_line_is_read_whole_and_empty_once_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "marker"])
    try:
        deadline = time.monotonic() + 10
        while command_line(child.pid) == "" and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd
        assert command_line(child.pid).endswith("time.sleep(30) marker")
    finally:
        child.kill()
        child.wait()
    assert command_line(child.pid) == ""


def test_descendants_hold_a_child_and_not_the_parent():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        table = process_table()
        assert child.pid in descendants(os.getpid(), table)
        assert os.getppid() not in descendants(os.getpid(), table)
    finally:
        child.kill()
        child.wait()


def test_a_reading_before_a_run_waits_for_the_last_runs_processes_to_go():
    """A process still exiting when a run starts is read as Ray's, then its time moves to
    whoever waits for it: a reading taken first would make Ray's share of the run negative.
    (A process that stays, as a test's earlier fixtures may leave, is waited for no longer.)"""
    keeps = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    burn = (
        "import time\nend = time.process_time() + 0.5\n"
        "while time.process_time() < end: pass\ntime.sleep(1)"
    )
    leftover = subprocess.Popen([sys.executable, "-c", burn])
    time.sleep(0.8)  # it has burnt its CPU and sleeps, still below this process
    reaper = threading.Thread(target=leftover.wait)  # this process waits for it, as Ray's do
    reaper.start()
    before = settled_tree_cpu_s_by_kind()
    reaper.join()  # the run: by its end, the leftover has gone
    after = tree_cpu_s_by_kind()
    keeps.kill()
    keeps.wait()
    assert after.get("ray", 0.0) - before.get("ray", 0.0) >= 0
    assert after["driver"] - before["driver"] < 0.3  # the leftover's time was counted before
