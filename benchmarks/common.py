"""What every benchmark needs: where results go, how they are written, memory probes, and a
config from a base mapping plus dotted overrides."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ring_actors.config import Config

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Reading every process's page tables costs CPU on the cores being measured, and the more so
# the more processes a side runs: at 0.5 s it took 36.6 CPU-s from vs_flower.py's 8-client
# ring run against 14.0 from Flower's, at 5 s 4.1-4.5 against 1.6, with the same peak PSS.
SAMPLE_S = 5.0
# Processes that hold a client: the ring's actors, Flower's, and the plain side's one process.
CLIENT_TITLES = ("ray::ClientActor", "ray::ClientAppActor", "driver")


def write_json(path: Path, record: Any, indent: int = 1) -> None:
    """Write a result whole: called after every run, so a later failure keeps what finished."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=indent, default=float) + "\n")


def memory_kb(pid: int | str = "self") -> dict[str, int] | None:
    """A process's ``Pss``, private (``Uss``) and ``Rss`` memory in kB from
    ``/proc/PID/smaps_rollup``, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
    except (OSError, ValueError):
        return None

    def kb(name: str) -> int:
        return int(fields.get(name, "0 kB").split()[0])

    return {
        "Pss": kb("Pss"),
        "Uss": kb("Private_Clean") + kb("Private_Dirty"),
        "Rss": kb("Rss"),
    }


def uss_mb(pid: int | str = "self") -> float:
    """Private memory of a process, in MB (0 once it is gone)."""
    return (memory_kb(pid) or {"Uss": 0})["Uss"] / 1024


def mean_std(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> str:
    """``mean ± std`` over seeds (std 0 for one value), each scaled (100: a share in %)."""
    scaled = [scale * v for v in values]
    std = statistics.stdev(scaled) if len(scaled) > 1 else 0.0
    return f"{statistics.fmean(scaled):.{digits}f} ± {std:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: floats with one decimal, None as an empty cell."""

    def cell(value: object) -> str:
        if value is None:
            return ""
        return f"{value:.1f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


class ProcessFacts(NamedTuple):
    """One process as ``/proc/PID/stat`` shows it: its parent and CPU seconds so far."""

    ppid: int
    cpu_s: float


def process_facts(pid: int | str) -> ProcessFacts | None:
    """``/proc/PID/stat`` read once; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command may hold spaces and brackets
    cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    return ProcessFacts(int(fields[1]), cpu_s)


def command_line(pid: int | str) -> str:
    """A process's command line, read only for the processes a sampler keeps ("" once gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def process_table() -> dict[int, ProcessFacts]:
    """Every live process of the machine."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (facts := process_facts(entry)) is not None:
            table[int(entry)] = facts
    return table


def descendants(root: int, table: Mapping[int, ProcessFacts]) -> set[int]:
    """``root`` and every process below it in ``table``."""
    children: dict[int, list[int]] = {}
    for pid, facts in table.items():
        children.setdefault(facts.ppid, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            tree.add(pid)
            todo += children.get(pid, [])
    return tree


def config_from_overrides(base: Mapping[str, Any], overrides: Sequence[str] = ()) -> Config:
    """A validated config: ``base`` with each ``dotted.key=value`` applied."""
    from ring_actors.config import apply_overrides, config_from_dict

    return config_from_dict(apply_overrides(dict(base), overrides))


def reaped_cpu_s(pid: int | str) -> float:
    """CPU seconds of the children a process has waited for, theirs included (``cutime`` +
    ``cstime``): where the time of a process that exited is counted; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[13]) + int(fields[14])) / CLOCK_TICKS


ACTOR_KINDS = {"ray::ClientActor": "clients", "ray::Coordinator": "coordinator",
               "ray::SlotPool": "slot pool"}  # fmt: skip


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds used so far by ``root`` (this process) and every process below it, those
    that exited and were waited for included: the difference of two readings is what a run
    in between cost, Ray's processes and actors with it."""
    return sum(tree_cpu_s_by_kind(root).values())


def actor_kind(pid: int) -> str | None:
    """The run's actor kind a process is, by the title Ray gives it (``ray::Actor.method``);
    None: not one of the run's actors, or gone."""
    return ACTOR_KINDS.get(command_line(pid).split(" ", 1)[0].partition(".")[0])


def tree_cpu_s_by_kind(root: int | None = None) -> dict[str, float]:
    """:func:`tree_cpu_s` split by what each process is: ``driver`` (``root``), the run's
    actors (:data:`ACTOR_KINDS`, by the title Ray gives an actor's process) and ``ray`` (Ray's
    own processes, idle workers, anything else): where a run's CPU went."""
    root = os.getpid() if root is None else root
    table = process_table()
    split: dict[str, float] = {}
    for pid in descendants(root, table):
        kind = "driver" if pid == root else (actor_kind(pid) or "ray")
        split[kind] = split.get(kind, 0.0) + table[pid].cpu_s + reaped_cpu_s(pid)
    return split


def settled_tree_cpu_s_by_kind(quiet_s: float = 2.0, most_s: float = 30.0) -> dict[str, float]:
    """:func:`tree_cpu_s_by_kind` once the processes below this one held still for ``quiet_s``:
    one still exiting would count as Ray's before a run and as its reaper's after."""
    end, tree, since = time.monotonic() + most_s, set(), 0.0
    while (now := time.monotonic()) < end:
        if (seen := descendants(os.getpid(), process_table())) != tree:
            tree, since = seen, now
        elif now - since >= quiet_s:
            break
        time.sleep(0.05)
    return tree_cpu_s_by_kind()


