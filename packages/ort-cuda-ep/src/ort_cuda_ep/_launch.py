"""Host-side launch code of every kernel: shapes -> grid, args, workspace, outputs.

Each kernel that uses workspace asks for its planned workspace first (``preallocated``) and
falls back to a scratch allocation; the size comes from the same recipe as the estimate and the
declaration, and the runtime counters record which source it got and the bytes it used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ._attention_recipe import attention_recipe
from ._compile import DTYPE_SUFFIX
from ._errors import KernelLaunchError
from ._launch_conv import conv
from ._launch_gqa import gqa
from ._launch_movement import MOVEMENT_OPS, broadcast_strides, compute_movement
from ._launch_packed import packed_attention, packed_mha
from ._launch_where_reduce import WHERE_REDUCE_OPS, compute_where_reduce
from ._nbits_recipe import TILE_M, TILE_N, matmul_nbits_recipe
from ._ops import BINARY_OPS, MAX_RANK, UNARY_OPS, OpSpec
from ._runtime import CudaRuntime, DeviceArray, f32, i32, i64, ptr
from ._workspace import SLOT_ID

__all__ = ["WorkspaceSource", "OutputSink", "ScratchOnly", "compute"]


class WorkspaceSource(Protocol):
    """Where a kernel's workspace comes from: the memory plan, else a scratch allocation."""

    def preallocated(self, slot_id: int, nbytes: int) -> int | None: ...

    def scratch(self, nbytes: int) -> int: ...


