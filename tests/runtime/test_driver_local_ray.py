"""A run without a Ray address starts a Ray of its own: a file a Ray gone left behind
(``ray_current_cluster``, written by ``ray start`` or a test cluster killed with -9) never
makes it wait on a cluster that is not there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_a_stale_cluster_file_is_never_joined():
    # A short folder of its own: Ray's socket paths under it must fit a Unix socket's limit.
    ray_tmp = Path(tempfile.mkdtemp(prefix="ra-", dir="/tmp"))
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")  # nobody there
        code = (
            "import ray; from ring_actors.runtime.driver import connect_ray; "
            "assert connect_ray(None); print('GCS', ray.get_runtime_context().gcs_address)"
        )
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env={**env, "RAY_TMPDIR": str(ray_tmp)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "GCS" in done.stdout and "127.0.0.1:9\n" not in done.stdout
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
