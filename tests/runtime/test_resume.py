"""A run whose driver died continues from its checkpoints: same outputs, same MLflow run,
and (sync, a deterministic method) the same final models as a run never interrupted; in
async mode, where what a client merges depends on timing, every lap is still whole.

The uninterrupted run of every case goes on the in-process ring: the same cores, one torch
thread as on an actor, bit for bit the models and lap totals of a run on Ray (both compared
at ``745c0e3``: `fedavg` and `drdfl`, every tensor equal), in a fourth to a fifth of the time;
of an async case only its laps' counts are compared."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
import torch
import yaml
from torch import nn

from ring_actors.config import Config
from ring_actors.coordinator.history import read_history
from ring_actors.in_process import InProcessRing
from ring_actors.preflight.output_folder import RunFolderError
from ring_actors.runtime.driver import launch, run_experiment, shutdown
from ring_actors.storage.run_folder import RunFolder
from tests.conftest import LIGHT, TRACKED, needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]

CLIENTS = 3


def rounds_written(run_dir: Path) -> set[tuple[int, int]]:
    path = run_dir / "metrics.parquet"
    if not path.exists():
        return set()
    # Its bytes first: the run replaces the file, and a reader of the path may see two.
    rows = pq.read_table(pa.BufferReader(path.read_bytes())).to_pylist()
    return {(r["client"], r["round"]) for r in rows}


def reported(run_dir: Path) -> set[tuple[int, int]]:
    """Every report in the coordinator's history log, which a resume reads: within half a
    second of the report, where metrics.parquet may wait out a slow write 20 times over."""
    history = read_history(RunFolder(run_dir).coordinator_history)
    return {(c, r) for r, by_client in history.by_round.items() for c in by_client}


def saved_rounds(run_dir: Path) -> dict[int, int]:
    """The round each client's checkpoint on disk holds."""
    rounds = {}
    for path in sorted((run_dir / "clients").glob("client-*.pt")):
        # Written atomically: a poll reads the old checkpoint or the new one, whole.
        rounds[int(path.stem.split("-")[1])] = torch.load(path, weights_only=False)["round"]
    return rounds


def drdfl_spread(run_dir: Path) -> bool:
    """0 at round 5, 2 at 4, 1 at 3: the widest spread a sync ring of three allows."""
    everyone = {(c, r) for c in range(CLIENTS) for r in range(3)}
    return rounds_written(run_dir) >= everyone | {(0, 5), (2, 4)}


def a_round_apart(run_dir: Path) -> bool:
    """Some client saved a round its successor has not: the cut lands in a lap's result
    lap (or a pull of what was published) that only some clients finished."""
    rounds = saved_rounds(run_dir)
    return len(rounds) == CLIENTS and len(set(rounds.values())) > 1


def between_checkpoints(run_dir: Path) -> bool:
    """Client 0 saved round 1 (checkpoints every 2 rounds) though it reported round 2: the
    resume redoes a round whose push and lap its peers already took."""
    rounds = saved_rounds(run_dir)
    return len(rounds) == CLIENTS and rounds[0] == 1 and (0, 2) in reported(run_dir)


@dataclass(frozen=True)
class Case:
    overrides: tuple[str, ...]
    cut_when: Callable[[Path], bool]
    exact: bool  # sync: the resumed models equal the uninterrupted run's
    pacing: tuple[str, ...] = ()  # pure delays, to land the cut: the whole run goes without
    cuts: int = 1  # the driver dies this often; after the first, at a seeded random round


# Each hop half a second: a lap is seconds long. Simulated links take the laps off the
# collective engine, whose sums round differently: every run of a case goes round the ring.
LINKS = "heterogeneity.links.latency_s=0.5"
PACED = (LINKS,)
# Client 0 dawdles from round 3: its report of round 2 is out seconds before it saves round 3.
LATE_SAVE = "faults=[{at_round: 3, slow: [0], delay_s: 2}]"
CASES = {
    "drdfl": Case(
        ("experiment.rounds=6", "checkpoint.every_rounds=2"),  # saved at rounds 1, 3 and 5
        drdfl_spread,
        exact=True,
        # Client 1 dawdles from round 4: its successor and client 0 run ahead.
        pacing=(
            "faults=[{at_round: 0, slow: [0, 1, 2], delay_s: 0.5}, "
            "{at_round: 4, slow: [1], delay_s: 4}]",
        ),
    ),
    "fedavg": Case(
        ("algorithm.name=fedavg", "experiment.rounds=5", "checkpoint.every_rounds=2", *TRACKED),
        between_checkpoints,
        exact=True,
        pacing=(*PACED, LATE_SAVE),
        cuts=2,
    ),
    "dfedavg": Case(
        ("experiment.rounds=5", "checkpoint.every_rounds=2"),
        between_checkpoints,
        exact=True,
        pacing=(*PACED, LATE_SAVE),
        cuts=2,
    ),
    "gene_fl": Case(
        ("algorithm.name=gene_fl", "experiment.rounds=4", "checkpoint.every_rounds=2"),
        between_checkpoints,
        exact=True,
        pacing=PACED,
    ),
    "pfedgm": Case(("algorithm.name=pfedgm", "experiment.rounds=4"), a_round_apart, True, PACED),
    "ua_pdfl": Case(("algorithm.name=ua_pdfl", "experiment.rounds=4"), a_round_apart, True, PACED),
    "fedavg-async": Case(
        ("algorithm.name=fedavg", "experiment.rounds=4", "schedule.mode=async", LINKS, *TRACKED),
        a_round_apart,
        exact=False,
    ),
}