class OutputSink(Protocol):
    """Makes output ``index`` of a kernel as a device tensor of (shape, dtype)."""

    def __call__(self, index: int, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray: ...


def _owned_by(rt: CudaRuntime) -> OutputSink:
    def new(index: int, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray:
        return rt.empty(shape, dtype)

    return new


class ScratchOnly:
    """No memory plan: every request is a scratch allocation freed after the call."""

    def __init__(self, runtime: CudaRuntime) -> None:
        self.runtime = runtime
        self.allocated: list = []  # ort_abi DeviceBuffers, freed by release()

    def preallocated(self, slot_id: int, nbytes: int) -> int | None:
        return None

    def scratch(self, nbytes: int) -> int:
        buf = self.runtime.allocator.alloc(nbytes)
        self.allocated.append(buf)
        return buf.ptr

    def release(self) -> None:
        while self.allocated:
            self.runtime.allocator.free(self.allocated.pop())


def _workspace(rt: CudaRuntime, ws: WorkspaceSource, node: str, nbytes: int) -> int:
    if nbytes == 0:
        rt.counters.record(node, "none", 0)
        return 0
    p = ws.preallocated(SLOT_ID, nbytes)
    source = "planned"
    if not p:
        p, source = ws.scratch(nbytes), "scratch"
    rt.counters.record(node, source, nbytes)
    return p


_SUFFIX = DTYPE_SUFFIX


def _sfx(*arrays: DeviceArray | None) -> str:
    """The entry-point suffix for the arrays' common float type (f32 / f16)."""
    dts = {a.dtype for a in arrays if a is not None}
    if len(dts) != 1 or next(iter(dts)) not in _SUFFIX:
        raise KernelLaunchError(f"inputs of types {sorted(str(d) for d in dts)!r}; expected one of "
                                f"float32/float16/bfloat16 for all")
    return _SUFFIX[next(iter(dts))]


def _grid1d(n: int, block: int = 256) -> int:
    return max(1, min(math.ceil(n / block), 1 << 20))


def _binary(rt: CudaRuntime, new: OutputSink, op: str, a: DeviceArray, b: DeviceArray) -> DeviceArray:
    shape = np.broadcast_shapes(a.shape, b.shape)
    if len(shape) > MAX_RANK:
        raise KernelLaunchError(f"{op}: broadcast rank {len(shape)} exceeds {MAX_RANK}")
    sfx = _sfx(a, b)
    out = new(0, shape, a.dtype)
    dims = (1,) * (MAX_RANK - len(shape)) + tuple(shape)
    n = out.size
    if n:
        rt.launch("elementwise", f"binary_{sfx}", (_grid1d(n),), (256,),
                  [ptr(a), ptr(b), ptr(out), i64(n), i32(BINARY_OPS[op]), *map(i64, dims),
                   *map(i64, broadcast_strides(a.shape, dims)), *map(i64, broadcast_strides(b.shape, dims))])
    return out


def _unary(rt: CudaRuntime, new: OutputSink, op: str, x: DeviceArray, attrs: Mapping[str, Any]) -> DeviceArray:
    sfx = _sfx(x)
    out = new(0, x.shape, x.dtype)
    code = UNARY_OPS[op]
    if op == "Gelu" and attrs.get("approximate", "none") in ("tanh", b"tanh"):
        code = 11
    if x.size:
        rt.launch("elementwise", f"unary_{sfx}", (_grid1d(x.size),), (256,), [ptr(x), ptr(out), i64(x.size), i32(code)])
    return out


_MAX_ROWS = 65535 * 64  # grid.y limit x tile rows
_MAX_BATCH = 65535  # grid.z limit


def _gemm_launch(rt, dtype, a, b, c, bias, M, N, K, a_m, a_k, b_k, b_n, batch, ba, bb, bc, bias_m, bias_n, alpha, beta):
    """matmul_<T> over [batch, M, N], cut into launches that respect the grid limits."""
    sfx, item = _SUFFIX[np.dtype(dtype)], np.dtype(dtype).itemsize
    a0, b0, c0, bias0 = (0 if x is None else (x if isinstance(x, int) else x.ptr) for x in (a, b, c, bias))
    for z0 in range(0, batch, _MAX_BATCH):
        nz = min(_MAX_BATCH, batch - z0)
        for r0 in range(0, M, _MAX_ROWS):
            nr = min(_MAX_ROWS, M - r0)
            pa = a0 + item * (z0 * ba + r0 * a_m)
            pc = c0 + item * (z0 * bc + r0 * N)
            pbias = bias0 + item * r0 * bias_m if bias0 else 0
            rt.launch("matmul", f"matmul_{sfx}", (math.ceil(N / 64), math.ceil(nr / 64), nz), (256,),
                      [ptr(pa), ptr(b0 + item * z0 * bb), ptr(pc), ptr(pbias), i32(nr), i32(N), i32(K), i64(a_m), i64(a_k),
                       i64(b_k), i64(b_n), i64(ba), i64(bb), i64(bc), i64(bias_m), i64(bias_n), i64(0), f32(alpha),
                       f32(beta)])


def _matmul(rt: CudaRuntime, new: OutputSink, a: DeviceArray, b: DeviceArray) -> DeviceArray:
    sa = a.shape if len(a.shape) > 1 else (1,) + a.shape
    sb = b.shape if len(b.shape) > 1 else b.shape + (1,)
    (M, K), (K2, N) = sa[-2:], sb[-2:]
    if K != K2:
        raise KernelLaunchError(f"MatMul: inner dims differ, {a.shape!r} x {b.shape!r}")
    ba, bb = sa[:-2], sb[:-2]
    try:
        batch_dims = tuple(np.broadcast_shapes(ba, bb))
    except ValueError:
        raise KernelLaunchError(f"MatMul: batch dims {ba!r} and {bb!r} do not broadcast") from None
    out_shape = tuple(batch_dims) + (M, N)
    final = tuple(batch_dims) + ((M,) if len(a.shape) > 1 else ()) + ((N,) if len(b.shape) > 1 else ())
    _sfx(a, b)
    result = new(0, final, a.dtype)  # numpy's result shape; the kernel writes it as [batch, M, N]
    out = result if final == out_shape else result.reshaped(out_shape)
    if out.size == 0:
        return result
    if not bb:  # weights shared by every batch: fold the batch into M
        Mf = int(np.prod(ba, dtype=np.int64)) * M if ba else M
        _gemm_launch(rt, a.dtype, a, b, out, None, Mf, N, K, K, 1, N, 1, 1, 0, 0, 0, 0, 0, 1.0, 0.0)
    else:
        batch = int(np.prod(batch_dims, dtype=np.int64))
        off_a, off_b = _batch_offsets(ba, batch_dims, M * K), _batch_offsets(bb, batch_dims, K * N)
        step_a, step_b = _linear(off_a), _linear(off_b)
        if step_a is not None and step_b is not None:  # one launch: batch index z reads A at z*step_a
            _gemm_launch(rt, a.dtype, a, b, out, None, M, N, K, K, 1, N, 1, batch, step_a, step_b, M * N, 0, 0,
                         1.0, 0.0)
        else:  # a broadcast no single stride expresses (e.g. [2, 1] x [1, 3]): one launch per batch entry
            item = a.dtype.itemsize
            for z in range(batch):
                _gemm_launch(rt, a.dtype, a.ptr + item * int(off_a[z]), b.ptr + item * int(off_b[z]),
                             out.ptr + item * z * M * N, None, M, N, K, K, 1, N, 1, 1, 0, 0, 0, 0, 0, 1.0, 0.0)
    return result


def _batch_offsets(dims: tuple[int, ...], batch_dims: tuple[int, ...], matrix: int) -> np.ndarray:
    """Element offset of each (flattened) output batch entry's matrix in an operand with batch `dims`."""
    batch = int(np.prod(batch_dims, dtype=np.int64))
    if not dims:
        return np.zeros(batch, np.int64)
    strides = np.array(broadcast_strides(dims, batch_dims), np.int64) * matrix
    idx = np.stack(np.unravel_index(np.arange(batch), batch_dims), axis=1)
    return idx @ strides


def _linear(offsets: np.ndarray) -> int | None:
    """The step when offsets[z] == z * step for every z, else None."""
    step = int(offsets[1] - offsets[0]) if len(offsets) > 1 else 0
    return step if np.array_equal(offsets, np.arange(len(offsets), dtype=np.int64) * step) else None


def _gemm(rt: CudaRuntime, new: OutputSink, a: DeviceArray, b: DeviceArray, c: DeviceArray | None,
          attrs: Mapping[str, Any]) -> DeviceArray:
    ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    N = b.shape[0] if tb else b.shape[1]
    _sfx(a, b, c)
    out = new(0, (M, N), a.dtype)
    bias_m = bias_n = 0
    if c is not None:
        cs = (1,) * (2 - len(c.shape)) + tuple(c.shape)
        bias_m = cs[1] if cs[0] != 1 else 0
        bias_n = 1 if cs[1] != 1 else 0
    if out.size:
        _gemm_launch(rt, a.dtype, a, b, out, c, M, N, K, 1 if ta else K, M if ta else 1, 1 if tb else N, K if tb else 1,
                     1, 0, 0, 0, bias_m, bias_n, float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0)))
    return out


