"""What a client computes with: its data, and the compute slot it holds while it trains."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from ring_actors.data.images import LabelledImages


@dataclass(frozen=True)
class ClientData:
    """A client's private train and test splits, and the Global-T set every client shares."""

    train: LabelledImages
    local_test: LabelledImages
    global_test: LabelledImages


class SlotHolder(Protocol):
    """Compute slots (see ``slots``): ``with hold(round_):`` around training and evaluation."""

    waited_s: float

    def hold(self, round_: int) -> AbstractContextManager[None]: ...


class Ungated:
    """No slot limit: every client computes when it is ready."""

    waited_s = 0.0

    @contextmanager
    def hold(self, round_: int) -> Iterator[None]:
        yield