def setting(case: Case, paced: bool = True) -> tuple[str, ...]:
    """The case's run; a hop timeout a slowed client's round fits in on a loaded machine.
    A sync ring's results do not depend on its clients' delays or its links': its
    uninterrupted run goes without them (its laps round the ring, as the paced run's do)."""
    pacing = case.pacing if paced else ()
    common = (f"clients.count={CLIENTS}", "schedule.hop_timeout_s=20", *LIGHT)
    common += ("schedule.lap_engine=ring",)
    return (*common, *case.overrides, *pacing)


def cut_again(config: Config, run_dir: Path, seed: str) -> None:
    """Resume the run and kill its driver once more, after a seeded random number of new
    reports (at the latest one round before the end)."""
    experiment = launch(config, run_dir, resume=True)
    try:
        ray.get(experiment.coordinator.resume_run.remote())
        last = CLIENTS * (config.experiment.rounds - 1)
        target = random.Random(seed).randint(min(len(rounds_written(run_dir)) + 1, last), last)
        deadline = time.monotonic() + 300
        while len(rounds_written(run_dir)) < target:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        shutdown(experiment)
    assert len(rounds_written(run_dir)) < CLIENTS * config.experiment.rounds  # cut mid-run


Models = dict[int, dict[str, torch.Tensor]]


def tensors(algorithm: object) -> dict[str, torch.Tensor]:
    """Every tensor of every network a method holds."""
    networks = {k: v for k, v in vars(algorithm).items() if isinstance(v, nn.Module)}
    return {
        f"{name}.{key}": tensor
        for name, net in networks.items()
        for key, tensor in net.state_dict().items()
    }


def final_models(run_dir: Path, rounds: int) -> Models:
    """Every tensor each client's method holds after the last round, from its checkpoint."""
    models = {}
    for path in sorted((run_dir / "clients").glob("client-*.pt")):
        saved = torch.load(path, weights_only=False)
        assert saved["round"] == rounds - 1
        models[int(path.stem.split("-")[1])] = tensors(saved["algorithm"])
    return models


def uninterrupted(config: Config, out: Path) -> tuple[dict, Models]:
    """The run never cut, on the in-process ring with one torch thread (an actor's): its
    summary and every client's final tensors; its outputs in ``out``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ring = InProcessRing.from_config(config, out)
        summary = ring.run(timeout_s=300)
    finally:
        torch.set_num_threads(threads)
    assert summary["rounds_completed"] == config.experiment.rounds
    return summary, {c: tensors(client.core.algorithm) for c, client in ring.clients.items()}


def laps(run_dir: Path) -> dict[tuple[int, int, str], float]:
    """Every client's lap figures (contributors, checksum) by round."""
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    return {
        (row["client"], row["round"], key): value
        for row in rows
        for key, value in row.items()
        if key.startswith("lap_") and value is not None
    }


