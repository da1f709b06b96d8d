"""The flat layout a chunked lap cuts its chunks from (``chunked_lap.py``).

A contribution's tensors of one dtype are concatenated, in key order, into one 1-D buffer, a
segment; chunk k of N is the k-th of N contiguous slices of every segment. So a chunk is one
tensor per dtype, however many tensors the model has: it is added with one operation,
checked finite in one pass and sent as one piece (a ResNet-18's 122 tensors made every chunk
pay per-tensor work on every member).

A segment is named by its dtype and a digest of its keys and shapes, so members whose
contributions agree in layout (every member of a FedAvg lap) share their segments and add
into them. A member whose layout differs (a GENE-FL member contributes keys of its own)
brings its own segments, which the chunks carry beside the others' as an all-gather; a key
held in several segments is summed when the total is rebuilt. Every member rebuilds the
same finished chunks in the same order, so every member holds the same total.

A chunk's header lists the layout once, as ``("<segment>/<key>", shape)`` pairs; a member
parses and checks a header once per layout it meets (``Layouts``), not once per chunk.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from ring_actors.delivery.payloads import SHAREABLE_DTYPES

Tensors = dict[str, torch.Tensor]
Shape = tuple[int, ...]
Shapes = tuple[tuple[str, Shape], ...]
Spec = tuple[Shape, torch.dtype]

DTYPES = {str(d).removeprefix("torch."): d for d in SHAREABLE_DTYPES}
KNOWN_LAYOUTS = 64  # layouts a member remembers in one lap (one, unless peers misbehave)


@dataclass(frozen=True)
class Segment:
    """One dtype's tensors of a layout, concatenated in the order of ``entries``."""

    dtype: torch.dtype
    entries: tuple[tuple[str, Shape], ...]  # (key, shape), keys sorted
    numel: int

    def piece(self, chunk: int, chunks: int) -> tuple[int, int]:
        """The elements of this segment that chunk ``chunk`` of ``chunks`` holds."""
        return chunk * self.numel // chunks, (chunk + 1) * self.numel // chunks


@dataclass(frozen=True)
class Layout:
    """Segments by name, every key's shape and dtype, and the header's form of them."""

    segments: dict[str, Segment]  # sorted by name: every member walks them alike
    specs: dict[str, Spec]
    shapes: Shapes


def segment_name(dtype: torch.dtype, entries: tuple[tuple[str, Shape], ...]) -> str:
    """The dtype and a digest of the keys and shapes: equal names, equal segments."""
    digest = hashlib.blake2b(repr(entries).encode(), digest_size=8).hexdigest()
    return f"{str(dtype).removeprefix('torch.')}:{digest}"


def layout_of(contribution: Tensors) -> Layout:
    """A contribution's layout: one segment per dtype, keys in sorted order."""
    by_dtype: dict[torch.dtype, list[tuple[str, Shape]]] = {}
    for key in sorted(contribution):
        value = contribution[key]
        by_dtype.setdefault(value.dtype, []).append((key, tuple(value.shape)))
    return _layout([_segment(dtype, tuple(entries)) for dtype, entries in by_dtype.items()])


def _segment(dtype: torch.dtype, entries: tuple[tuple[str, Shape], ...]) -> tuple[str, Segment]:
    numel = sum(math.prod(shape) for _, shape in entries)
    return segment_name(dtype, entries), Segment(dtype, entries, numel)


def _layout(segments: list[tuple[str, Segment]]) -> Layout:
    ordered = dict(sorted(segments, key=lambda item: item[0]))
    specs = {key: (shape, s.dtype) for s in ordered.values() for key, shape in s.entries}
    shapes = tuple(
        (f"{name}/{key}", shape) for name, s in ordered.items() for key, shape in s.entries
    )
    return Layout(ordered, specs, shapes)


def parse(shapes: object) -> Layout | str:
    """A header's layout, or why it is not one: every segment named by its dtype and the
    digest of its entries, no key twice in a segment, and one shape and dtype per key."""
    if not isinstance(shapes, tuple):
        return "its shapes are not a tuple"
    grouped: dict[str, list[tuple[str, Shape]]] = {}
    for entry in shapes:
        if not _well_typed(entry):
            return "its shapes are not (name, sizes) pairs"
        name, _, key = entry[0].partition("/")
        grouped.setdefault(name, []).append((key, entry[1]))
    segments = []
    for name, listed in grouped.items():
        entries = tuple(sorted(listed))
        dtype = DTYPES.get(name.partition(":")[0])
        unique = len({key for key, _ in entries}) == len(entries)
        if dtype is None or not unique or segment_name(dtype, entries) != name:
            return f"its segment {name[:40]!r} does not name its entries"
        segments.append(_segment(dtype, entries))
    seen: dict[str, Spec] = {}
    for _, segment in segments:
        for key, shape in segment.entries:
            if seen.setdefault(key, (shape, segment.dtype)) != (shape, segment.dtype):
                return f"its key {key!r} has two shapes or dtypes"
    return _layout(segments)


