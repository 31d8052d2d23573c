"""Host-side launch code of the data-movement ops: output shapes from the host inputs (ONNX semantics,
computed here once), then strided copies, gathers or casts on the device.

Every op but Gather and Cast becomes ``strided_copy``: dims, source and destination element strides,
and pointers already offset. Reshape-like ops copy flat and skip the copy when the memory plan put the
output in place of the input (same pointer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from onnx import helper

from ._errors import KernelLaunchError
from ._ops import MAX_RANK
from ._ops_movement import CAST_TYPES
from ._runtime import CudaRuntime, DeviceArray, i64, ptr

__all__ = ["MOVEMENT_OPS", "broadcast_strides", "compute_movement", "contiguous_strides", "strided_copy"]

MOVEMENT_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Slice", "Expand", "Concat",
                          "Gather", "Cast", "Shape"})
Sink = Callable[[int, tuple[int, ...], np.dtype], Any]


def _grid(n: int) -> int:
    return max(1, min(math.ceil(n / 256), 1 << 20))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= int(d)
    return tuple(reversed(out))


def broadcast_strides(shape: Sequence[int], dims: Sequence[int]) -> list[int]:
    """Element strides of a C-contiguous `shape` read with numpy broadcasting as `dims` (len(dims) >= rank):
    0 on a broadcast dim, leading dims padded with 1."""
    rank = len(dims)
    s = (1,) * (rank - len(shape)) + tuple(int(d) for d in shape)
    st, acc = [0] * rank, 1
    for k in range(rank - 1, -1, -1):
        st[k] = 0 if s[k] == 1 and dims[k] != 1 else acc
        acc *= s[k]
    return st


def strided_copy(rt: CudaRuntime, x: DeviceArray, y: DeviceArray, shape: Sequence[int], sx: Sequence[int],
                 sy: Sequence[int], x_offset: int = 0, y_offset: int = 0) -> None:
    """y[y_offset + sum(i*sy)] = x[x_offset + sum(i*sx)] for every index i of `shape` (element units)."""
    n = math.prod(shape)
    if n == 0:
        return
    rank = len(shape)
    if rank > MAX_RANK:
        raise KernelLaunchError(f"a strided copy of rank {rank} exceeds {MAX_RANK}")
    pad = MAX_RANK - rank
    item = x.dtype.itemsize
    dims = (1,) * pad + tuple(int(d) for d in shape)
    sx6, sy6 = (0,) * pad + tuple(int(s) for s in sx), (0,) * pad + tuple(int(s) for s in sy)
    rt.launch("movement", f"strided_copy_b{item}", (_grid(n),), (256,),
              [ptr(x.ptr + x_offset * item), ptr(y.ptr + y_offset * item), i64(n), *map(i64, dims), *map(i64, sx6),
               *map(i64, sy6)])


def _flat_copy(rt: CudaRuntime, new: Sink, x: DeviceArray, shape: Sequence[int]) -> DeviceArray:
    shape = tuple(int(d) for d in shape)
    if math.prod(shape) != x.size:
        raise KernelLaunchError(f"cannot view {x.shape!r} as {shape!r}: element counts differ")
    y = new(0, shape, x.dtype)
    if y.ptr != x.ptr:  # planned in place: nothing to move
        strided_copy(rt, x, y, (x.size,), (1,), (1,))
    return y


def _ints(v: Any) -> list[int]:
    return [int(a) for a in np.asarray(v).reshape(-1)]


def reshape_shape(shape: Sequence[int], target: Sequence[int], allowzero: bool) -> tuple[int, ...]:
    out = [shape[i] if (d == 0 and not allowzero and i < len(shape)) else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise KernelLaunchError(f"Reshape target {list(target)!r} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(shape)
        if known == 0 or total % known:
            raise KernelLaunchError(f"cannot reshape {tuple(shape)!r} to {list(target)!r}")
        out[out.index(-1)] = total // known
    if math.prod(out) != math.prod(shape) or any(d < 0 for d in out):
        raise KernelLaunchError(f"cannot reshape {tuple(shape)!r} to {list(target)!r}")
    return tuple(out)


def _axes(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[int] | None:
    if len(inputs) > 1 and inputs[1] is not None:
        return _ints(inputs[1])
    return list(attrs["axes"]) if "axes" in attrs else None


def squeeze_shape(shape: Sequence[int], axes: list[int] | None) -> tuple[int, ...]:
    r = len(shape)
    drop = {a % r for a in axes} if axes else {i for i, d in enumerate(shape) if d == 1}
    if any(shape[a] != 1 for a in drop):
        raise KernelLaunchError(f"Squeeze axes {axes!r} include an extent other than 1 in {tuple(shape)!r}")
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def unsqueeze_shape(shape: Sequence[int], axes: list[int]) -> tuple[int, ...]:
    r = len(shape) + len(axes)
    at = sorted(a % r for a in axes)
    out, src = [], iter(shape)
    for i in range(r):
        out.append(1 if i in at else next(src))
    return tuple(out)


def slice_plan(shape: Sequence[int], starts: list[int], ends: list[int], axes: list[int] | None,
               steps: list[int] | None) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """(output shape, source offset, source strides) in elements, with numpy's clamping."""
    r = len(shape)
    axes = [a % r for a in (axes if axes is not None else range(len(starts)))]
    steps = steps if steps is not None else [1] * len(starts)
    strides = contiguous_strides(shape)
    out, sx, offset = list(shape), list(strides), 0
    for a, b, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise KernelLaunchError("Slice step 0 is invalid")
        first, stop, step = slice(b, e, st).indices(shape[a])
        out[a] = len(range(first, stop, step))
        if out[a]:
            offset += first * strides[a]
        sx[a] = strides[a] * step
    return tuple(out), offset, tuple(sx)


