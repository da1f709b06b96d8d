"""The dynamic topology's draw by speed: similar peers preferred, the same draw everywhere."""

from __future__ import annotations

import pytest

from topologies.dynamic import Dynamic, similarity_weight

MEMBERS = list(range(8))
SPEEDS = {m: 1.0 if m < 4 else 8.0 for m in MEMBERS}  # two groups, 8x apart


def same_group_share(topology: Dynamic, speeds: dict[int, float] | None) -> float:
    same = total = 0
    for round_ in range(200):
        for client in MEMBERS:
            for peer in topology.in_neighbours(MEMBERS, client, round_, speeds):
                same += (peer < 4) == (client < 4)
                total += 1
    return same / total


def test_similarity_prefers_peers_of_similar_speed():
    assert same_group_share(Dynamic(2, 1, seed=3, similarity=2.0), SPEEDS) > 0.9
    uniform = same_group_share(Dynamic(2, 1, seed=3), SPEEDS)
    assert 0.33 < uniform < 0.53  # 3 of the 7 others are in one's own group


def test_the_draw_is_a_pure_function_of_its_inputs():
    a, b = Dynamic(3, 2, seed=5, similarity=1.0), Dynamic(3, 2, seed=5, similarity=1.0)
    draws = [[a.in_neighbours(MEMBERS, c, r, dict(SPEEDS)) for c in MEMBERS] for r in range(10)]
    assert draws == [[b.in_neighbours(MEMBERS, c, r, SPEEDS) for c in MEMBERS] for r in range(10)]
    other_seed = Dynamic(3, 2, seed=6, similarity=1.0)
    assert draws != [
        [other_seed.in_neighbours(MEMBERS, c, r, SPEEDS) for c in MEMBERS] for r in range(10)
    ]
    for r in range(10):  # senders are the inverse of listeners under the same speeds
        for c in MEMBERS:
            for peer in a.in_neighbours(MEMBERS, c, r, SPEEDS):
                assert c in a.out_neighbours(MEMBERS, peer, r, SPEEDS)


def test_no_similarity_or_no_speeds_is_the_uniform_draw():
    uniform = Dynamic(2, 1, seed=9)
    weighted = Dynamic(2, 1, seed=9, similarity=2.0)
    for r in range(20):
        for c in MEMBERS:
            expected = uniform.in_neighbours(MEMBERS, c, r)
            assert uniform.in_neighbours(MEMBERS, c, r, SPEEDS) == expected
            assert weighted.in_neighbours(MEMBERS, c, r) == expected


@pytest.mark.parametrize(
    ("own", "peer", "similarity", "weight"),
    [(1.0, 1.0, 3.0, 1.0), (1.0, 2.0, 1.0, 0.5), (4.0, 1.0, 2.0, 1 / 16), (None, 2.0, 2.0, 1.0)],
)
def test_the_weight_is_the_speed_ratio_to_the_power_similarity(own, peer, similarity, weight):
    assert similarity_weight(own, peer, similarity) == pytest.approx(weight)
