"""Values of small integer tensors computed from shapes (Shape -> Gather -> Concat -> Reshape...).

Only what shape resolution needs: cheap ops on small tensors, evaluated with numpy. A node whose
inputs are not all known, or whose result would be large, yields nothing: the value stays a node, computed
at run time and planned like any other. The size of a result is known before it is made (`_out_elements`),
so a folded `ConstantOfShape([2**20, 2**20])`, `Range(0, 2**40, 1)` or a broadcast of three large inputs is
never materialised: folding never holds more than MAX_ELEMENTS elements (32 KiB of int64) per value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ._dtypes import to_numpy_dtype
from ._ir import Graph, Node, Shape, is_static
from ._overridable import constant_initializer

MAX_ELEMENTS = 4096
Fn = Callable[[Node, list[np.ndarray]], np.ndarray]


def _axes(node: Node, xs: list[np.ndarray], idx: int = 1) -> list[int] | None:
    if len(xs) > idx and xs[idx] is not None:
        return [int(a) for a in np.asarray(xs[idx]).reshape(-1)]
    a = node.attr("axes")
    return None if a is None else list(a)


def _slice(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    if len(xs) > 1:
        starts, ends = xs[1].reshape(-1), xs[2].reshape(-1)
        axes = xs[3].reshape(-1) if len(xs) > 3 and xs[3] is not None else range(len(starts))
        steps = xs[4].reshape(-1) if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
    else:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes") or range(len(starts)), [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[int(a)] = slice(int(s), int(e), int(st))
    return x[tuple(index)]


def _unsqueeze(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    out = xs[0]
    axes = _axes(node, xs) or []
    rank = out.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return out


def _squeeze(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    axes = _axes(node, xs)
    return np.squeeze(xs[0]) if axes is None else np.squeeze(xs[0], axis=tuple(axes))


def _reshape(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    shape = [int(s) for s in xs[1].reshape(-1)]
    shape = [xs[0].shape[i] if s == 0 and not node.attr("allowzero", 0) else s for i, s in enumerate(shape)]
    return xs[0].reshape(shape)


def _cast(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    return xs[0].astype(to_numpy_dtype(int(node.attr("to"))))


def _div(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    a, b = xs
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)
    return a / b


_OPS: dict[str, Fn] = {
    "Identity": lambda n, xs: xs[0],
    "Gather": lambda n, xs: np.take(xs[0], xs[1], axis=int(n.attr("axis", 0))),
    "Concat": lambda n, xs: np.concatenate(xs, axis=int(n.attr("axis"))),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Slice": _slice,
    "Cast": _cast,
    "Reshape": _reshape,
    "Add": lambda n, xs: xs[0] + xs[1],
    "Sub": lambda n, xs: xs[0] - xs[1],
    "Mul": lambda n, xs: xs[0] * xs[1],
    "Div": _div,
    "Neg": lambda n, xs: -xs[0],
    "Max": lambda n, xs: np.maximum.reduce(xs),
    "Min": lambda n, xs: np.minimum.reduce(xs),
    "Equal": lambda n, xs: np.equal(xs[0], xs[1]),
    "Less": lambda n, xs: np.less(xs[0], xs[1]),
    "Greater": lambda n, xs: np.greater(xs[0], xs[1]),
    "Not": lambda n, xs: np.logical_not(xs[0]),
    "Where": lambda n, xs: np.where(xs[0], xs[1], xs[2]),
    "Range": lambda n, xs: np.arange(xs[0].item(), xs[1].item(), xs[2].item()).astype(xs[0].dtype),
    "ReduceProd": lambda n, xs: np.prod(xs[0], keepdims=bool(n.attr("keepdims", 1))),
    "Expand": lambda n, xs: xs[0] * np.ones([int(s) for s in xs[1].reshape(-1)], dtype=xs[0].dtype),
    "ConstantOfShape": lambda n, xs: np.full([int(s) for s in xs[0].reshape(-1)], _fill_value(n)),
}


def _elements(shape: Any) -> int | None:
    dims = [int(d) for d in shape]
    return None if any(d < 0 for d in dims) else math.prod(dims)


def _range_elements(xs: list[np.ndarray]) -> int | None:
    start, limit, delta = (x.reshape(-1)[0].item() if x.size else 0 for x in xs[:3])
    if delta == 0 or not all(math.isfinite(float(v)) for v in (start, limit, delta)):
        return None
    return max(math.ceil((limit - start) / delta), 0)


def _broadcast_elements(*shapes: Any) -> int | None:
    try:
        return _elements(np.broadcast_shapes(*(tuple(int(d) for d in s) for s in shapes)))
    except ValueError:
        return None


def _out_elements(node: Node, xs: list[np.ndarray]) -> int | None:
    """How many elements the node's result has, computed from its inputs' shapes and values without making
    it (Python ints: no overflow); None when that is not computable (the node is then not folded)."""
    op, present = node.op_type, [x for x in xs if x is not None]
    if op == "ConstantOfShape":
        return _elements(present[0].reshape(-1))
    if op == "Range":
        return _range_elements(present) if len(present) == 3 else None
    if op == "Expand":
        return _broadcast_elements(present[0].shape, present[1].reshape(-1)) if len(present) == 2 else None
    if op in _BROADCAST:
        return _broadcast_elements(*(x.shape for x in present))
    if op == "Gather" and len(present) == 2 and present[0].ndim:
        axis = int(node.attr("axis", 0)) % present[0].ndim
        return present[0].size // max(present[0].shape[axis], 1) * present[1].size
    return sum(x.size for x in present)  # the rest make no more elements than they read


_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater", "Where"})


def _fill_value(node: Node) -> np.ndarray:
    from onnx import numpy_helper

    v = node.attr("value")
    return np.float32(0.0) if v is None else numpy_helper.to_array(v).reshape(-1)[0]


def shape_value(node: Node, shape: Shape | None) -> np.ndarray | None:
    """Value of a Shape node's output when its input's shape is static."""
    if not is_static(shape):
        return None
    start, end = node.attr("start", 0), node.attr("end")
    return np.array(shape[start:end], dtype=np.int64)


def evaluate(node: Node, inputs: list[np.ndarray | None]) -> np.ndarray | None:
    """The node's first output value, or None when unknown, unsupported or too large."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Constant":
        from onnx import numpy_helper

        v = node.attr("value")
        if v is not None:
            return numpy_helper.to_array(v)
        for key in ("value_int", "value_ints", "value_float", "value_floats"):
            if node.attr(key) is not None:
                return np.array(node.attr(key), dtype=np.int64 if "int" in key else np.float32)
        return None
    fn = _OPS.get(node.op_type)
    present = [x for x, name in zip(inputs, node.inputs) if name]
    if fn is None or any(x is None for x in present) or any(x.size > MAX_ELEMENTS for x in present):
        return None
    try:
        size = _out_elements(node, present)
        if size is None or size > MAX_ELEMENTS:
            return None  # too large to fold (or not sized): computed at run time, planned like any value
        with np.errstate(all="ignore"):
            out = np.asarray(fn(node, [x if name else None for x, name in zip(inputs, node.inputs)]))
    except (ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError, AttributeError, MemoryError):
        return None
    return out if out.size <= MAX_ELEMENTS else None


