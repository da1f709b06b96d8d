"""The suite's runner settings: a test that takes its worker down (a hang past the timeout, a
crash) fails once, by name, and the run goes on to its summary instead of stalling CI."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_test_that_kills_its_worker_fails_once_by_name_and_the_run_ends(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_first():\n    pass\n")
    (tmp_path / "test_b.py").write_text(
        "import os\n\ndef test_crash():\n    os._exit(1)\n\ndef test_after():\n    pass\n"
    )
    command = [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml")]
    command += ["--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-n", "1", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert out.count("crashed while running 'test_b.py::test_crash'") == 1, out
