"""The engine's flat buffers: reused once free, never while anything shares their memory."""

from __future__ import annotations

import torch

from ring_actors.client.chunk_layout import flatten, layout_of, rebuild
from ring_actors.client.flat_buffers import FlatBuffers, shared


def contribution(value: float) -> dict[str, torch.Tensor]:
    return {
        "w": torch.full((3, 4), value),
        "b": torch.full((4,), value),
        "n": torch.tensor([int(value)], dtype=torch.int64),
    }


def pointers(flat: dict[str, torch.Tensor]) -> set[int]:
    return {t.data_ptr() for t in flat.values()}


def test_a_flat_buffer_holds_what_flatten_makes():
    made = contribution(2.0)
    layout = layout_of(made)
    flat = FlatBuffers().flatten("avg", made, layout)
    expected = flatten(made, layout)
    assert flat.keys() == expected.keys()
    assert all(torch.equal(flat[k], expected[k]) for k in flat)


def test_a_buffer_is_reused_only_once_its_total_is_released():
    buffers, layout = FlatBuffers(), layout_of(contribution(1.0))
    first = buffers.flatten("avg", contribution(1.0), layout)
    total = rebuild(first, layout, own_memory=False)  # a kept total: views of the buffer
    second = buffers.flatten("avg", contribution(2.0), layout)
    assert pointers(second).isdisjoint(pointers(first))
    assert float(total["w"][0, 0]) == 1.0  # the kept total is untouched
    del total
    third = buffers.flatten("avg", contribution(3.0), layout)
    assert pointers(third) in (pointers(first), pointers(second))
    assert float(rebuild(third, layout)["w"][0, 0]) == 3.0


def test_a_tensor_built_on_the_storage_blocks_reuse_as_a_view_does():
    buffers, layout = FlatBuffers(), layout_of(contribution(1.0))
    first = buffers.flatten("avg", contribution(1.0), layout)
    assert not any(shared(t) for t in first.values())
    held = [torch.empty(0, dtype=t.dtype).set_(t.untyped_storage()) for t in first.values()]
    assert all(shared(t) for t in first.values())
    second = buffers.flatten("avg", contribution(2.0), layout)
    assert pointers(second).isdisjoint(pointers(first))
    del held


def test_free_buffers_beyond_the_spare_are_dropped_and_a_new_layout_starts_afresh():
    buffers, layout = FlatBuffers(spare=1), layout_of(contribution(1.0))
    totals = [
        rebuild(buffers.flatten("avg", contribution(v), layout), layout, False)
        for v in (1.0, 2.0, 3.0)
    ]
    assert len(buffers.held["avg"][1]) == 3  # three totals kept: three buffers
    totals.clear()
    buffers.flatten("avg", contribution(4.0), layout)
    assert len(buffers.held["avg"][1]) == 2  # the one in use and one spare
    other = {"w": torch.ones(5)}
    buffers.flatten("avg", other, layout_of(other))
    assert len(buffers.held["avg"][1]) == 1
