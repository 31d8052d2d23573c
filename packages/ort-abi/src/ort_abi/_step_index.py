"""Read-only maps keyed by step index over a StepTable's packed steps: each step's position in the table
is one int32 of an array spanning the indices (-1: not a table step), so a 200k-node plan holds 4 bytes
per node here instead of a dict entry, a boxed int and a cdata object per step and map."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = ["StepIndex", "StepMap"]


class StepIndex:
    """Step index -> position among the table's steps (ascending), and back."""

    __slots__ = ("_count", "_index", "_positions")

    def __init__(self, indices: Iterable[int]) -> None:
        self._index = array("i", sorted(indices))  # position -> step index
        self._positions = array("i", [-1]) * ((self._index[-1] + 1) if self._index else 0)
        for position, index in enumerate(self._index):
            self._positions[index] = position
        self._count = len(self._index)

    def position(self, index: Any) -> int:
        """The position of step `index`, -1 when it is not a table step."""
        if type(index) is not int:
            if not hasattr(index, "__index__") or isinstance(index, bool):
                return -1
            index = index.__index__()
        return self._positions[index] if 0 <= index < len(self._positions) else -1

    def index(self, position: int) -> int:
        return self._index[position]

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        return iter(self._index)


class StepMap(Mapping):
    """step index -> `get(position)` for the steps of `steps`."""

    __slots__ = ("_get", "_steps")

    def __init__(self, steps: StepIndex, get: Callable[[int], Any]) -> None:
        self._steps, self._get = steps, get

    def __getitem__(self, index: Any) -> Any:
        position = self._steps.position(index)
        if position < 0:
            raise KeyError(index)
        return self._get(position)

    def __contains__(self, index: object) -> bool:
        return self._steps.position(index) >= 0

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[int]:
        return iter(self._steps)
