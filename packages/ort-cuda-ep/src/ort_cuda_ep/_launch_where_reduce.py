"""Host-side launch code of Where, IsNaN and the row reductions (ReduceMean, ReduceSum)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ._compile import DTYPE_SUFFIX
from ._errors import KernelLaunchError
from ._launch_movement import broadcast_strides
from ._ops import MAX_RANK
from ._runtime import CudaRuntime, DeviceArray, f32, i64, ptr

__all__ = ["WHERE_REDUCE_OPS", "compute_where_reduce"]

WHERE_REDUCE_OPS = frozenset({"Where", "IsNaN", "ReduceMean", "ReduceSum"})
Sink = Callable[[int, tuple[int, ...], np.dtype], Any]


def _grid(n: int) -> int:
    return max(1, min(math.ceil(n / 256), 1 << 20))


def _suffix(x: DeviceArray) -> str:
    if x.dtype not in DTYPE_SUFFIX:
        raise KernelLaunchError(f"input of type {x.dtype}; expected float32/float16/bfloat16")
    return DTYPE_SUFFIX[x.dtype]


def _where(rt: CudaRuntime, new: Sink, c: DeviceArray, x: DeviceArray, y: DeviceArray) -> DeviceArray:
    shape = tuple(np.broadcast_shapes(c.shape, x.shape, y.shape))
    if len(shape) > MAX_RANK or x.dtype != y.dtype:
        raise KernelLaunchError(f"Where: shapes {c.shape!r}, {x.shape!r}, {y.shape!r} or types {x.dtype}/{y.dtype}")
    out = new(0, shape, x.dtype)
    dims = (1,) * (MAX_RANK - len(shape)) + shape
    if out.size:
        rt.launch("where", f"where_{_suffix(x)}", (_grid(out.size),), (256,),
                  [ptr(c), ptr(x), ptr(y), ptr(out), i64(out.size), *map(i64, dims),
                   *map(i64, broadcast_strides(c.shape, dims)), *map(i64, broadcast_strides(x.shape, dims)),
                   *map(i64, broadcast_strides(y.shape, dims))])
    return out


def _isnan(rt: CudaRuntime, new: Sink, x: DeviceArray) -> DeviceArray:
    out = new(0, x.shape, np.dtype(bool))
    if x.size:
        rt.launch("where", f"isnan_{_suffix(x)}", (_grid(x.size),), (256,), [ptr(x), ptr(out), i64(x.size)])
    return out


def _reduce(rt: CudaRuntime, new: Sink, op: str, x: DeviceArray, axes_in: Any, attrs: Mapping[str, Any]) -> DeviceArray:
    rank = len(x.shape)
    if "axes" in attrs:
        axes = [int(a) for a in attrs["axes"]]
    elif axes_in is not None:
        axes = [int(a) for a in np.asarray(axes_in).reshape(-1)]
    else:
        axes = []
    reduced = sorted({a % rank for a in axes}) if axes and rank else list(range(rank))
    if reduced != list(range(rank - len(reduced), rank)):
        raise KernelLaunchError(f"{op}: axes {axes!r} are not the trailing axes of a rank-{rank} input")
    keep = rank - len(reduced)
    rows, cols = math.prod(x.shape[:keep]), math.prod(x.shape[keep:])
    out_shape = x.shape[:keep] + ((1,) * len(reduced) if attrs.get("keepdims", 1) else ())
    y = new(0, out_shape, x.dtype)
    scale = 1.0 if op == "ReduceSum" else (1.0 / cols if cols else float("nan"))
    if rows:
        rt.launch("reduce", f"reduce_rows_{_suffix(x)}", (min(rows, 1 << 20),), (256,),
                  [ptr(x), ptr(y), i64(rows), i64(cols), f32(scale)])
    return y


def compute_where_reduce(rt: CudaRuntime, new: Sink, op: str, inputs: Sequence[Any],
                         attrs: Mapping[str, Any]) -> list[Any]:
    if op == "Where":
        return [_where(rt, new, inputs[0], inputs[1], inputs[2])]
    if op == "IsNaN":
        return [_isnan(rt, new, inputs[0])]
    if op in ("ReduceMean", "ReduceSum"):
        return [_reduce(rt, new, op, inputs[0], inputs[1] if len(inputs) > 1 else None, attrs)]
    raise KernelLaunchError(f"no launch code for {op!r}")
