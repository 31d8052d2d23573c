"""Sequences (Python lists of arrays) and optionals (value or None)."""

from __future__ import annotations

import numpy as np

from ort_graph import Graph

from ._registry import OpImpl, register
from ._util import ints, norm_axis


def _pos(p, n: int, insert: bool = False) -> int:
    if p is None:
        return n if insert else n - 1
    i = int(np.asarray(p).reshape(-1)[0])
    return i + n if i < 0 else i


@register("SequenceEmpty", since=11)
class SequenceEmpty(OpImpl):
    def compute(self, node, inputs):
        return [[]]


@register("SequenceConstruct", since=11)
class SequenceConstruct(OpImpl):
    def compute(self, node, inputs):
        return [list(inputs)]


@register("SequenceInsert", since=11)
class SequenceInsert(OpImpl):
    def compute(self, node, inputs):
        seq = list(inputs[0])
        p = inputs[2] if len(inputs) > 2 else None
        seq.insert(_pos(p, len(seq), insert=True), inputs[1])
        return [seq]


@register("SequenceAt", since=11)
class SequenceAt(OpImpl):
    def compute(self, node, inputs):
        return [inputs[0][_pos(inputs[1], len(inputs[0]))]]


@register("SequenceErase", since=11)
class SequenceErase(OpImpl):
    def compute(self, node, inputs):
        seq = list(inputs[0])
        del seq[_pos(inputs[1] if len(inputs) > 1 else None, len(seq))]
        return [seq]


@register("SequenceLength", since=11)
class SequenceLength(OpImpl):
    def compute(self, node, inputs):
        return [np.array(len(inputs[0]), dtype=np.int64)]


@register("SplitToSequence", since=11)
class SplitToSequence(OpImpl):
    def compute(self, node, inputs):
        x = inputs[0]
        axis = norm_axis(node.attr("axis", 0), x.ndim)
        split = inputs[1] if len(inputs) > 1 else None
        if split is None:
            parts = np.split(x, x.shape[axis], axis=axis)
            if not node.attr("keepdims", 1):
                parts = [np.squeeze(p, axis=axis) for p in parts]
            return [parts]
        if np.ndim(split) == 0:
            k = int(split)
            points = list(range(k, x.shape[axis], k))
        else:
            points = list(np.cumsum(ints(split))[:-1])
        return [list(np.split(x, points, axis=axis))]


@register("ConcatFromSequence", since=11)
class ConcatFromSequence(OpImpl):
    def compute(self, node, inputs):
        seq = inputs[0]
        axis = node.attr("axis")
        if node.attr("new_axis", 0):
            return [np.stack(seq, axis=norm_axis(axis, seq[0].ndim + 1))]
        return [np.concatenate(seq, axis=norm_axis(axis, seq[0].ndim))]


@register("SequenceMap", since=17)
class SequenceMap(OpImpl):
    implicit_inputs = True

    def compute(self, node, inputs):
        from ._interp import run_graph

        body: Graph = node.attr("body")
        ne = len(node.inputs)
        outer = dict(zip(node.implicit_inputs(), inputs[ne:]))
        explicit = inputs[:ne]
        n = len(explicit[0])
        outs: list[list] = [[] for _ in body.outputs]
        for i in range(n):
            feeds = {name: (v[i] if isinstance(v, list) else v) for name, v in zip(body.inputs, explicit)}
            res = run_graph(body, feeds, outer)
            for k, o in enumerate(body.outputs):
                outs[k].append(res[o])
        return outs


@register("Optional", since=15)
class Optional(OpImpl):
    def compute(self, node, inputs):
        return [inputs[0] if inputs else None]


@register("OptionalHasElement", since=15)
class OptionalHasElement(OpImpl):
    def compute(self, node, inputs):
        return [np.array(bool(inputs) and inputs[0] is not None)]


@register("OptionalGetElement", since=15)
class OptionalGetElement(OpImpl):
    def compute(self, node, inputs):
        if inputs[0] is None:
            raise ValueError(f"OptionalGetElement {node.name!r}: the optional is empty; guard it with "
                             "OptionalHasElement")
        return [inputs[0]]


