"""The README's three commands on a fresh clone with no dataset anywhere and no network: the
set-up is this interpreter (installing again would take minutes), then the run and the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A small part of the suite that reads the package's sample and the quickstart's reference.
SUBSET = ["tests/data/test_sample.py", "tests/jobs/test_format_table.py"]


def offline_env(clone: Path, home: Path) -> dict[str, str]:
    """No data root, an empty home (so an empty cache), downloads sent to a closed port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RING_ACTORS_", "MLFLOW_"))}
    env.pop("XDG_CACHE_HOME", None)
    dead = "http://127.0.0.1:9"
    return {
        **env,
        "HOME": str(home),
        "PYTHONPATH": str(clone),  # what `pip install -e .` in the clone would give
        "HTTP_PROXY": dead,
        "HTTPS_PROXY": dead,
        "http_proxy": dead,
        "https_proxy": dead,
    }


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_readme_commands_work_on_a_fresh_clone_offline(tmp_path):
    clone, home = tmp_path / "clone", tmp_path / "home"
    home.mkdir()
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", head], check=True)
    assert not (clone / "runs").exists() and not (clone / "mlflow.db").exists()
    env = offline_env(clone, home)

    run = subprocess.run(
        [sys.executable, "-m", "jobs.train"], cwd=clone, env=env, capture_output=True, text=True
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "crash: client 1 crashed" in out and "ring healed" in out, out[-4000:]
    assert "join: client 5 spliced in" in out, out[-4000:]
    assert "above local by more than twice its seed spread" in out, out[-4000:]
    assert len(list((clone / "runs").glob("*/summary.json"))) == 1
    assert (clone / "mlflow.db").is_file()
    assert not (home / ".cache" / "ring-actors" / "data").exists()  # nothing was downloaded

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUBSET],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stdout[-4000:]
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    assert "needs the full dataset archives" in tests.stdout  # the skip says why
