"""The Python column of the ABI parity matrix: in-tree Python kernels registered with
`KernelRegistry.add_kernel_v2`, implementing ort-cuda-ep's workspace recipes line for line like the
C kernels in c/parity_kernels.c (one recipe, three languages). Level 1 and Level 2 call the same
recipe function; a recipe is unavailable (None) unless every present input has a static shape whose
extents fit a 32-bit index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

import ort_abi
from ort_abi import HOST_API, KernelDefBuilder, KernelRegistry, WorkspaceSlot

EP = "CPUExecutionProvider"
SLOT_ID = 0
MAX_DIM = (1 << 31) - 1
MAX_BYTES = (1 << 63) - 1
ALIGNMENT = 256
MAX_SPLITS = 128
Shapes = Sequence[tuple[int, ...] | None]  # None: omitted


def _mul(*xs: int) -> int | None:
    out = 1
    for x in xs:
        out *= x
        if out > MAX_BYTES:
            return None
    return out


def _align(v: int | None) -> int | None:
    if v is None:
        return None
    out = v + (-v) % ALIGNMENT
    return None if out > MAX_BYTES else out


def _static(shapes: Shapes) -> bool:
    return all(s is None or all(0 <= d <= MAX_DIM for d in s) for s in shapes)


# -- attention ------------------------------------------------------------------------------------
def _block_n(d: int) -> int:
    return 256 if d <= 64 else (128 if d <= 128 else 64)


def num_splits(b: int, sq: int, skv: int, h: int, d: int, sms: int) -> int:
    f32 = np.float32
    n_blocks = -(-skv // _block_n(d))
    bnm = b * h * (-(-sq // 64))
    if f32(bnm) >= f32(0.8) * f32(sms):
        return 1
    cap = min(MAX_SPLITS, sms)
    eff, eligible = {}, {}
    for s in range(1, cap + 1):
        waves = f32(bnm * s) / f32(sms)
        eff[s] = f32(waves / f32(math.ceil(waves)))
        eligible[s] = s <= n_blocks and (s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1)))
    best = max([eff[s] for s in eff if eligible[s]], default=f32(0.0))
    for s in range(1, cap + 1):
        if eligible[s] and float(eff[s]) >= 0.85 * float(best):
            return s
    return 1


def attention_layout(b: int, sq: int, skv: int, h: int, d: int, sms: int) -> dict | None:
    """splits, rounded head size, keys per split, region offsets and total bytes; None when invalid."""
    if min(b, sq, skv, h) < 0 or d <= 0 or sms <= 0 or max(b, sq, skv, h, d, sms) > MAX_DIM:
        return None
    d_r = -(-d // 32) * 32
    rows = _mul(b, h, sq)
    if rows is None or rows > MAX_DIM or _mul(b, h, -(-sq // 64)) is None:
        return None
    out = {"splits": 1, "d_r": d_r, "kps": max(skv, 1), "lse_acc": 0, "out_acc": 0, "total": 0}
    if rows == 0:
        return out
    splits = num_splits(b, sq, skv, h, d, sms)
    out["splits"] = splits
    if splits == 1:
        out["total"] = 4 * rows
        return out
    off1 = _align(4 * rows)
    off2 = _align(None if off1 is None or _mul(4, splits, rows) is None else off1 + 4 * splits * rows)
    acc = _mul(4, splits, rows, d_r)
    if off2 is None or acc is None or off2 + acc > MAX_BYTES:
        return None
    n_blocks = -(-skv // _block_n(d))
    out.update(lse_acc=off1, out_acc=off2, total=off2 + acc, kps=-(-n_blocks // splits) * _block_n(d))
    return out


def attention_bytes(shapes: Shapes, heads: int, sms: int) -> int | None:
    if not _static(shapes) or len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return None
    q, k = shapes[0], shapes[1]
    if len(q) != 3 or len(k) != 3 or q[0] != k[0] or not 0 < heads <= MAX_DIM or q[2] % heads:
        return None
    layout = attention_layout(q[0], q[1], k[1], heads, q[2] // heads, sms)
    return None if layout is None else layout["total"]


# -- MatMulNBits ----------------------------------------------------------------------------------
def nbits_bytes(shapes: Shapes, n: int, k: int, bits: int, block_size: int) -> int | None:
    if not _static(shapes) or not shapes or shapes[0] is None or len(shapes[0]) < 1 or shapes[0][-1] != k:
        return None
    m = _mul(*shapes[0][:-1])
    if m is None or m > MAX_DIM or not (0 <= n <= MAX_DIM and 0 <= k <= MAX_DIM) or bits != 4:
        return None
    if not 16 <= block_size <= MAX_DIM or block_size & (block_size - 1):
        return None
    if _mul(4, m, n) is None or _mul(4, m, k) is None:
        return None
    return 0  # GEMV and the tiled path (B dequantized per tile in shared memory) need no workspace


def dequantize(b: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, n: int, k: int, bs: int) -> np.ndarray:
    """ONNX Runtime's 4-bit layout: [N, k_blocks, bs/2] bytes, low nibble first; zero point 8 by default."""
    kb = -(-k // bs)
    q = np.stack([b & 0xF, b >> 4], axis=-1).reshape(n, kb * bs)[:, :k].astype(np.float32)
    if zp is None:
        z = np.full((n, kb), 8.0, np.float32)
    else:
        z = np.stack([zp & 0xF, zp >> 4], axis=-1).reshape(n, -1)[:, :kb].astype(np.float32)
    w = (q.reshape(n, -1) - np.repeat(z, bs, axis=1)[:, :k]) * np.repeat(scales.reshape(n, kb), bs, axis=1)[:, :k]
    return np.ascontiguousarray(w.T)  # [K, N]


# -- kernels --------------------------------------------------------------------------------------
def _decl_shapes(shapes: list[ort_abi.WorkspaceInputShape]) -> list[tuple[int, ...] | None] | None:
    out = []
    for s in shapes:
        if not s.present:
            out.append(None)
        elif not s.is_static:
            return None
        else:
            out.append(tuple(s.dims or ()))
    return out


def _node_shapes(api, node) -> list[tuple[int, ...] | None] | None:
    out = []
    for i in range(api.node_input_count(node)):
        if not api.node_has_input(node, i):
            out.append(None)
            continue
        dims = api.node_input_shape(node, i)
        if dims is None:
            return None
        out.append(tuple(dims))
    return out


def _slots(nbytes: int | None) -> list[WorkspaceSlot] | None:
    return None if nbytes is None else ([WorkspaceSlot(SLOT_ID, nbytes)] if nbytes else [])


def _workspace(ctx: ort_abi.KernelContext, nbytes: int) -> np.ndarray:
    buf = ctx.preallocated_workspace(SLOT_ID, nbytes)
    return buf if buf is not None else ctx.scratch(nbytes)


class Attention:
    def __init__(self, state, info: ort_abi.KernelInfo) -> None:
        self.heads = int(info.attr("num_heads"))
        self.scale = float(info.attr("scale", 0.0))
        self.sms = int(HOST_API.ep_device_property(info.ep, "multi_processor_count"))

    def declare_workspace(self, shapes):
        dims = _decl_shapes(shapes)
        return None if dims is None else _slots(attention_bytes(dims, self.heads, self.sms))

    def compute(self, ctx: ort_abi.KernelContext) -> None:
        q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
        shapes = [None if a is None else a.shape for a in ctx.inputs]
        if attention_bytes(shapes, self.heads, self.sms) is None:
            raise ValueError(f"MultiHeadAttention: shapes {shapes!r} are out of range")
        B, S, hid = q.shape
        L, H = k.shape[1], self.heads
        D = hid // H
        out = ctx.output(0, q.shape, np.float32)
        if out.size == 0:
            return
        lay = attention_layout(B, S, L, H, D, self.sms)
        ws = _workspace(ctx, lay["total"])
        rows = B * H * S
        lse = ws[: 4 * rows].view(np.float32).reshape(B, H, S)
        scale = np.float32(self.scale or 1.0 / math.sqrt(D))
        qh = q.reshape(B, S, H, D).transpose(0, 2, 1, 3)
        kh = k.reshape(B, L, H, D).transpose(0, 2, 1, 3)
        vh = v.reshape(B, L, H, D).transpose(0, 2, 1, 3)
        splits, kps = lay["splits"], lay["kps"]
        part_lse = np.full((splits, B, H, S), -np.inf, np.float32)
        parts = np.zeros((splits, B, H, S, D), np.float32)
        for sp in range(splits):
            lo, hi = sp * kps, min((sp + 1) * kps, L)
            if hi <= lo:
                continue
            sc = (qh @ kh[:, :, lo:hi].transpose(0, 1, 3, 2)) * scale
            mx = sc.max(axis=-1, keepdims=True)
            p = np.exp(sc - mx)
            total = p.sum(axis=-1, keepdims=True)
            parts[sp] = (p @ vh[:, :, lo:hi]) / total
            part_lse[sp] = (mx + np.log(total))[..., 0]
        if splits > 1:  # per-split LSE and outputs live in the workspace, then combine
            lse_acc = ws[lay["lse_acc"]: lay["lse_acc"] + 4 * splits * rows].view(np.float32).reshape(splits, B, H, S)
            o_acc = ws[lay["out_acc"]: lay["out_acc"] + 4 * splits * rows * lay["d_r"]].view(np.float32)
            o_acc = o_acc.reshape(splits, B, H, S, lay["d_r"])
            lse_acc[...] = part_lse
            o_acc[..., :D] = parts
            mx = lse_acc.max(axis=0)
            total_lse = mx + np.log(np.exp(lse_acc - mx).sum(axis=0))
            res = (np.exp(lse_acc - total_lse)[..., None] * o_acc[..., :D]).sum(axis=0)
        else:
            total_lse, res = part_lse[0], parts[0]
        lse[...] = total_lse
        out[...] = res.transpose(0, 2, 1, 3).reshape(B, S, hid)


def attention_estimate(api, node, ep) -> int | None:
    shapes = _node_shapes(api, node)
    if shapes is None:
        return None
    return attention_bytes(shapes, int(api.node_attribute(node, "num_heads", "int")),
                           int(api.ep_device_property(ep, "multi_processor_count")))


class MatMulNBits:
    def __init__(self, state, info: ort_abi.KernelInfo) -> None:
        self.n, self.k = int(info.attr("N")), int(info.attr("K"))
        self.bits, self.bs = int(info.attr("bits", 4)), int(info.attr("block_size"))

    def _bytes(self, shapes) -> int | None:
        return nbits_bytes(shapes, self.n, self.k, self.bits, self.bs)

    def declare_workspace(self, shapes):
        dims = _decl_shapes(shapes)
        return None if dims is None else _slots(self._bytes(dims))

    def compute(self, ctx: ort_abi.KernelContext) -> None:
        inputs = list(ctx.inputs) + [None] * (6 - len(ctx.inputs))
        a, b, scales, zp, _g_idx, bias = inputs[:6]
        nbytes = self._bytes([None if x is None else x.shape for x in ctx.inputs])
        if nbytes is None:
            raise ValueError(f"MatMulNBits: input A {a.shape!r} is out of range for K={self.k!r}, N={self.n!r}")
        out = ctx.output(0, a.shape[:-1] + (self.n,), np.float32)
        m = int(np.prod(a.shape[:-1], dtype=np.int64))
        if m == 0 or self.n == 0:
            return
        a2 = a.reshape(m, self.k)
        w = dequantize(b, scales, zp, self.n, self.k, self.bs)  # no workspace on either path
        y = a2 @ w
        if bias is not None:
            y = y + bias
        out[...] = y.reshape(out.shape)


def nbits_estimate(api, node, ep) -> int | None:
    shapes = _node_shapes(api, node)
    if shapes is None:
        return None
    attr = api.node_attribute
    return nbits_bytes(shapes, int(attr(node, "N", "int")), int(attr(node, "K", "int")),
                       int(attr(node, "bits", "int", 4)), int(attr(node, "block_size", "int")))


class Softmax:
    """Last axis; the recipe "none": no workspace whatever the shapes."""

    def __init__(self, state, info: ort_abi.KernelInfo) -> None:
        axis = int(info.attr("axis", -1))
        if axis != -1:
            raise ValueError(f"Softmax axis {axis!r}: only -1 (the last axis) is supported")

    def declare_workspace(self, shapes):
        return []

    def compute(self, ctx: ort_abi.KernelContext) -> None:
        x = ctx.input(0)
        out = ctx.output(0, x.shape, np.float32)
        if x.size == 0:
            return
        x2 = x.reshape(-1, x.shape[-1] if x.ndim else 1)
        e = np.exp(x2 - x2.max(axis=-1, keepdims=True))
        out[...] = (e / e.sum(axis=-1, keepdims=True)).reshape(x.shape)


def softmax_estimate(api, node, ep) -> int | None:
    return 0


def register(registry: KernelRegistry) -> dict[str, ort_abi.KernelEntry]:
    """The three Python kernels, each through add_kernel_v2 with its Level-1 estimate."""
    out = {}
    for op, domain, since, cls, est in (("MultiHeadAttention", "com.microsoft", 1, Attention, attention_estimate),
                                        ("MatMulNBits", "com.microsoft", 1, MatMulNBits, nbits_estimate),
                                        ("Softmax", "", 13, Softmax, softmax_estimate)):
        kdef = KernelDefBuilder().op_type(op).domain(domain).since_version(since).ep(EP).build()
        out[op] = registry.add_kernel_v2(kdef, cls, None, est)
    return out
