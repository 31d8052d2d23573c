"""Numpy emulation of the simple kernels (movement.cu, where.cu, reduce.cu, elementwise.cu's unary and
binary ops) on recorded launches: each does, element for element, what its .cu loop does, with the
bounds of every read and write checked against the allocation. Tests compare the results with
onnx.reference; a GPU run (tests/test_gpu.py) checks the CUDA code does the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["emulate_simple", "SIMPLE_PREFIXES"]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_TYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32, "i64": np.int64}
SIMPLE_PREFIXES = ("strided_copy_", "gather_", "cast_", "where_", "isnan_", "reduce_rows_", "unary_", "binary_")
_UNARY: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: lambda v: np.maximum(v, 0), 1: lambda v: 1 / (1 + np.exp(-v)), 2: np.tanh, 3: np.negative, 4: np.exp,
    5: np.log, 6: np.sqrt, 7: np.abs, 9: lambda v: 1 / v, 12: lambda v: v, 13: np.sin, 14: np.cos}
_BINARY: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    0: np.add, 1: np.subtract, 2: np.multiply, 3: np.divide, 4: np.power, 5: np.maximum, 6: np.minimum}
Resolve = Callable[[int], tuple[np.ndarray, int]]


def _view(resolve: Resolve, pointer: int, dtype: Any) -> tuple[np.ndarray, int]:
    """The whole allocation as `dtype` elements and the pointer's element index in it (a kernel may
    read before its pointer with a negative stride)."""
    handle, offset = resolve(pointer)
    item = np.dtype(dtype).itemsize
    assert offset % item == 0, "misaligned element pointer"
    return handle[: handle.nbytes // item * item].view(dtype), offset // item


def _index(arr: np.ndarray, at: np.ndarray) -> np.ndarray:
    assert at.size == 0 or (at.min() >= 0 and at.max() < arr.size), "a read or write outside the allocation"
    return at


def _offsets(n: int, dims: list[int], *strides: list[int]) -> list[np.ndarray]:
    idx = np.stack(np.unravel_index(np.arange(n), dims), axis=1) if n else np.zeros((0, 6), np.int64)
    return [idx @ np.array(s, np.int64) for s in strides]


def emulate_simple(entry: str, v: list[Any], resolve: Resolve) -> None:
    """Execute one launch of `entry` with argument values `v`; `resolve(pointer) -> (uint8 backing, offset)`."""
    kind, _, sfx = entry.rpartition("_")
    if entry.startswith("strided_copy_b"):
        dt = _UINT[int(entry[-1])]
        (x, x0), (y, y0), n = _view(resolve, v[0], dt), _view(resolve, v[1], dt), v[2]
        sx, sy = _offsets(n, v[3:9], v[9:15], v[15:21])
        y[_index(y, y0 + sy)] = x[_index(x, x0 + sx)]
    elif entry.startswith("gather_b"):
        _, b, it = entry.split("_")
        (x, x0), (idx, i0), (y, y0) = (_view(resolve, v[0], _UINT[int(b[1:])]), _view(resolve, v[1], _TYPES[it]),
                                       _view(resolve, v[2], _UINT[int(b[1:])]))
        outer, n_idx, axis_dim, inner = v[3:7]
        i = np.arange(outer * n_idx * inner)
        k, j, o = i % inner, (i // inner) % n_idx, i // (inner * n_idx)
        at = idx[_index(idx, i0 + j)].astype(np.int64)
        at = np.where(at < 0, at + axis_dim, at)
        ok = (at >= 0) & (at < axis_dim)
        src = x0 + np.where(ok, (o * axis_dim + at) * inner + k, 0)
        y[_index(y, y0 + i)] = np.where(ok, x[_index(x, src)], 0)
    elif entry.startswith("cast_"):
        _, s, d = entry.split("_")
        (x, x0), (y, y0), n = _view(resolve, v[0], _TYPES[s]), _view(resolve, v[1], _TYPES[d]), v[2]
        y[_index(y, y0 + np.arange(n))] = x[_index(x, x0 + np.arange(n))].astype(_TYPES[d])
    elif kind == "where":
        t = _TYPES[sfx]
        (c, c0), (x, x0), (y, y0), (o, o0) = (_view(resolve, v[0], np.uint8), _view(resolve, v[1], t),
                                              _view(resolve, v[2], t), _view(resolve, v[3], t))
        n = v[4]
        sc, sx, sy = _offsets(n, v[5:11], v[11:17], v[17:23], v[23:29])
        pick = c[_index(c, c0 + sc)] != 0
        o[_index(o, o0 + np.arange(n))] = np.where(pick, x[_index(x, x0 + sx)], y[_index(y, y0 + sy)])
    elif kind == "isnan":
        (x, x0), (y, y0), n = _view(resolve, v[0], _TYPES[sfx]), _view(resolve, v[1], np.uint8), v[2]
        y[_index(y, y0 + np.arange(n))] = np.isnan(x[_index(x, x0 + np.arange(n))].astype(np.float32))
    elif kind == "reduce_rows":
        t = _TYPES[sfx]
        (x, x0), (y, y0), rows, cols, scale = _view(resolve, v[0], t), _view(resolve, v[1], t), v[2], v[3], v[4]
        block = x[_index(x, x0 + np.arange(rows * cols))].astype(np.float32).reshape(rows, cols)
        y[_index(y, y0 + np.arange(rows))] = (block.sum(axis=1, dtype=np.float32) * np.float32(scale)).astype(t)
    elif kind == "unary":
        t = _TYPES[sfx]
        (x, x0), (y, y0), n = _view(resolve, v[0], t), _view(resolve, v[1], t), v[2]
        with np.errstate(all="ignore"):
            y[_index(y, y0 + np.arange(n))] = _UNARY[v[3]](x[_index(x, x0 + np.arange(n))].astype(np.float32)).astype(t)
    elif kind == "binary":
        t = _TYPES[sfx]
        (a, a0), (b, b0), (y, y0), n = _view(resolve, v[0], t), _view(resolve, v[1], t), _view(resolve, v[2], t), v[3]
        sa, sb = _offsets(n, v[5:11], v[11:17], v[17:23])
        with np.errstate(all="ignore"):
            res = _BINARY[v[4]](a[_index(a, a0 + sa)].astype(np.float32), b[_index(b, b0 + sb)].astype(np.float32))
        y[_index(y, y0 + np.arange(n))] = res.astype(t)
    else:
        raise AssertionError(f"no emulation for {entry!r}")