_CONSTANT_ATTRS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}


def constants_to_initializers(graph: Graph) -> list[str]:
    """Turn the main graph's Constant nodes into initializers, as ONNX Runtime does when it loads a model:
    a constant is then a weight placed with the nodes that read it (uploaded once to a device) instead of
    a node whose output is copied to every device that reads it, run after run. Constants that are graph
    outputs or string-valued stay nodes; a sparse one becomes a dense initializer, as a sparse initializer does.
    Returns the names of the new initializers."""
    from onnx import SparseTensorProto, TensorProto

    from ._tensor import Tensor

    made: list[str] = []
    for node in list(graph.nodes):
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        if not out or out in graph.outputs or out in graph.initializers:
            continue
        value = node.attr("value")
        if isinstance(value, TensorProto):
            if value.data_location == TensorProto.EXTERNAL or value.data_type == TensorProto.STRING:
                continue
            proto = TensorProto()  # the attribute's copy, renamed: a message of its own, not copied again
            proto.CopyFrom(value)
            proto.name = out
            tensor = Tensor.from_proto(proto, None, owned=True)
        elif isinstance(sparse := node.attr("sparse_value"), SparseTensorProto) and not any(
                part.data_location == TensorProto.EXTERNAL for part in (sparse.values, sparse.indices)):
            tensor = Tensor.from_sparse(sparse, None, f"the sparse_value of Constant node {node.name!r}")
            tensor.name = out
        else:
            key = next((k for k in _CONSTANT_ATTRS if node.attr(k) is not None), None)
            if key is None:
                continue
            tensor = Tensor.from_numpy(out, np.array(node.attr(key), dtype=_CONSTANT_ATTRS[key]))
        _node_to_initializer(graph, node, tensor, made)
    return _relinked(graph, made)


def _node_to_initializer(graph: Graph, node: Node, tensor: Any, made: list[str]) -> None:
    graph.detach_node(node)  # dropped in one pass by `_relinked` (remove_node scans the list each time)
    graph.initializers[tensor.name] = tensor
    v = graph.value(tensor.name)
    v.dtype, v.shape = tensor.dtype, tuple(tensor.dims)
    made.append(tensor.name)


def _relinked(graph: Graph, made: list[str]) -> list[str]:
    if made:
        graph.compact()
        graph.relink()
    return made


FOLD_FILL_MAX_BYTES = 1 << 30  # a larger ConstantOfShape stays a node: its size is then the plan's to judge


