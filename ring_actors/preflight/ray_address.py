"""A Ray address nothing answers at ends the launch in seconds, naming where it came from.

Given an address where no Ray listens (a typo, a head not started yet), ``ray.init`` retries
its GCS for minutes, printing Ray's warnings, before it fails. A TCP connection to the same
address answers at once: refused, or no answer within a few seconds.
"""

from __future__ import annotations

import socket

REACH_TIMEOUT_S = 5.0


class RayUnreachable(RuntimeError):
    """Nothing accepts a connection at the Ray address a run was given."""


def check_reachable(address: str, source: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raise :class:`RayUnreachable` when nothing listens at ``address`` (``host:port`` or
    ``ray://host:port``; ``auto`` and other forms are left to Ray). ``source`` names the
    setting it came from, for the message."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    host = host.strip("[]")  # an IPv6 address in brackets
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise RayUnreachable(
            f"{source}={address}: no Ray answers there ({err}). Start its head there "
            "(`ray start --head`) or fix the address; without one the run starts a Ray of "
            "its own on this machine."
        ) from err
