"""Nodes started by hand join only with the cluster's token, and the dashboard answers only
the token's holder, on the loopback address: the recipe in docs/cluster.md, on two nodes of
one machine."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

RAY = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def status(url: str, token: str | None = None) -> int:
    """The HTTP status of a GET, or 0 when nothing answers."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def stop_nodes_under(*temp_dirs: str) -> None:
    """End the nodes started with these temp dirs and nothing else: `ray stop` would end
    every Ray on the machine, another test's too. Each of a node's processes names its
    temp dir on its command line."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = False
        for entry in os.listdir("/proc"):
            try:
                line = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if entry.isdigit() and any(d in line for d in temp_dirs):
                found = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.2)


def outward_address() -> str | None:
    """This machine's address on its network, if it has one besides the loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # no packet is sent: only a route is chosen
            return sock.getsockname()[0]
        except OSError:
            return None


def test_hand_started_nodes_need_the_token_and_the_dashboard_stays_inside(tmp_path):
    token = secrets.token_hex(32)
    token_file = tmp_path / "auth_token"
    token_file.write_text(token)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_ADDRESS", None)
    port, dashboard = free_port(), free_port()
    # Short temp dirs: Ray's socket paths under them must stay within 107 bytes.
    head_dir, worker_dir, intruder_dir = (tempfile.mkdtemp(prefix="ra-", dir="/tmp") for _ in "hwi")

    def ray(*args: str, token_env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(RAY), *args],
            env={**env, **(token_env or {})},
            capture_output=True,
            text=True,
            timeout=180,
        )

    head = ray(
        "start",
        "--head",
        f"--port={port}",
        "--num-cpus=1",
        f"--temp-dir={head_dir}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
    )
    try:
        assert head.returncode == 0, head.stderr[-2000:]
        wrong = {"RAY_AUTH_TOKEN": "0" * 64}
        intruder = ray(
            "start",
            f"--address=127.0.0.1:{port}",
            "--num-cpus=1",
            f"--temp-dir={intruder_dir}",
            token_env=wrong,
        )
        assert intruder.returncode != 0
        assert "InvalidAuthToken" in intruder.stdout + intruder.stderr
        worker = ray(
            "start",
            f"--address=127.0.0.1:{port}",
            "--num-cpus=1",
            f"--temp-dir={worker_dir}",
        )
        assert worker.returncode == 0, worker.stderr[-2000:]
        count = subprocess.run(
            [sys.executable, "-c", "import ray; ray.init(); print(len(ray.nodes()))"],
            env={**env, "RAY_ADDRESS": f"127.0.0.1:{port}"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert count.stdout.strip().splitlines()[-1] == "2", count.stderr[-2000:]

        api = f"http://127.0.0.1:{dashboard}/api/version"
        assert status(api) == 401  # no token, no answer
        assert status(api, token) == 200
        outward = outward_address()
        if outward is not None and not outward.startswith("127."):
            assert status(f"http://{outward}:{dashboard}/api/version", token) == 0
    finally:
        stop_nodes_under(head_dir, worker_dir, intruder_dir)
        for path in (head_dir, worker_dir, intruder_dir):
            shutil.rmtree(path, ignore_errors=True)
