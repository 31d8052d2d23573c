"""Shape vectors with symbolic elements, for the shape inputs ONNX inference leaves without a value.

Exporters compute a Reshape's target from the input's own shape: paddle2onnx writes Shape -> Cast(int32) -> Slice
-> Cast(int64) -> Concat -> Reshape, and the batch dimension makes the Shape's value symbolic. ONNX's data
propagation stops there and gives the Reshape no rank, and every node after it (an OCR model's classifier head, a
recognizer's whole transformer) then has no known rank either, which the C kernels' rules need. This pass follows
such vectors element by element: a `Vector` is a 0-D or 1-D integer value whose elements are ints, symbolic dims
(the names shape resolution gave) or None (unknown).

- Sources: a Shape node (its input's dims, any of them symbolic) and small integer constants.
- Movement (Identity, Cast to an integer type, Slice, Gather, Squeeze, Unsqueeze, Concat, Reshape): the op is
  evaluated (`_constprop.evaluate`) on arrays of element indices standing for the symbolic inputs, so each output
  element is the input element the op moved there, with the op's own semantics (negative indices, clamping).
- Arithmetic (Add, Sub, Mul, Div, with broadcasting of a scalar): int op int is computed as the constant
  folding does; anything symbolic gives None (the length stays known).
- Consumers (`shape_from_vector`): Reshape (0 copies the input's dim unless allowzero; one -1 is inferred where
  the input's dims cancel against the known ones), Expand (broadcast) and ConstantOfShape.

Nothing here guesses: an element is an int or a symbol only when it is that value on every run, else None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ._constprop import evaluate
from ._ir import Dim, Graph, Node, Shape

MAX_LENGTH = 64  # elements: a longer integer vector is data, not a shape
_INT_TYPES = (6, 7)  # int32, int64
_MOVES = {"Identity", "Cast", "Slice", "Gather", "Squeeze", "Unsqueeze", "Concat", "Reshape"}
_ARITH = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b}

Vector = tuple[tuple[Dim, ...], int]  # (elements, ndim 0 or 1)


def vector_of(node: Node, graph: Graph, consts: Mapping[str, np.ndarray],
              vectors: Mapping[str, Vector]) -> Vector | None:
    """The node's first output as a Vector, or None when it is not a small integer vector this pass follows."""
    if node.domain not in ("", "ai.onnx") or not node.outputs or not node.outputs[0]:
        return None
    op = node.op_type
    if op == "Shape":
        shape = graph.values[node.inputs[0]].shape if node.inputs and node.inputs[0] in graph.values else None
        if shape is None:
            return None
        start, end = node.attr("start", 0), node.attr("end")
        return tuple(shape[start:end]), 1
    if op in _MOVES:
        return _moved(node, consts, vectors)
    if op in _ARITH or op == "Div":
        return _arithmetic(node, consts, vectors)
    return None


def _input(name: str, consts: Mapping[str, np.ndarray], vectors: Mapping[str, Vector]) -> Vector | None:
    if name in vectors:
        return vectors[name]
    value = consts.get(name)
    if value is None or value.ndim > 1 or value.size > MAX_LENGTH or not np.issubdtype(value.dtype, np.integer):
        return None
    return tuple(int(v) for v in value.reshape(-1)), value.ndim


def _moved(node: Node, consts: Mapping[str, np.ndarray], vectors: Mapping[str, Vector]) -> Vector | None:
    if node.op_type == "Cast" and node.attr("to") not in _INT_TYPES:
        return None
    data = range(len(node.inputs)) if node.op_type == "Concat" else (0,)
    pool: list[Dim] = []
    args: list[np.ndarray | None] = []
    symbolic = False
    for i, name in enumerate(node.inputs):
        if not name:
            args.append(None)
        elif i in data:
            vec = _input(name, consts, vectors)
            if vec is None:
                return None
            elements, ndim = vec
            symbolic |= name in vectors
            index = np.arange(len(pool), len(pool) + len(elements), dtype=np.int64)
            args.append(index.reshape(()) if ndim == 0 else index)
            pool.extend(elements)
        elif name in consts:
            args.append(consts[name])
        else:
            return None
    if not symbolic:
        return None  # all constant: the constant folding has the value
    moved = evaluate(node, args)
    if moved is None or moved.ndim > 1 or moved.size > MAX_LENGTH:
        return None
    return tuple(pool[int(i)] for i in moved.reshape(-1)), moved.ndim


