"""Helpers shared by the op modules: dtype sets, claim checks, attribute access."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np
from onnx import TensorProto as T
from onnx import numpy_helper

from ort_graph import Node, dtype_name, to_numpy_dtype

from ._registry import Decline, InputInfo, OpImpl

F32, F64, F16, BF16 = T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16
SINT = frozenset({T.INT8, T.INT16, T.INT32, T.INT64})
UINT = frozenset({T.UINT8, T.UINT16, T.UINT32, T.UINT64})
INTS = SINT | UINT
FLOATS = frozenset({F32, F64, F16})
FLOATS_BF = FLOATS | {BF16}
NUMERIC = FLOATS | INTS
NUMERIC_BF = NUMERIC | {BF16}
ALL_PLAIN = NUMERIC_BF | {T.BOOL}
ANY = ALL_PLAIN | {T.STRING, T.COMPLEX64, T.COMPLEX128} | frozenset(
    getattr(T, n) for n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
                            "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2") if hasattr(T, n))
SEQ = -1  # marker: a sequence-typed value (dtype 0 with no shape in the IR)


@functools.cache
def first_version(op_type: str, domain: str = "") -> int:
    """The opset that introduced `op_type` (1 when onnx does not know it): the latest schema, then each older
    one until none is older (a few lookups; listing every schema's history costs ~15 ms at import)."""
    import onnx.defs

    try:
        schema = onnx.defs.get_schema(op_type, domain=domain)
    except onnx.defs.SchemaError:
        return 1
    while schema.since_version > 1:
        try:
            schema = onnx.defs.get_schema(op_type, schema.since_version - 1, domain)
        except onnx.defs.SchemaError:
            break
    return schema.since_version


def names(types: Iterable[int]) -> str:
    return ", ".join(sorted(dtype_name(t) for t in types))


def check_dtype(inputs: Sequence[InputInfo], index: int, allowed: Iterable[int]) -> Decline | None:
    """Decline when input `index` is present with a known dtype outside `allowed`."""
    allowed = frozenset(allowed)
    if index < len(inputs) and inputs[index].present and inputs[index].dtype and inputs[index].dtype not in allowed:
        return Decline(rejected=f"input {index} dtype {dtype_name(inputs[index].dtype)}", accepts=names(allowed))
    return None


def check_all(inputs: Sequence[InputInfo], allowed: Iterable[int], indices: Iterable[int] | None = None) -> Decline | None:
    allowed = frozenset(allowed)
    for i in (range(len(inputs)) if indices is None else indices):
        d = check_dtype(inputs, i, allowed)
        if d:
            return d
    return None


def rank(inputs: Sequence[InputInfo], index: int) -> int | None:
    if index < len(inputs) and inputs[index].shape is not None:
        return len(inputs[index].shape)
    return None


def decline_attr(name: str, value: object, accepts: str, remedy: str = "run this node on another execution provider") -> Decline:
    return Decline(rejected=f"attribute {name}={value!r}", accepts=accepts, remedy=remedy)


def out_dtype(node: Node) -> int:
    """The dtype the graph declares for output 0 (0 when unknown)."""
    g = node.graph
    if g is not None and node.outputs and node.outputs[0] in g.values:
        return g.values[node.outputs[0]].dtype
    return 0


def tensor_attr(node: Node, name: str) -> np.ndarray | None:
    v = node.attr(name)
    if v is None:
        return None
    return numpy_helper.to_array(v) if isinstance(v, T) else np.asarray(v)


def np_dtype(elem_type: int) -> np.dtype:
    return to_numpy_dtype(elem_type)


def ints(x: np.ndarray | Sequence[int] | None) -> list[int] | None:
    if x is None:
        return None
    flat = np.asarray(x).reshape(-1)
    return flat.tolist() if flat.dtype.kind in "iu" else [int(i) for i in flat]  # tolist: Python ints, one C call


def norm_axis(axis: int, r: int) -> int:
    return axis + r if axis < 0 else axis


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy's broadcast of `shapes` (np.broadcast_shapes allocates arrays to find it); ValueError when
    they do not broadcast. Two tuples of ints (`ndarray.shape`) where one is the result (equal, or the other
    of lower or equal rank and all ones: a scalar operand) are answered without the loop (asked per node)."""
    if len(shapes) == 2:
        a, b = shapes
        if type(a) is tuple and type(b) is tuple:
            if a == b or (len(b) <= len(a) and b.count(1) == len(b)):
                return a
            if len(a) <= len(b) and a.count(1) == len(a):
                return b
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, rank - len(s)):
            if d != out[i]:
                if out[i] != 1 and d != 1:
                    raise ValueError(f"shapes {[tuple(x) for x in shapes]!r} do not broadcast: {out[i]} vs {d} on axis {i}")
                out[i] = d if out[i] == 1 else out[i]
    return tuple(int(d) for d in out)


def write_output(impl: OpImpl, view: np.ndarray, index: int = 0) -> np.ndarray:
    """`view` (any layout: a transpose, a slice, a broadcast) written once into the block of output
    `index` (`OpImpl.output`), the only copy; strings and other objects come back as a fresh array."""
    view = np.asarray(view)
    if view.dtype.kind == "O":
        return np.array(view)
    out = impl.output(index, view.shape, view.dtype)
    if view.size and view.flags.c_contiguous and same_start(out, view):
        return out  # the plan wrote the output over its input (a reshape done in place): nothing to move
    if view.ndim >= 2 and view.size >= _BLOCKED_MIN and view.strides[-1] > view.itemsize:
        copy_blocked(out, view)
    else:
        np.copyto(out, view)
    return out


def same_start(a: np.ndarray, b: np.ndarray) -> bool:
    """True when `a` and `b` (each with at least one element) start at the same address. Asked per node:
    the bounds check (`np.may_share_memory`, one C call) answers the usual case, disjoint arrays, before the
    addresses are read (`__array_interface__` builds a dict: about 1 us an array)."""
    return bool(np.may_share_memory(a, b)) and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


_BLOCKED_MIN = 1 << 15  # elements: below it one copyto is as fast
_BLOCK = 128  # columns per block: the rows of input a block reads stay in cache while it is written


def copy_blocked(out: np.ndarray, view: np.ndarray) -> None:
    """`np.copyto(out, view)` for a `view` whose last axis strides through memory (a transpose that moves
    the last axis): numpy walks the output row by row and touches a new input cache line per element;
    copying `_BLOCK` columns at a time reads each input line once per block (about twice as fast for a
    [.., 513, 64] -> [.., 64, 513] attention key transpose)."""
    n = view.shape[-1]
    for start in range(0, n, _BLOCK):
        np.copyto(out[..., start:start + _BLOCK], view[..., start:start + _BLOCK])


def is_lowp(a: np.ndarray) -> bool:
    """float16 / bfloat16 / float8 arrays: compute in float32 and cast back."""
    dt = a.dtype
    found = _LOWP.get(dt)
    if found is None:
        found = _LOWP[dt] = dt.kind == "f" and dt.itemsize < 4 or dt.kind == "V" or dt.name.startswith(("bfloat", "float8"))
    return found


_LOWP: dict[np.dtype, bool] = {}  # dtype -> is_lowp (dtype.name is slow to build, and asked per node)


def upcast(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if is_lowp(a) else a


INDEX = frozenset({T.INT32, T.INT64})
I64 = frozenset({T.INT64})


class IndexTyped(OpImpl):
    """Declines index / shape / axes inputs whose dtype the ONNX schema does not allow."""

    index_dtypes: ClassVar[dict[int, frozenset[int]]] = {}

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        for i, allowed in self.index_dtypes.items():
            d = check_dtype(inputs, i, allowed)
            if d:
                return d
        return super().supports(node, inputs, opset)