def _softmax(rt: CudaRuntime, new: OutputSink, x: DeviceArray) -> DeviceArray:
    sfx = _sfx(x)
    out = new(0, x.shape, x.dtype)
    cols = x.shape[-1] if x.shape else 1
    rows = x.size // cols if cols else 0
    if rows and cols:
        rt.launch("softmax", f"softmax_{sfx}", (min(rows, 1 << 20),), (256,), [ptr(x), ptr(out), i64(rows), i32(cols)])
    return out


def _rms_norm(rt: CudaRuntime, new: OutputSink, x: DeviceArray, scale: DeviceArray, attrs: Mapping[str, Any],
             n_out: int) -> list[DeviceArray]:
    axis = int(attrs.get("axis", -1)) % len(x.shape)
    cols = int(np.prod(x.shape[axis:], dtype=np.int64))
    if scale.size != cols:
        raise KernelLaunchError(f"SimplifiedLayerNormalization: scale {scale.shape!r} does not cover dims {x.shape[axis:]!r}")
    rows = x.size // cols if cols else 0
    sfx = _sfx(x, scale)
    y = new(0, x.shape, x.dtype)
    inv = new(1, x.shape[:axis] + (1,) * (len(x.shape) - axis), np.float32) if n_out > 1 else None
    if rows and cols:
        rt.launch("rms_norm", f"rms_norm_{sfx}", (min(rows, 1 << 20),), (256,),
                  [ptr(x), ptr(scale), ptr(y), ptr(inv), i64(rows), i32(cols), f32(attrs.get("epsilon", 1e-5))])
    return [y] if inv is None else [y, inv]