def _expand(rt: CudaRuntime, new: Sink, x: DeviceArray, target: list[int]) -> DeviceArray:
    out = tuple(np.broadcast_shapes(x.shape, tuple(target)))
    sx = broadcast_strides(x.shape, out)
    y = new(0, out, x.dtype)
    strided_copy(rt, x, y, out, sx, contiguous_strides(out))
    return y


def _concat(rt: CudaRuntime, new: Sink, parts: Sequence[DeviceArray], axis: int) -> DeviceArray:
    first = parts[0]
    axis %= len(first.shape)
    out = list(first.shape)
    out[axis] = sum(p.shape[axis] for p in parts)
    y = new(0, tuple(out), first.dtype)
    sy = contiguous_strides(out)
    at = 0
    for p in parts:
        strided_copy(rt, p, y, p.shape, contiguous_strides(p.shape), sy, 0, at * sy[axis])
        at += p.shape[axis]
    return y


def _gather(rt: CudaRuntime, new: Sink, x: DeviceArray, idx: DeviceArray, axis: int) -> DeviceArray:
    axis %= len(x.shape)
    out = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    y = new(0, out, x.dtype)
    outer, inner = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1:])
    n = math.prod(out)
    if n:
        kind = {4: "i32", 8: "i64"}[idx.dtype.itemsize]
        rt.launch("movement", f"gather_b{x.dtype.itemsize}_{kind}", (_grid(n),), (256,),
                  [ptr(x), ptr(idx), ptr(y), i64(outer), i64(idx.size), i64(x.shape[axis]), i64(inner)])
    return y


def _cast(rt: CudaRuntime, new: Sink, x: DeviceArray, to: int) -> DeviceArray:
    dst = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    if dst == x.dtype:
        return _flat_copy(rt, lambda i, s, d: new(i, s, dst), x, x.shape)
    src_name = CAST_TYPES[helper.np_dtype_to_tensor_dtype(x.dtype)]
    y = new(0, x.shape, dst)
    if x.size:
        rt.launch("movement", f"cast_{src_name}_{CAST_TYPES[to]}", (_grid(x.size),), (256,),
                  [ptr(x), ptr(y), i64(x.size)])
    return y


def compute_movement(rt: CudaRuntime, new: Sink, op: str, inputs: Sequence[Any], attrs: Mapping[str, Any],
                     opset: int = 21) -> list[Any]:
    x = inputs[0]
    if op == "Reshape":
        return [_flat_copy(rt, new, x, reshape_shape(x.shape, _ints(inputs[1]), bool(attrs.get("allowzero", 0))))]
    if op == "Squeeze":
        return [_flat_copy(rt, new, x, squeeze_shape(x.shape, _axes(inputs, attrs)))]
    if op == "Unsqueeze":
        return [_flat_copy(rt, new, x, unsqueeze_shape(x.shape, _axes(inputs, attrs) or []))]
    if op == "Flatten":
        axis = int(attrs.get("axis", 1))
        axis = axis + len(x.shape) if axis < 0 else axis
        return [_flat_copy(rt, new, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]
    if op == "Transpose":
        perm = list(attrs.get("perm", reversed(range(len(x.shape)))))
        out = tuple(x.shape[p] for p in perm)
        y = new(0, out, x.dtype)
        strides = contiguous_strides(x.shape)
        strided_copy(rt, x, y, out, [strides[p] for p in perm], contiguous_strides(out))
        return [y]
    if op == "Slice":
        if len(inputs) > 1:
            get = [(_ints(inputs[i]) if len(inputs) > i and inputs[i] is not None else None) for i in range(1, 5)]
            starts, ends, axes, steps = get
        else:
            starts, ends, axes, steps = list(attrs["starts"]), list(attrs["ends"]), attrs.get("axes"), None
        out, offset, sx = slice_plan(x.shape, starts, ends, list(axes) if axes is not None else None, steps)
        y = new(0, out, x.dtype)
        strided_copy(rt, x, y, out, sx, contiguous_strides(out), offset)
        return [y]
    if op == "Expand":
        return [_expand(rt, new, x, _ints(inputs[1]))]
    if op == "Concat":
        return [_concat(rt, new, list(inputs), int(attrs["axis"]))]
    if op == "Gather":
        return [_gather(rt, new, x, inputs[1], int(attrs.get("axis", 0)))]
    if op == "Cast":
        return [_cast(rt, new, x, int(attrs["to"]))]
    if op == "Shape":
        dims = list(x.shape)[slice(attrs.get("start", 0), attrs.get("end"))]
        y = new(0, (len(dims),), np.dtype(np.int64))  # a host output: a numpy array
        y[...] = dims
        return [y]
    raise KernelLaunchError(f"no launch code for {op!r}")