def fold_constant_of_shape(graph: Graph, max_bytes: int = FOLD_FILL_MAX_BYTES) -> list[str]:
    """Turn the main graph's ConstantOfShape nodes whose shape is a constant initializer (not overridable) into initializers (ONNX Runtime's
    constant folding does so at initialization). Exporters that ship weights as fills (the onnx package's `light`
    CNNs, shape-only test models) otherwise make every run write them again, and the Conv / BatchNormalization
    folds, which need initializers, never apply. One over `max_bytes`, a graph output, or a shape that is not a
    valid 1-D int64 stays a node. Returns the names of the new initializers."""
    from onnx import TensorProto, numpy_helper

    from ._tensor import Tensor

    made: list[str] = []
    for node in list(graph.nodes):
        if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        shape_t = constant_initializer(graph, node.inputs[0]) if node.inputs else None  # an overridable shape is never folded
        if not out or out in graph.outputs or out in graph.initializers or shape_t is None:
            continue
        if shape_t.dtype != TensorProto.INT64 or len(shape_t.dims) != 1 or shape_t.dims[0] > 64:
            continue
        dims = [int(d) for d in shape_t.numpy().reshape(-1)]
        value = node.attr("value")
        fill = numpy_helper.to_array(value).reshape(-1) if isinstance(value, TensorProto) else np.zeros(1, np.float32)
        if any(d < 0 for d in dims) or fill.size != 1 or fill.dtype == object:
            continue  # invalid: left to the node's kernel, which names it
        if math.prod(dims) * fill.dtype.itemsize > max_bytes:
            continue
        array = np.full(dims, fill[0], fill.dtype)  # touched: resident, as the plan counts it
        dtype = value.data_type if isinstance(value, TensorProto) else TensorProto.FLOAT
        _node_to_initializer(graph, node, Tensor(name=out, dtype=dtype, dims=tuple(dims), array=array), made)
    return _relinked(graph, made)


def _flatten(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    axis = int(node.attr("axis", 1))
    if not -x.ndim <= axis <= x.ndim:
        raise ValueError(f"Flatten axis {axis} outside [-{x.ndim}, {x.ndim}]")
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _checked_unsqueeze(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    axes = _axes(node, xs) or []
    rank = xs[0].ndim + len(axes)
    if not axes or any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise ValueError(f"Unsqueeze axes {axes} invalid for an output of rank {rank}")
    return _unsqueeze(node, xs)


def _checked_reshape(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    shape = [int(s) for s in xs[1].reshape(-1)]
    if shape.count(-1) > 1 or any(s < -1 for s in shape) or (node.attr("allowzero", 0) and 0 in shape and -1 in shape):
        raise ValueError(f"Reshape shape {shape} invalid")
    if not node.attr("allowzero", 0) and any(s == 0 and i >= xs[0].ndim for i, s in enumerate(shape)):
        raise ValueError(f"Reshape shape {shape} copies a dimension the input of rank {xs[0].ndim} lacks")
    return _reshape(node, xs)


# ops that only relabel their data input's elements: folded into a view of the initializer they read
_LAYOUT_FOLDS: dict[str, Fn] = {"Unsqueeze": _checked_unsqueeze, "Squeeze": _squeeze, "Reshape": _checked_reshape,
                                "Flatten": _flatten, "Identity": lambda n, xs: xs[0]}


def fold_constant_layouts(graph: Graph, max_bytes: int = FOLD_FILL_MAX_BYTES) -> list[str]:
    """Turn the main graph's Unsqueeze / Squeeze / Reshape / Flatten / Identity nodes whose inputs are all
    constant initializers (none overridable: `_overridable.constant_initializer`), into initializers, as ONNX Runtime's
    constant folding does at initialization. Caffe-style exports scale each Conv output by `Unsqueeze(scale)`: folded, the Mul / Add after
    the Conv become constant per-channel ops its fusions fold into the weights, and the Unsqueezes stop running.
    The new initializer is a view of the data read (no copy). One that is invalid for its op (bad axes, a shape
    that does not fit the data), a string tensor, a graph output or one over `max_bytes` stays a node: its kernel
    names the problem. Returns the names of the new initializers."""
    from ._tensor import Tensor

    made: list[str] = []
    for node in list(graph.nodes):
        fn = _LAYOUT_FOLDS.get(node.op_type)
        if fn is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1 or not node.inputs:
            continue
        out = node.outputs[0]
        names = [i for i in node.inputs if i]
        source = constant_initializer(graph, node.inputs[0])
        if (not out or out in graph.outputs or out in graph.initializers or source is None or source.dtype == 8
                or any(constant_initializer(graph, i) is None for i in names) or source.nbytes > max_bytes):
            continue
        try:
            xs = [graph.initializers[i].numpy() if i else None for i in node.inputs]
            array = np.asarray(fn(node, xs))
        except (ValueError, IndexError, TypeError, AttributeError):
            continue  # left to the node's kernel, which names it
        if array.size != xs[0].size:
            continue
        _node_to_initializer(graph, node, Tensor(name=out, dtype=source.dtype, dims=tuple(array.shape), array=array),
                             made)
    return _relinked(graph, made)