def _skip_rms_norm(rt: CudaRuntime, new: OutputSink, inputs, attrs: Mapping[str, Any], n_out: int) -> list[DeviceArray | None]:
    x, skip, scale = inputs[0], inputs[1], inputs[2]
    bias = inputs[3] if len(inputs) > 3 else None
    if skip.shape != x.shape:
        raise KernelLaunchError(f"SkipSimplifiedLayerNormalization: skip {skip.shape!r} differs from input {x.shape!r}")
    cols = x.shape[-1]
    if scale.size != cols or (bias is not None and bias.size != cols):
        raise KernelLaunchError(f"SkipSimplifiedLayerNormalization: gamma/bias must have {cols} elements")
    rows = x.size // cols if cols else 0
    sfx = _sfx(x, skip, scale, bias)
    y = new(0, x.shape, x.dtype)
    inv = new(2, x.shape[:-1] + (1,), np.float32) if n_out > 2 else None
    total = new(3, x.shape, x.dtype) if n_out > 3 else None
    if rows and cols:
        rt.launch("rms_norm", f"skip_rms_norm_{sfx}", (min(rows, 1 << 20),), (256,),
                  [ptr(x), ptr(skip), ptr(bias), ptr(scale), ptr(y), ptr(inv), ptr(total), i64(rows), i32(cols),
                   f32(attrs.get("epsilon", 1e-5))])
    return [y, None, inv, total][:max(n_out, 1)]


def _matmul_nbits(rt, new: OutputSink, node, inputs, attrs, ws) -> DeviceArray:
    a, b, scales = inputs[0], inputs[1], inputs[2]
    zp = inputs[3] if len(inputs) > 3 else None
    bias = inputs[5] if len(inputs) > 5 else None
    N, K, bs = int(attrs["N"]), int(attrs["K"]), int(attrs["block_size"])
    M = int(np.prod(a.shape[:-1], dtype=np.int64))
    k_blocks = -(-K // bs)
    sfx = _sfx(a, scales, bias)
    bits = int(attrs.get("bits", 4))
    recipe = matmul_nbits_recipe(M, N, K, bits, bs, a.dtype.itemsize)
    if recipe is None:
        raise KernelLaunchError(f"MatMulNBits: shape {a.shape!r} with N={N!r}, K={K!r} is out of range")
    out = new(0, a.shape[:-1] + (N,), a.dtype)
    _workspace(rt, ws, node, recipe.workspace_bytes)  # 0 on every path: records that none was used
    if recipe.path == "gemv":
        rt.launch("matmul_nbits", f"mnb{bits}_gemv_{sfx}", (math.ceil(N / 4),), (128,),
                  [ptr(a), ptr(b), ptr(scales), ptr(zp), ptr(bias), ptr(out), i32(M), i32(N), i32(K), i32(bs), i32(k_blocks)])
    elif recipe.path == "tiled":  # B is dequantized tile by tile in shared memory: no workspace
        item = a.dtype.itemsize
        for r0 in range(0, M, _MAX_ROWS):  # grid.y holds at most 65535 row tiles
            nr = min(_MAX_ROWS, M - r0)
            rt.launch("matmul_nbits", f"mnb{bits}_tiled_{sfx}", (math.ceil(N / TILE_N), math.ceil(nr / TILE_M)), (256,),
                      [ptr(a.ptr + item * r0 * K), ptr(b), ptr(scales), ptr(zp), ptr(bias), ptr(out.ptr + item * r0 * N),
                       i32(nr), i32(N), i32(K), i32(bs), i32(k_blocks)])
    return out


def _attention(rt, new: OutputSink, node, inputs, attrs, ws) -> DeviceArray:
    q, k, v = inputs[0], inputs[1], inputs[2]
    B, S, hidden = q.shape
    L, H = k.shape[1], int(attrs["num_heads"])
    D = hidden // H
    r = attention_recipe(B, S, L, H, D, rt.device.profile.sm_count)
    if r is None:
        raise KernelLaunchError(f"MultiHeadAttention: shapes {q.shape!r}, {k.shape!r} are out of range")
    sfx = _sfx(q, k, v)
    out = new(0, q.shape, q.dtype)
    if out.size == 0:
        return out
    base = _workspace(rt, ws, node, r.total_bytes)
    scale = float(attrs.get("scale", 0.0)) or 1.0 / math.sqrt(D)
    causal_offset = 0 if int(attrs.get("unidirectional", 0)) else -1  # no past input: offset 0
    kps = r.blocks_per_split * r.block_n if r.num_splits > 1 else max(L, 1)
    lse = base + r.lse_offset
    lse_acc = base + r.lse_accum_offset if r.num_splits > 1 else 0
    o_acc = base + r.out_accum_offset if r.num_splits > 1 else 0
    rt.launch("attention", f"attn_split_{sfx}", (B * H * S * r.num_splits,), (128,),
              [ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse), ptr(lse_acc), ptr(o_acc), i32(B), i32(H), i32(S), i32(L),
               i32(D), i32(r.head_size_rounded), f32(scale), i32(causal_offset), i32(r.num_splits), i32(kps)])
    if r.num_splits > 1:
        rt.launch("attention", f"attn_combine_{sfx}", (B * H * S,), (128,),
                  [ptr(lse_acc), ptr(o_acc), ptr(out), ptr(lse), i32(B), i32(H), i32(S), i32(D),
                   i32(r.head_size_rounded), i32(r.num_splits)])
    return out


