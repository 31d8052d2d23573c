"""The KV-cache pool: `max_batch` slots of `ctx` positions per layer, allocated once, and the session's plan for it.

The pool itself lives in host memory (one array per `past_key_values.N.key/value`, shape [slots, kv_heads, ctx,
head_dim]); what a step feeds the model (the active slots' past, [n, kv_heads, L, head_dim]) is a graph input that
the session plans by `max_shapes` and pre-allocates at initialization: the device plan (weights + batched
activations + the batched past) is checked against the budget before the first request, so no step allocates
beyond it. A slot holds one sequence; `lengths[slot]` positions of it are filled."""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

import ort_graph
from ort_session._generate import generation_max_shapes

from ._serve_errors import ServeError


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
    """Host arrays for every past input, `slots` x `ctx` positions; free slots and filled lengths."""

    names: list[str]  # past input names, in the session's order
    arrays: dict[str, np.ndarray]
    ctx: int
    lengths: list[int]
    free: list[int]

    @classmethod
    def allocate(cls, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, np.dtype], slots: int,
                 ctx: int) -> KVPool:
        """`shapes[name]`: (kv_heads, head_dim) of each past input."""
        arrays = {n: np.zeros((slots, h, ctx, d), dtypes[n]) for n, (h, d) in shapes.items()}
        return cls(list(shapes), arrays, ctx, [0] * slots, list(range(slots - 1, -1, -1)))

    @property
    def slots(self) -> int:
        return len(self.lengths)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())

    def in_use(self) -> int:
        return self.slots - len(self.free)

    def take(self) -> int:
        slot = self.free.pop()
        self.lengths[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        if slot not in self.free:
            self.lengths[slot] = 0
            self.free.append(slot)

    def past(self, slots: list[int], length: int) -> dict[str, np.ndarray]:
        """The past inputs of `slots` (in that order), `length` positions each (contiguous copies)."""
        if len(slots) == 1:
            return {n: np.ascontiguousarray(a[slots[0]:slots[0] + 1, :, :length]) for n, a in self.arrays.items()}
        idx = np.asarray(slots)
        return {n: np.ascontiguousarray(a[idx, :, :length]) for n, a in self.arrays.items()}

    def write(self, name: str, slot: int, start: int, values: np.ndarray) -> None:
        """`values` [kv_heads, n, head_dim] into `slot` at positions start .. start + n."""
        self.arrays[name][slot, :, start:start + values.shape[1]] = values
