"""Dynamic random topology: seeded, re-drawn per block, stable, never a dead peer."""

from __future__ import annotations

import pytest

from topologies.dynamic import Dynamic

MEMBERS = list(range(12))


def draw(topology: Dynamic, members: list[int], round_: int) -> dict[int, list[int]]:
    return {c: topology.in_neighbours(members, c, round_) for c in members}


@pytest.mark.parametrize(("degree", "n", "expected"), [(3, 12, 3), (3, 4, 3), (5, 3, 2)])
def test_listens_to_min_degree_and_n_minus_one_distinct_others(degree, n, expected):
    members = MEMBERS[:n]
    topology = Dynamic(degree=degree, resample_every=1, seed=0)
    for round_ in range(5):
        for client, peers in draw(topology, members, round_).items():
            assert len(peers) == expected
            assert len(set(peers)) == expected
            assert client not in peers
            assert set(peers) <= set(members)


def test_peers_listed_in_ring_order():
    members = [9, 2, 7, 4, 11, 0, 5]
    position = {m: i for i, m in enumerate(members)}
    topology = Dynamic(degree=3, resample_every=1, seed=4)
    for peers in draw(topology, members, 0).values():
        assert peers == sorted(peers, key=position.__getitem__)


def test_same_seed_reproduces_and_other_seeds_differ():
    first = draw(Dynamic(3, 1, seed=7), MEMBERS, 2)
    assert draw(Dynamic(3, 1, seed=7), MEMBERS, 2) == first
    assert all(draw(Dynamic(3, 1, seed=s), MEMBERS, 2) != first for s in (0, 1, 8))


def test_same_within_a_block_and_redrawn_across_blocks():
    topology = Dynamic(degree=3, resample_every=4, seed=1)
    blocks = [draw(topology, MEMBERS, r) for r in range(12)]
    for start in (0, 4, 8):
        assert blocks[start] == blocks[start + 1] == blocks[start + 2] == blocks[start + 3]
    assert blocks[0] != blocks[4]
    assert blocks[4] != blocks[8]


def test_resample_every_round_changes_sets():
    topology = Dynamic(degree=3, resample_every=1, seed=1)
    rounds = [draw(topology, MEMBERS, r) for r in range(4)]
    assert all(rounds[r] != rounds[r + 1] for r in range(3))


def test_dead_member_never_appears_and_unaffected_sets_are_kept():
    topology = Dynamic(degree=3, resample_every=1, seed=3)
    before = draw(topology, MEMBERS, 0)
    dead = 5
    live = [m for m in MEMBERS if m != dead]
    after = draw(topology, live, 0)
    assert dead not in after
    for client, peers in after.items():
        assert dead not in peers
        assert dead not in topology.out_neighbours(live, client, 0)
        if dead not in before[client]:
            assert peers == before[client]
        else:  # the dead peer is replaced, the others are kept
            assert set(before[client]) - {dead} < set(peers)
    assert topology.out_neighbours(live, dead, 0) == []
    assert topology.in_neighbours(live, dead, 0) == []


def test_out_neighbours_are_the_clients_that_listen():
    topology = Dynamic(degree=2, resample_every=1, seed=0)
    listens = draw(topology, MEMBERS, 3)
    for client in MEMBERS:
        expected = [m for m in MEMBERS if client in listens[m]]
        assert topology.out_neighbours(MEMBERS, client, 3) == expected