def _read_rollup(pid: int) -> tuple[int, int] | None:
    """(PSS, USS) of one process in kB, or None once it is gone."""
    memory = memory_kb(pid)
    return None if memory is None else (memory["Pss"], memory["Uss"])


class TreeSampler(threading.Thread):
    """Peak PSS of a process tree, the largest USS of one of its worker processes, and the
    CPU time each kind of process used (as last seen before it exited)."""

    def __init__(self, root: int, worker_of_root: bool, every_s: float = SAMPLE_S) -> None:
        super().__init__(daemon=True)
        self.root, self.worker_of_root, self.every_s = root, worker_of_root, every_s
        self.own_cpu_s = 0.0  # what sampling cost: it shares the cores with the side measured
        self.stop = threading.Event()
        self.peak_pss_kb, self.samples, self.max_procs = 0, 0, 0
        self.max_uss_kb: dict[str, int] = {}  # by process title ("ray::ClientActor", ...)
        self.peak_pss_by_title: dict[str, int] = {}  # each title's total at the overall peak
        self.cpu_s: dict[int, tuple[str, float]] = {}  # pid: (title, CPU seconds last seen)

    def run(self) -> None:
        started = time.thread_time()
        while not self.stop.is_set():
            self.sample()
            self.own_cpu_s = time.thread_time() - started
            self.stop.wait(self.every_s)

    def sample(self) -> None:
        total, by_title = 0, {}
        table = process_table()
        tree = descendants(self.root, table)
        for pid in tree:
            sizes = _read_rollup(pid)
            if sizes is None:
                continue
            pss, uss = sizes
            title = self.title(pid, command_line(pid))
            self.cpu_s[pid] = (title, table[pid].cpu_s)
            total += pss
            by_title[title] = by_title.get(title, 0) + pss
            if title.startswith("ray::") or (pid == self.root and self.worker_of_root):
                self.max_uss_kb[title] = max(self.max_uss_kb.get(title, 0), uss)
        self.samples += 1
        self.max_procs = max(self.max_procs, len(tree))
        if total > self.peak_pss_kb:
            self.peak_pss_kb, self.peak_pss_by_title = total, by_title

    def title(self, pid: int, cmdline: str) -> str:
        if pid == self.root:
            return "driver"
        if cmdline.startswith("ray::"):
            # "ray::<actor name>:ClientActor", "ray::ClientAppActor.run" in a method: one title
            name = cmdline.split()[0].removeprefix("ray::").rsplit(":", 1)[-1]
            return "ray::" + name.split(".")[0]
        words = [w for w in cmdline.split() if not w.startswith("-")]
        program = Path(words[0]).name if words else "?"
        if not program.startswith("python"):  # raylet, gcs_server: named by their program
            return program
        scripts = [w for w in words if w.endswith(".py")]  # python .../log_monitor.py
        return Path((scripts or words)[0]).name

    def cpu_s_by_title(self) -> dict[str, float]:
        """CPU seconds per process title, summed over its processes."""
        totals: dict[str, float] = {}
        for title, seconds in self.cpu_s.values():
            totals[title] = totals.get(title, 0.0) + seconds
        return {k: round(v, 1) for k, v in sorted(totals.items())}

    def client_uss_mb(self) -> float:
        """The largest USS of a client process (a Ray actor worker; plain: the one process)."""
        values = [v for k, v in self.max_uss_kb.items() if k in CLIENT_TITLES]
        return max(values, default=0) / 1024


def process_cpu() -> dict[int, tuple[str, float]]:
    """Every live process: (kind, user + system CPU seconds so far).

    Processes that do not descend from this one (other users of the machine, another Ray
    instance) are all of kind ``outside``.
    """
    table = process_table()
    mine = descendants(os.getpid(), table)
    return {
        pid: (classify(pid, command_line(pid)) if pid in mine else "outside", facts.cpu_s)
        for pid, facts in table.items()
    }


def classify(pid: int, cmdline: str) -> str:
    if pid == os.getpid():
        return "driver"
    for needle, kind in (
        ("ray::ClientActor", "client actors"),
        ("ray::Coordinator", "coordinator actor"),
        ("ray::IDLE", "idle ray workers"),
        ("raylet", "raylet"),
        ("gcs_server", "gcs_server"),
        ("dashboard/agent.py", "dashboard agent"),
        ("ray::DashboardAgent", "dashboard agent"),
        ("ray::RuntimeEnvAgent", "runtime-env agent"),
        ("runtime_env/agent", "runtime-env agent"),
        ("dashboard", "dashboard"),
        ("log_monitor", "log monitor"),
        ("monitor.py", "monitor"),
        ("ray", "other ray"),
    ):
        if needle in cmdline:
            return kind
    return "other of ours"


def cpu_by_kind(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds used between two ``process_cpu`` snapshots, by kind of process."""
    used: dict[str, float] = defaultdict(float)
    for pid, (kind, seconds) in after.items():
        start = before.get(pid, (kind, 0.0))[1]
        used[kind] += seconds - start
    return {k: round(v, 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v > 0.005}
