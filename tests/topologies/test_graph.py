"""Graph topology: edge-list parsing, its errors, and restriction to the live members."""

from __future__ import annotations

import pytest

from topologies.graph import Graph, read_edges


def write(tmp_path, text):
    path = tmp_path / "edges.txt"
    path.write_text(text)
    return path


def test_parses_edges_with_comments_and_blank_lines(tmp_path):
    path = write(tmp_path, "# a small graph\n0 1\n\n1 2  # trailing comment\n  2 0\n0 1\n")
    assert read_edges(path) == {(0, 1), (1, 2), (2, 0)}


@pytest.mark.parametrize(
    ("text", "line", "match"),
    [
        ("0 1\n1\n", 2, "expected 'sender receiver'"),
        ("0 1\n\n1 2 3\n", 3, "expected 'sender receiver'"),
        ("a b\n", 1, "expected 'sender receiver'"),
        ("0 -1\n", 1, "expected 'sender receiver'"),
        ("0 1\n# fine\n2 2\n", 3, "self-loop 2 -> 2"),
    ],
)
def test_malformed_line_or_self_loop_names_file_and_line(tmp_path, text, line, match):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=rf"edges\.txt, line {line}: {match}"):
        read_edges(path)


def test_neighbours_follow_edges_in_ring_order():
    graph = Graph({(0, 1), (0, 3), (2, 0), (3, 0)})
    members = [3, 2, 1, 0]
    assert graph.out_neighbours(members, 0, 0) == [3, 1]
    assert graph.in_neighbours(members, 0, 0) == [3, 2]
    assert graph.out_neighbours(members, 1, 0) == []
    assert graph.in_neighbours(members, 1, 0) == [0]


def test_restricted_to_live_members():
    graph = Graph({(0, 1), (0, 3), (2, 0), (3, 0), (7, 0)})
    live = [0, 1, 2]
    assert graph.out_neighbours(live, 0, 0) == [1]
    assert graph.in_neighbours(live, 0, 0) == [2]
    assert graph.out_neighbours(live, 3, 0) == []
