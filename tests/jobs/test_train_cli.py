"""See before it runs: --list, --print-config and --dry-run answer without starting Ray."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.conftest import DATA_ROOT, needs_data

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def run(*args: str) -> tuple[str, bool]:
    """The command's output, and whether it imported Ray."""
    code = (
        "import sys; from jobs.train import main; code = main(sys.argv[1:]); "
        "print('RAY-IMPORTED' if 'ray' in sys.modules else 'NO-RAY'); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, "RAY-IMPORTED" in done.stdout


def test_list_names_every_method_dataset_topology_and_paper_config():
    out, imported_ray = run("--list")
    for name in ("drdfl", "dfedavg", "fashion-mnist", "dirichlet", "exponential"):
        assert name in out
    assert "drdfl-cifar10-dir0.1.yaml" in out and not imported_ray


def test_print_config_is_the_resolved_config_with_defaults():
    out, imported_ray = run("--print-config", "clients.count=4", "algorithm.name=dfedavg")
    printed = yaml.safe_load(out.rsplit("\n", 2)[0])
    assert printed["clients"]["count"] == 4 and printed["algorithm"]["name"] == "dfedavg"
    assert printed["schedule"]["stall_hops"] == 10.0  # a default no file sets, shown
    assert not imported_ray


@needs_data
def test_dry_run_checks_the_data_and_prints_the_plan():
    out, imported_ray = run("--dry-run", f"data.root={DATA_ROOT}", "clients.count=4")
    assert "(found)" in out and "4 (4 at the start)" in out and "MB per hop" in out
    assert not imported_ray
