"""What a user can get wrong ends in one message naming what to change, a non-zero exit, no
traceback, no run folder left behind, and no finished result touched."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import DATA_ROOT, UNTRACKED, fresh_store, needs_data

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # each test runs the command in a fresh interpreter
TINY = [
    "experiment.rounds=2",
    "clients.count=3",
    "data.max_train_per_client=150",
    "eval.global_max_samples=200",
    "eval.local_max_samples=200",
    "algorithm.name=dfedavg",
]


def train(tmp_path: Path, *args: str, ray: ModuleType | None = None) -> subprocess.CompletedProcess:
    """The command in a fresh interpreter; on the test's ``ray`` when given (a local Ray of
    its own takes 6-10 s to start and stop), else on one it starts."""
    command = [sys.executable, "-m", "jobs.train", "--no-progress", *args]
    if "--resume" not in args:  # a resumed run logs where it did
        command += [f"tracking.uri={fresh_store(tmp_path / 'mlflow.db')}", *UNTRACKED]
    env = dict(os.environ)
    if ray is not None:
        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def refused(done: subprocess.CompletedProcess, *phrases: str) -> None:
    assert done.returncode != 0, done.stdout[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    for phrase in phrases:
        assert phrase in done.stderr, done.stderr[-3000:]


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished_run(ray_local: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of three clients and two rounds, ended."""
    tmp = tmp_path_factory.mktemp("finished")
    out = tmp / "run"
    done = train(tmp, "--output-dir", str(out), f"data.root={DATA_ROOT}", *TINY, ray=ray_local)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_clients_the_machine_cannot_hold_fail_at_once_and_leave_no_folder(tmp_path):
    out = tmp_path / "run"
    # More CPUs than any machine here: never placeable on the local Ray this run starts.
    done = train(tmp_path, "--output-dir", str(out), "clients.num_cpus=64", *TINY)
    refused(done, "clients.num_cpus=64", "could not be placed here")
    assert not out.exists()


def test_dry_run_of_a_plan_that_cannot_start_here_exits_non_zero(tmp_path):
    done = train(tmp_path, "--dry-run", "clients.num_cpus=64", f"data.root={DATA_ROOT}", *TINY)
    refused(done, "cannot start here", "clients.num_cpus=64")
    assert "clients:" in done.stdout  # the plan is still shown


def test_missing_dataset_names_the_fix_and_leaves_no_folder(tmp_path):
    out = tmp_path / "run"
    empty = tmp_path / "no-data"
    empty.mkdir()
    done = train(
        tmp_path,
        "--output-dir",
        str(out),
        "data.dataset=fashion-mnist",  # the quickstart's sample ships in the package
        f"data.root={empty}",
        "data.download=false",
        *TINY,
    )
    refused(done, "not found under data root", "RING_ACTORS_DATA")
    assert not out.exists()


def test_resume_of_a_folder_without_a_run_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    done = train(tmp_path, "--resume", str(tmp_path / "empty"))
    refused(done, "no run to resume", "coordinator.json")


@needs_data
def test_output_dir_holding_a_run_is_refused_and_the_run_kept(finished_run, tmp_path):
    before = digests(finished_run)
    done = train(tmp_path, "--output-dir", str(finished_run), f"data.root={DATA_ROOT}", *TINY)
    refused(done, "already holds a run", "--output-dir")
    assert digests(finished_run) == before


@needs_data
def test_resume_of_a_finished_run_refuses_and_leaves_it_byte_identical(finished_run, tmp_path):
    before = digests(finished_run)
    done = train(tmp_path, "--resume", str(finished_run))
    refused(done, "the run finished", "--output-dir")
    assert digests(finished_run) == before


@needs_data
def test_resume_overrides_that_contradict_the_run_are_refused_naming_them(finished_run, tmp_path):
    before = digests(finished_run)
    done = train(
        tmp_path, "--resume", str(finished_run), "algorithm.name=fedavg", "clients.count=3"
    )
    refused(done, "algorithm.name", "config.yaml")
    assert "clients.count" not in done.stderr  # the same value contradicts nothing
    assert digests(finished_run) == before


@needs_data
def test_a_plug_in_that_fails_at_run_time_is_one_line_and_its_traceback_a_file(ray_local, tmp_path):
    out = tmp_path / "run"
    done = train(
        tmp_path,
        "--output-dir",
        str(out),
        f"data.root={DATA_ROOT}",
        *TINY,
        "algorithm.name=tests.jobs.failing_method:FailsToTrain",
        ray=ray_local,
    )
    refused(done, "the plug-in's own bug", "client_errors.log")
    assert "ValueError: the plug-in's own bug" in (out / "client_errors.log").read_text()
    assert "Traceback" in (out / "client_errors.log").read_text()


@needs_data
def test_a_plug_in_that_fails_to_build_in_the_clients_is_one_message(ray_local, tmp_path):
    out = tmp_path / "run"
    done = train(
        tmp_path,
        "--output-dir",
        str(out),
        f"data.root={DATA_ROOT}",
        *TINY,
        "algorithm.name=tests.jobs.failing_method:FailsToBuild",
        ray=ray_local,
    )
    refused(done, "could not be started", "the plug-in cannot be built", "algorithm.name")
    # The same error from a constructor twice is the plug-in's own: no third process.
    tried = done.stderr.count("start attempt 1 of 3 failed")
    assert tried >= 3 and done.stderr.count("built (attempt 2 of 3)") == tried, done.stderr[-3000:]
    assert not out.exists()
