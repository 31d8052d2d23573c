"""The paged KV-cache pool: blocks of `block` positions shared by every sequence, allocated once, and the session's
plan for the step that reads them.

The pool lives in host memory: per `past_key_values.N.key/value` one array [kv_heads, blocks x block, head_dim]
(block b holds rows b*block .. (b+1)*block). A sequence (one of the `max_batch` slots a decode step batches) holds
a block table, the blocks of its positions in order, `ceil(len / block)` of them, and takes a free block when it
grows; released, its blocks go back to the free list. What a step feeds the model stays a contiguous past per
sequence ([n, kv_heads, L, head_dim], gathered from the blocks) and is a graph input the session plans by
`max_shapes` and pre-allocates at initialization: the device plan (weights + batched activations + the batched
past) is checked against the budget before the first request, so no step allocates beyond it. The new positions
a step makes are scattered back into the sequences' blocks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

import ort_graph
from ort_session._generate import generation_max_shapes

from ._serve_errors import ServeError

DEFAULT_BLOCK = 16  # positions per block (vLLM's default block size)


def blocks_for(positions: int, block: int) -> int:
    """Blocks that hold `positions` positions."""
    return -(-positions // block)


def plan_max_shapes(model: ort_graph.Model, max_batch: int, ctx: int, prefill_chunk: int,
                    dims: Mapping[str, int] | None = None) -> dict[str, list[int]]:
    """The largest inputs of any step: a prefill chunk of one sequence ([1, chunk] ids, past up to ctx - chunk) or
    a decode step of `max_batch` sequences ([max_batch, 1] ids, past up to ctx - 1): per axis the larger."""
    shapes = generation_max_shapes(model, min(prefill_chunk, ctx), ctx, dims)
    if shapes is None:
        raise ServeError("cannot tell every input dimension of the decode steps ahead (a symbolic head size or "
                         "batch-independent axis); pass --dim NAME=N for the model's symbolic dims")
    out = {}
    for name, shape in shapes.items():
        out[name] = [max_batch if axis == 0 else d for axis, d in enumerate(shape)]
        if name in ("input_ids", "position_ids"):
            out[name][1] = max(out[name][1], 1)
    return out


@attrs.define
class KVPool:
    """Host arrays for every past input in blocks; per slot (sequence) its block table and filled length."""

    names: list[str]  # past input names, in the session's order
    arrays: dict[str, np.ndarray]  # [kv_heads, blocks * block, head_dim]
    block: int
    ctx: int
    tables: list[list[int]]  # per slot: its blocks, in position order
    lengths: list[int]
    free: list[int]  # free slots
    free_blocks: list[int]

    @classmethod
    def allocate(cls, shapes: Mapping[str, tuple[int, int]], dtypes: Mapping[str, np.dtype], slots: int, ctx: int,
                 block: int = DEFAULT_BLOCK, blocks: int | None = None) -> KVPool:
        """`shapes[name]`: (kv_heads, head_dim) of each past input; `blocks` (default: enough for `slots`
        sequences of `ctx` positions) of `block` positions each."""
        if block < 1 or (blocks is not None and blocks < 1):
            raise ServeError(f"--kv-block {block} / --kv-blocks {blocks}: both must be at least 1, e.g. --kv-block 16")
        total = slots * blocks_for(ctx, block) if blocks is None else blocks
        arrays = {n: np.zeros((h, total * block, d), dtypes[n]) for n, (h, d) in shapes.items()}
        return cls(list(shapes), arrays, block, ctx, [[] for _ in range(slots)], [0] * slots,
                   list(range(slots - 1, -1, -1)), list(range(total - 1, -1, -1)))

    @property
    def slots(self) -> int:
        return len(self.lengths)

    @property
    def blocks(self) -> int:
        """The pool's blocks in all."""
        return next(iter(self.arrays.values())).shape[1] // self.block if self.arrays else 0

    @property
    def positions(self) -> int:
        """Positions the pool holds in all (its blocks x block)."""
        return self.blocks * self.block

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())

    def in_use(self) -> int:
        """Slots (sequences) holding a place in the pool."""
        return self.slots - len(self.free)

    def blocks_in_use(self) -> int:
        return self.blocks - len(self.free_blocks)

    def take(self) -> int:
        slot = self.free.pop()
        self.lengths[slot], self.tables[slot] = 0, []
        return slot

    def release(self, slot: int) -> None:
        """The slot and its blocks back to the free lists."""
        if slot not in self.free:
            self.free_blocks += reversed(self.tables[slot])
            self.lengths[slot], self.tables[slot] = 0, []
            self.free.append(slot)

    def missing(self, slot: int, positions: int) -> int:
        """Blocks `slot` lacks to hold `positions` positions."""
        return max(0, blocks_for(positions, self.block) - len(self.tables[slot]))

    def grow(self, slot: int, positions: int) -> bool:
        """Give `slot` the blocks it lacks for `positions` positions; False (nothing taken) when too few are free."""
        need = self.missing(slot, positions)
        if need > len(self.free_blocks):
            return False
        for _ in range(need):
            self.tables[slot].append(self.free_blocks.pop())
        return True

    def rows(self, slot: int, start: int, stop: int) -> np.ndarray:
        """Pool rows of `slot`'s positions start .. stop (its blocks must hold them)."""
        if blocks_for(stop, self.block) > len(self.tables[slot]):
            raise ServeError(f"slot {slot} holds {len(self.tables[slot])} blocks of {self.block} positions, not "
                             f"position {stop - 1}: the scheduler gives a sequence its blocks before it runs")
        p = np.arange(start, stop)
        return np.asarray(self.tables[slot], np.intp)[p // self.block] * self.block + p % self.block

    def past(self, slots: Sequence[int], length: int) -> dict[str, np.ndarray]:
        """The past inputs of `slots` (in that order), `length` positions each, gathered from their blocks into
        contiguous arrays; positions beyond a slot's filled length (a ragged batch: the mask hides them) repeat its
        first row."""
        if length == 0:
            return {n: np.zeros((len(slots), a.shape[0], 0, a.shape[2]), a.dtype) for n, a in self.arrays.items()}
        idx = np.zeros((len(slots), length), np.intp)
        for i, slot in enumerate(slots):
            n = min(self.lengths[slot], length)
            if n:
                idx[i, :n] = self.rows(slot, 0, n)
                idx[i, n:] = idx[i, 0]
        out = {}
        for name, a in self.arrays.items():
            dest = np.empty((len(slots), a.shape[0], length, a.shape[2]), a.dtype)
            for i in range(len(slots)):
                np.take(a, idx[i], axis=1, out=dest[i], mode="clip")
            out[name] = dest
        return out

    def write(self, name: str, slot: int, start: int, values: np.ndarray) -> None:
        """`values` [kv_heads, n, head_dim] into `slot`'s blocks at positions start .. start + n."""
        self.arrays[name][:, self.rows(slot, start, start + values.shape[1])] = values

    def write_rows(self, name: str, rows: np.ndarray, values: np.ndarray) -> None:
        """`values` [n, kv_heads, head_dim] at pool `rows` (one position of each of n sequences)."""
        self.arrays[name][:, rows] = values.swapaxes(0, 1)
