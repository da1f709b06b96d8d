"""The flat layout chunks are cut from: a contribution survives being flattened, cut and
rebuilt; a header names its layout or is refused; each layout is parsed once per lap."""

from __future__ import annotations

import pickle

import pytest
import torch

from ring_actors.client.chunk_layout import (
    Layouts,
    cut,
    disagreement,
    flatten,
    layout_of,
    misfit,
    parse,
    rebuild,
)


def state() -> dict[str, torch.Tensor]:
    return {
        "w": torch.randn(4, 3),
        "b": torch.randn(3),
        "t": torch.arange(12.0).reshape(3, 4).t(),  # not contiguous
        "empty": torch.empty(0, 2),
        "steps": torch.tensor(7),  # 0-dim int64
        "d": torch.randn(2, 2, dtype=torch.float64),
        "mask": torch.tensor([True, False]),
    }


@pytest.mark.parametrize("chunks", [1, 3, 8, 40])  # more chunks than a segment has elements
def test_a_contribution_cut_into_chunks_is_rebuilt_exactly(chunks):
    contribution = state()
    layout = layout_of(contribution)
    assert len(layout.segments) == 4  # float32, float64, int64, bool
    parts = cut(flatten(contribution, layout), layout, chunks)
    for index, part in enumerate(parts):
        assert part.keys() == layout.segments.keys()
        assert misfit(layout, part, index, chunks) is None
    flat = {name: torch.cat([part[name] for part in parts]) for name in layout.segments}
    total = rebuild(flat, layout)
    assert total.keys() == contribution.keys()
    for key, value in contribution.items():
        assert total[key].dtype == value.dtype and torch.equal(total[key], value), key


def test_each_tensor_of_a_total_owns_its_memory():
    """A view into the summed buffer would take all of it along wherever the total is
    pickled (a member fetching a total over Ray): ten times the bytes here."""
    contribution = {f"t{i}": torch.ones(1000) for i in range(10)}
    layout = layout_of(contribution)
    total = rebuild(flatten(contribution, layout), layout)
    assert len(pickle.dumps(total)) < 2 * 10 * 4000


def test_members_of_one_layout_share_their_segments_and_others_do_not():
    mine = layout_of({"x": torch.zeros(2, 3), "n": torch.zeros(())})
    assert layout_of({"n": torch.ones(()), "x": torch.ones(2, 3)}).segments.keys() == (
        mine.segments.keys()
    )
    assert not layout_of({"x": torch.zeros(3, 2)}).segments.keys() & mine.segments.keys()
    theirs = layout_of({"x": torch.zeros(3, 2)})
    assert disagreement(theirs, mine) == "'x' is (3, 2) float32 in the chunk, (2, 3) float32 here"
    assert disagreement(layout_of({"y": torch.zeros(4)}), mine) is None


def test_a_header_parses_back_to_its_layout():
    layout = layout_of(state())
    parsed = parse(tuple(reversed(layout.shapes)))  # in any order, as a peer sent it
    assert not isinstance(parsed, str)
    assert parsed.shapes == layout.shapes and parsed.specs == layout.specs


def renamed(shapes, old: str, new: str):
    return tuple((name.replace(old, new), shape) for name, shape in shapes)


def test_a_header_that_does_not_name_its_layout_is_refused():
    shapes = layout_of({"x": torch.zeros(2, 3), "y": torch.zeros(4)}).shapes
    (segment,) = {name.partition("/")[0] for name, _ in shapes}
    other = layout_of({"x": torch.zeros(3, 2, dtype=torch.float64)}).shapes
    cases = {
        "a key renamed": renamed(shapes, "/y", "/z"),
        "a shape changed": ((shapes[0][0], (3, 2)), shapes[1]),
        "a dtype no method shares": renamed(shapes, "float32:", "complex64:"),
        "a key twice": (*shapes, shapes[0]),
        "no segment": (("x", (6,)),),
        "x in two shapes and dtypes": (*shapes, *other),
        "a negative size": ((shapes[0][0], (-1,)),),
        "not pairs": ((segment,),),
        "not a tuple": [shapes[0]],
    }
    for case, bad in cases.items():
        assert isinstance(parse(bad), str), case


def test_a_layout_is_parsed_once_per_lap_not_once_per_chunk():
    own = layout_of({"x": torch.zeros(2, 3)})
    layouts = Layouts(own)
    header = layout_of({"x": torch.ones(2, 3), "y": torch.ones(4)}).shapes
    first = layouts.parse(header)
    assert layouts.parse(tuple(list(header))) is first  # an equal header, as unpickled
    assert layouts.join(first) is layouts.join(first)
    assert isinstance(layouts.parse(([1], [2])), str)  # unhashable: refused, not raised


def test_a_piece_of_the_wrong_size_or_dtype_does_not_fit():
    layout = layout_of({"x": torch.zeros(10)})
    (name,) = layout.segments
    assert misfit(layout, {name: torch.zeros(3)}, 0, 3) is None  # elements 0..2 of 10
    assert misfit(layout, {name: torch.zeros(4)}, 0, 3) is not None
    assert misfit(layout, {name: torch.zeros(3, dtype=torch.float64)}, 0, 3) is not None
    assert misfit(layout, {name: torch.zeros(1, 3)}, 0, 3) is not None
    assert misfit(layout, {}, 0, 3) is not None