def same_laps(whole: Path, resumed: Path, exact: bool) -> None:
    """Every lap counts the members it counted uninterrupted, and the clients of a round
    applied one total; sync: the very totals of the uninterrupted run."""
    expected, got = laps(whole), laps(resumed)
    counts = {k: v for k, v in expected.items() if k[2].endswith("_contributors")}
    assert {k: got.get(k) for k in counts} == counts
    totals: dict[tuple[int, str], set[float]] = {}
    for (_, round_, key), value in got.items():
        if key.endswith("_checksum"):
            totals.setdefault((round_, key), set()).add(value)
    assert all(len(t) == 1 for t in totals.values()), totals
    if exact:
        checksums = {k: v for k, v in expected.items() if k[2].endswith("_checksum")}
        assert {k: got.get(k) for k in checksums} == pytest.approx(checksums)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_whose_driver_died_resumes_to_the_same_result(ray_local, tmp_path, name):
    case = CASES[name]
    config = small_config(tmp_path, *setting(case))
    rounds = config.experiment.rounds
    unpaced = small_config(tmp_path, *setting(case, paced=False))
    whole, expected = uninterrupted(unpaced, tmp_path / "whole")

    run_dir = tmp_path / "cut"
    experiment = launch(config, run_dir)
    try:
        ray.get(experiment.coordinator.start_clients.remote())
        deadline = time.monotonic() + 300
        while not case.cut_when(run_dir):
            assert time.monotonic() < deadline  # the files follow the run within seconds
            time.sleep(0.1)
    finally:  # the driver dies: every actor of the run goes with it (the next case's CPUs)
        shutdown(experiment)
    assert json.loads((run_dir / "summary.json").read_text())["partial"] is True
    for saved in (run_dir / "clients").glob("*.pt"):  # no checksum torch.load never reads
        assert all(r.CRC == 0 for r in zipfile.ZipFile(saved).infolist() if r.file_size)
    run_id = json.loads((run_dir / "coordinator.json").read_text())["run_id"]
    for cut in range(1, case.cuts):
        cut_again(config, run_dir, seed=f"{name}-{cut}")

    resumed = run_experiment(config, run_dir, progress=False, resume=True)
    assert resumed["rounds_completed"] == rounds and resumed["events"]["lost_payloads"] == 0
    assert (run_id is not None) == config.tracking.enabled
    assert resumed["mlflow"]["run_id"] == run_id  # the same MLflow run, continued
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    assert sorted((r["client"], r["round"]) for r in rows) == [
        (c, r) for c in range(CLIENTS) for r in range(rounds)
    ]  # every round once: the ones before the cut kept, the rest appended
    kinds = [e["kind"] for e in pq.read_table(run_dir / "events.parquet").to_pylist()]
    assert "run_resumed" in kinds
    assert json.loads((run_dir / "summary.json").read_text())["partial"] is False
    same_laps(tmp_path / "whole", run_dir, case.exact)
    if not case.exact:
        return
    got = final_models(run_dir, rounds)
    assert set(got) == set(expected)
    for client, state in expected.items():
        for key, tensor in state.items():
            assert torch.allclose(tensor, got[client][key], atol=1e-6), (client, key)
    assert whole["local_acc"]["per_client"] == pytest.approx(resumed["local_acc"]["per_client"])


JOIN_PLAN = "faults=[{at_round: 1, crash: [2]}, {at_round: 2, join: 1}]"  # client 3 joins


def test_a_run_resumes_after_its_join_and_ends_as_if_never_interrupted(ray_local, tmp_path):
    """The driver of a run whose plan crashed a client and spliced one in is killed (kill -9)
    once the joiner trained: the resumed run keeps the joiner as a member, applies neither
    entry again, and ends with the uninterrupted run's results."""
    config = small_config(
        tmp_path,
        f"clients.count={CLIENTS}",
        *LIGHT,
        "data.dataset=fashion-mnist-sample",
        "algorithm.name=fedavg",
        "experiment.rounds=5",
        JOIN_PLAN,
    )
    whole, _ = uninterrupted(config, tmp_path / "whole")

    config_file, run_dir, log = tmp_path / "run.yaml", tmp_path / "cut", tmp_path / "driver.log"
    config_file.write_text(yaml.safe_dump(config.to_dict()))
    command = [sys.executable, "-m", "jobs.train", "--config", str(config_file)]
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    with log.open("w") as out:
        driver = subprocess.Popen(
            [*command, "--output-dir", str(run_dir), "--no-progress"],
            cwd=Path(__file__).resolve().parents[2],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 300
        while saved_rounds(run_dir).get(3, -1) < 2:  # the joiner trained its first round
            assert driver.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        os.kill(driver.pid, signal.SIGKILL)  # Ray ends the actors of a driver that died
        driver.wait()
    assert json.loads((run_dir / "summary.json").read_text())["partial"] is True

    resumed = run_experiment(config, run_dir, progress=False, resume=True)
    assert resumed["rounds_completed"] == 5 and resumed["events"]["joins"] == 1
    assert resumed["ring_order"] == whole["ring_order"]  # the joiner in, the crashed one out
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    assert sorted({r["round"] for r in rows if r["client"] == 3}) == [2, 3, 4]
    # The survivors' results; the crashed client's last report dies with it or not by timing.
    for key in ("local_acc", "global_acc"):
        got, expected = resumed[key]["per_client"], whole[key]["per_client"]
        for client in map(str, whole["ring_order"]):
            assert got[client] == pytest.approx(expected[client]), (key, client)


def test_resuming_a_directory_without_a_run_is_refused(ray_local, tmp_path):
    with pytest.raises(RunFolderError, match="no run to resume"):
        launch(small_config(tmp_path, *setting(CASES["drdfl"])), tmp_path / "empty", resume=True)