def compute(rt: CudaRuntime, spec: OpSpec, node: str, inputs: Sequence[DeviceArray | None], attrs: Mapping[str, Any],
            ws: WorkspaceSource, n_outputs: int = 1, out: OutputSink | None = None) -> list[DeviceArray | None]:
    """Run one node on the device; returns its outputs (None for one not computed). Each output is
    made by ``out(index, shape, dtype)`` (the planned block of a session), else owned by ``rt``."""
    new = out or _owned_by(rt)
    op = spec.op_type
    if op in MOVEMENT_OPS:
        return compute_movement(rt, new, op, inputs, attrs)
    if op in WHERE_REDUCE_OPS:
        return compute_where_reduce(rt, new, op, inputs, attrs)
    if op in BINARY_OPS:
        return [_binary(rt, new, op, inputs[0], inputs[1])]  # type: ignore[arg-type]
    if op in UNARY_OPS:
        return [_unary(rt, new, op, inputs[0], attrs)]  # type: ignore[arg-type]
    if op == "Softmax":
        return [_softmax(rt, new, inputs[0])]  # type: ignore[arg-type]
    if op == "SimplifiedLayerNormalization":
        return _rms_norm(rt, new, inputs[0], inputs[1], attrs, n_outputs)  # type: ignore[arg-type]
    if op == "SkipSimplifiedLayerNormalization":
        return _skip_rms_norm(rt, new, inputs, attrs, n_outputs)  # type: ignore[return-value]
    if op == "MatMul":
        return [_matmul(rt, new, inputs[0], inputs[1])]  # type: ignore[arg-type]
    if op == "Gemm":
        return [_gemm(rt, new, inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, attrs)]  # type: ignore[arg-type]
    if op == "MatMulNBits":
        return [_matmul_nbits(rt, new, node, inputs, attrs, ws)]
    if op == "MultiHeadAttention":
        return [_attention(rt, new, node, inputs, attrs, ws)]
    if op == "GroupQueryAttention":
        return gqa(rt, new, node, inputs, attrs, lambda nbytes: _workspace(rt, ws, node, nbytes))  # type: ignore[return-value]
    if op in _WORKSPACE_LAUNCHES:
        return [_WORKSPACE_LAUNCHES[op](rt, new, node, inputs, attrs, lambda nbytes: _workspace(rt, ws, node, nbytes))]
    raise KernelLaunchError(f"no launch code for {op!r}")


_WORKSPACE_LAUNCHES = {"Conv": conv, "PackedAttention": packed_attention, "PackedMultiHeadAttention": packed_mha}