def _well_typed(entry: object) -> bool:
    return (
        isinstance(entry, tuple)
        and len(entry) == 2
        and isinstance(entry[0], str)
        and isinstance(entry[1], tuple)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in entry[1])
    )


def misfit(layout: Layout, tensors: Tensors, chunk: int, chunks: int) -> str | None:
    """Why a chunk's pieces do not match its layout; None when each is the 1-D slice of its
    segment that chunk ``chunk`` of ``chunks`` holds, in the segment's dtype."""
    if tensors.keys() != layout.segments.keys():
        return f"its pieces {sorted(tensors)[:3]} do not match its layout"
    for name, piece in tensors.items():
        segment = layout.segments[name]
        low, high = segment.piece(chunk, chunks)
        if piece.dim() != 1 or piece.numel() != high - low or piece.dtype != segment.dtype:
            return f"{name!r} is not chunk {chunk} of {chunks} of its segment"
    return None


def disagreement(theirs: Layout, own: Layout) -> str | None:
    """Why ``own`` cannot be added into a chunk of layout ``theirs`` (a key of another shape
    or dtype would broadcast or cast silently); None when it fits."""
    for key, spec in own.specs.items():
        held = theirs.specs.get(key)
        if held is not None and held != spec:
            return f"{key!r} is {_spec(held)} in the chunk, {_spec(spec)} here"
    for name, segment in own.segments.items():
        held = theirs.segments.get(name)
        if held is not None and held.entries != segment.entries:
            return f"its segment {name!r} is not this member's"
    return None


def _spec(spec: Spec) -> str:
    return f"{spec[0]} {str(spec[1]).removeprefix('torch.')}"


def joined(theirs: Layout, own: Layout) -> Layout:
    """The layout of a chunk of ``theirs`` once ``own`` is added into it."""
    return _layout(list((theirs.segments | own.segments).items()))


class Layouts:
    """The layouts one member meets in one lap's chunks, each parsed and checked once."""

    def __init__(self, own: Layout) -> None:
        self.own = own
        self.parsed: dict[Shapes, Layout | str] = {}
        self.joins: dict[Shapes, Layout | str] = {}

    def parse(self, shapes: object) -> Layout | str:
        """``parse(shapes)``, remembered."""
        try:
            known = self.parsed.get(shapes)  # type: ignore[arg-type]
        except TypeError:  # holds something unhashable
            return "its shapes are not (name, sizes) pairs"
        if known is None:
            known = parse(shapes)
            self._remember(self.parsed, shapes, known)
        return known

    def join(self, theirs: Layout) -> Layout | str:
        """``theirs`` with this member's own layout added, or why it cannot be, remembered."""
        known = self.joins.get(theirs.shapes)
        if known is None:
            wrong = disagreement(theirs, self.own)
            known = joined(theirs, self.own) if wrong is None else wrong
            self._remember(self.joins, theirs.shapes, known)
        return known

    @staticmethod
    def _remember(cache: dict, key: object, value: object) -> None:
        if len(cache) >= KNOWN_LAYOUTS:
            cache.clear()
        cache[key] = value


def flatten(contribution: Tensors, layout: Layout, into: Tensors | None = None) -> Tensors:
    """Each segment's tensors concatenated into one 1-D buffer, on the device of its first
    tensor (a GPU client's state stays on its GPU); with ``into``, into its buffers."""
    flat = {}
    for name, segment in layout.segments.items():
        values = [contribution[key].detach().reshape(-1) for key, _ in segment.entries]
        out = None if into is None else into[name]
        device = values[0].device if out is None else out.device
        flat[name] = torch.cat([v.to(device) for v in values], out=out)
    return flat


def cut(flat: Tensors, layout: Layout, chunks: int) -> list[Tensors]:
    """Every segment cut into ``chunks`` contiguous slices (views), alike on every member."""
    return [
        {name: flat[name][slice(*s.piece(chunk, chunks))] for name, s in layout.segments.items()}
        for chunk in range(chunks)
    ]


def add_part(received: Tensors, mine: Tensors) -> Tensors:
    """The received partial sum plus this member's part, one addition per segment, on the
    device that holds the part: a GPU client's state never leaves its device for it."""
    total = dict(received)
    for name, value in mine.items():
        held = total.get(name)
        total[name] = value.clone() if held is None else held.to(value.device) + value
    return total


def rebuild(flat: Tensors, layout: Layout, own_memory: bool = True) -> Tensors:
    """The total from the summed segments, each key in its shape; a key held in several
    segments is their sum. With ``own_memory`` each key is copied out: a view takes its whole
    buffer along wherever it is pickled alone (a chunk's rebuilt total is). Without it, keys
    are views of the segments, which travel and are saved together, in one dict."""
    total: Tensors = {}
    for name, segment in layout.segments.items():
        offset = 0
        for key, shape in segment.entries:
            size = math.prod(shape)
            value = flat[name][offset : offset + size].view(shape)
            offset += size
            if key in total:
                total[key] = total[key] + value
            else:
                total[key] = value.clone() if own_memory else value
    return total
