"""The lap groups' rendezvous over Ray's own key-value store (the GCS), reached on the
cluster's authenticated channel: a group's first member publishes its store's address there
and the others read it, so the engine opens no port for its rendezvous. Keys live in a
namespace of the run's own, so runs on one cluster never meet."""

from __future__ import annotations

import time

import ray
from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_get, _internal_kv_put

from ring_actors.runtime.actor_names import run_namespace

POLL_S = 0.02  # how often a member looks for an address not yet published


class RayRendezvous:
    """:class:`~ring_actors.delivery.rendezvous.Rendezvous` on Ray's key-value store."""

    def __init__(self, run_key: str) -> None:
        self.namespace = run_namespace(run_key)
        self.host = ray.util.get_node_ip_address()  # where this node's peers reach it

    def publish(self, key: str, value: str) -> None:
        _internal_kv_put(key, value.encode(), overwrite=True, namespace=self.namespace)

    def lookup(self, key: str, timeout_s: float) -> str | None:
        deadline = time.monotonic() + timeout_s
        while True:
            value = _internal_kv_get(key, namespace=self.namespace)
            if value is not None:
                return value.decode()
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)

    def withdraw(self, key: str) -> None:
        _internal_kv_del(key, namespace=self.namespace)