def _arithmetic(node: Node, consts: Mapping[str, np.ndarray], vectors: Mapping[str, Vector]) -> Vector | None:
    if len(node.inputs) != 2 or not any(n in vectors for n in node.inputs):
        return None
    a, b = (_input(n, consts, vectors) for n in node.inputs)
    if a is None or b is None:
        return None
    (ea, na), (eb, nb) = a, b
    if len(ea) != len(eb) and 1 not in (len(ea), len(eb)):
        return None
    n = max(len(ea), len(eb))
    ea, eb = (e * n if len(e) == 1 else e for e in (ea, eb))
    out: list[Dim] = []
    for x, y in zip(ea, eb):
        if not (isinstance(x, int) and isinstance(y, int)):
            out.append(None)
        elif node.op_type == "Div":  # truncated, as the constant folding divides integers
            out.append(None if y == 0 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1))
        else:
            out.append(_ARITH[node.op_type](x, y))
    return tuple(out), max(na, nb)


def shape_from_vector(node: Node, graph: Graph, vectors: Mapping[str, Vector]) -> Shape | None:
    """The first output's shape of a Reshape, Expand or ConstantOfShape whose shape input is a followed Vector."""
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    position = 0 if op == "ConstantOfShape" else 1
    if op not in ("Reshape", "Expand", "ConstantOfShape") or len(node.inputs) <= position:
        return None
    vec = vectors.get(node.inputs[position])
    if vec is None or vec[1] != 1:
        return None
    target = vec[0]
    if op == "ConstantOfShape":
        return None if any(isinstance(d, int) and d < 0 for d in target) else target
    x = graph.values[node.inputs[0]].shape if node.inputs[0] in graph.values else None
    if op == "Expand":
        return None if x is None else _broadcast(x, target)
    return _reshaped(x, target, bool(node.attr("allowzero", 0)))


def _broadcast(x: Shape, target: tuple[Dim, ...]) -> Shape:
    """numpy's broadcast of the two shapes, right-aligned. A dim other than 1 against an unknown or symbolic one is
    what any run that does not fail gives; two different symbols, or 1 against an unknown, stay unknown."""
    n = max(len(x), len(target))
    out: list[Dim] = []
    for a, b in zip((1,) * (n - len(x)) + tuple(x), (1,) * (n - len(target)) + tuple(target)):
        if a == 1:
            out.append(b)
        elif b == 1 or a == b or isinstance(a, int):
            out.append(a)
        elif isinstance(b, int):
            out.append(b)
        else:
            out.append(None)
    return tuple(out)


def _reshaped(x: Shape | None, target: tuple[Dim, ...], allowzero: bool) -> Shape | None:
    out: list[Dim] = []
    infer = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            out.append(x[i] if x is not None and i < len(x) else None)
        elif d == -1:
            infer.append(i)
            out.append(None)
        elif isinstance(d, int) and d < 0:
            return None  # invalid: the kernel reports it at run time
        else:
            out.append(d)
    if len(infer) > 1:
        return None
    if infer and x is not None:
        out[infer[0]] = _quotient(list(x), [d for i, d in enumerate(out) if i != infer[0]])
    return tuple(out)


def _quotient(dims: list[Dim], known: list[Dim]) -> Dim:
    """The -1 of a Reshape: the input's elements over the other target dims, where that is certain (the input's
    dims cancel the target's, symbols by name); else None."""
    rest = list(dims)
    divisor = 1
    for d in known:
        if isinstance(d, str) and d in rest:
            rest.remove(d)
        elif isinstance(d, int):
            divisor *= d
        else:
            return None
    if any(d is None for d in rest):
        return None
    symbols = [d for d in rest if isinstance(d, str)]
    numeric = math.prod(d for d in rest if isinstance(d, int))
    if divisor == 0 or numeric % divisor:
        return None
    if not symbols:
        return numeric // divisor
    if len(symbols) == 1 and numeric == divisor:
        return symbols[0]
    return None
