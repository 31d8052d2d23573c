"""The batched past kept on the device between decode steps (IOBinding-style; `ortrun serve --kv-on-device`).

While a decode step batches the same sequences, in the same order, as the one before, it feeds that step's
`present` outputs, left on the device (bound there, never copied to the host), as its past: no KV byte crosses
to the host, and the host pool is neither gathered nor scattered. Where a present holds a sequence's positions
is the probed layout's: `seqlens` writes position p at row p; `append` adds each step's new row at the end, so
from a sequence's first step on the device its positions sit at a constant offset (the batch's longest length
minus its own at that step) and the rows between stay masked. When the batch changes (a sequence joins,
leaves, is preempted), the positions made on the device since are copied once into the sequences' blocks, and
the next step gathers from the pool again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._kv_pool import KVPool


class ResidentPast:
    """The last decode step's presents on `device` and where each sequence's positions lie in them."""

    def __init__(self, pool: KVPool, device: str) -> None:
        self.pool, self.device = pool, device
        self.slots: tuple[int, ...] = ()
        self.values: dict[str, Any] = {}  # past name -> the device OrtValue [n, kv_heads, width, head_dim]
        self.valid = np.zeros((0, 0), bool)  # [n, width]: the rows that hold a position
        self.offset: list[int] = []  # a position's row: position + offset
        self.synced: list[int] = []  # positions [0, synced) are in the host pool
        self.steps = self.syncs = 0  # decode steps fed from the device; copies back to the pool

    def matches(self, slots: Sequence[int]) -> bool:
        return bool(self.values) and tuple(slots) == self.slots

    @property
    def width(self) -> int:
        return self.valid.shape[1]

    def start(self, slots: Sequence[int], lens: Sequence[int], longest: int, layout: str) -> None:
        """A step gathered from the pool (each slot's `lens` positions, padded to `longest`) is to be kept."""
        self.slots = tuple(slots)
        self.offset = [longest - n if layout == "append" else 0 for n in lens]
        self.synced = list(lens)
        self.valid = np.arange(longest)[None, :] < np.asarray(lens)[:, None]

    def mask(self) -> np.ndarray:
        """The attention mask of the next step fed from the device: the rows holding a position, and the new one."""
        return np.concatenate([self.valid, np.ones((len(self.slots), 1), bool)], axis=1).astype(np.int64)

    def keep(self, presents: dict[str, Any], layout: str, lens: Sequence[int]) -> None:
        """The step's presents (device values) become the next step's past; its new rows are valid."""
        self.values = presents
        width = next(iter(presents.values())).shape()[2]
        valid = np.zeros((len(self.slots), width), bool)
        if layout == "append":
            valid[:, :self.width] = self.valid
            valid[:, self.width:] = True
        else:
            valid[:] = np.arange(width)[None, :] < np.asarray(lens)[:, None] + 1
        self.valid = valid

    def sync(self, skip: int | None = None) -> None:
        """Copy the positions made on the device since the last gather into the host pool (but `skip`'s, a slot
        being released), then forget the device values."""
        if self.values:
            hosts = {name: value.numpy() for name, value in self.values.items()}
            for i, slot in enumerate(self.slots):
                start, stop = self.synced[i], self.pool.lengths[slot]
                if slot == skip or stop <= start:
                    continue
                rows = np.arange(start, stop) + self.offset[i]
                for name, host in hosts.items():
                    self.pool.write(name, slot, start, host[i][:, rows])
            self.syncs += 1
        self.slots, self.values, self.valid, self.offset, self.synced = (), {}, np.zeros((0, 0), bool), [], []

    def drop(self, slot: int) -> None:
        """`slot` is released: the others' device positions go back to the pool first."""
        if slot in self.slots:
            self.sync(skip=slot)
