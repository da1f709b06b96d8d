"""What every benchmark needs: where results go, how they are written, memory probes, and a
config from a base mapping plus dotted overrides."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ring_actors.config import Config

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def tree_cpu_s_by_kind(root: int | None = None) -> dict[str, float]:
    """:func:`tree_cpu_s` split by what each process is: ``driver`` (``root``), the run's
    actors (:data:`ACTOR_KINDS`, by the title Ray gives an actor's process) and ``ray`` (Ray's
    own processes, idle workers, anything else): where a run's CPU went."""
    root = os.getpid() if root is None else root
    table = process_table()
    split: dict[str, float] = {}
    for pid in descendants(root, table):
        title = command_line(pid).split(" ", 1)[0].partition(".")[0]  # ray::Actor.method
        kind = "driver" if pid == root else ACTOR_KINDS.get(title, "ray")
        split[kind] = split.get(kind, 0.0) + table[pid].cpu_s + reaped_cpu_s(pid)
    return split
