"""A Ray address nothing answers at is refused in seconds, naming the setting it came from."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from jobs.train import main
from ring_actors.preflight.ray_address import RayUnreachable, check_reachable


@pytest.fixture
def closed_port() -> int:
    """A port of this machine nothing listens on (taken, then given back)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_nothing_listens_at_is_refused_naming_its_setting(closed_port, scheme):
    address = f"{scheme}127.0.0.1:{closed_port}"
    with pytest.raises(RayUnreachable, match=rf"^RAY_ADDRESS={address}: no Ray answers there"):
        check_reachable(address, "RAY_ADDRESS")


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_that_accepts_passes(listening_port, scheme):
    check_reachable(f"{scheme}127.0.0.1:{listening_port}", "ray.address")


def test_auto_is_left_to_ray():
    check_reachable("auto", "ray.address")


def test_the_command_given_a_dead_address_ends_in_one_message_and_no_folder(
    closed_port, tmp_path, capsys, no_ray, monkeypatch
):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "run"
    started = time.monotonic()
    status = main(
        ["--no-progress", "--output-dir", str(out), "data.dataset=fashion-mnist-sample",
         f"ray.address=127.0.0.1:{closed_port}"]
    )  # fmt: skip
    assert status == 3 and time.monotonic() - started < 30  # Ray's own retries: minutes
    err = capsys.readouterr().err
    assert f"launch error: ray.address=127.0.0.1:{closed_port}: no Ray answers there" in err
    assert "Traceback" not in err
    assert not out.exists()
