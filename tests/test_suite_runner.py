"""The suite's runner settings: a test that takes its worker down (a crash, or a hang past the
timeout) fails once, by name, and the run goes on to its summary instead of stalling CI."""

import re
import subprocess
import sys

import pytest

from tests.helpers.train_cli import REPO

BODIES = {
    "crash": "import os\n\ndef test_down():\n    os._exit(1)\n",
    # The project's timeouts scaled down: stacks after 1 s, the worker ended after 3.
    "hang": "import time\nimport pytest\n\n@pytest.mark.timeout(3)\ndef test_down():\n"
    "    time.sleep(60)\n",
}


@pytest.mark.parametrize("how", sorted(BODIES))
def test_a_test_that_takes_its_worker_down_fails_once_by_name_and_the_run_ends(tmp_path, how):
    (tmp_path / "test_a.py").write_text("def test_first():\n    pass\n")
    (tmp_path / "test_b.py").write_text(BODIES[how] + "\n\ndef test_after():\n    pass\n")
    command = [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml")]
    command += ["--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-n", "1"]
    command += ["-o", "faulthandler_timeout=1", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    # Once, whatever the terminal's width: one failure in the run's totals and in its short
    # summary (whose lines are cut to that width), named as the crash.
    assert "crashed while running 'test_b.py::test_down'" in out, out
    assert out.count("FAILED test_b.py::test_down") == 1, out
    assert re.search(r"= 1 failed in [0-9.]+s", out), out
    if how == "hang":  # where it hung, in the run's own output
        assert 'test_b.py", line 6 in test_down' in out, out
