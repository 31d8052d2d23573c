"""com.microsoft MatMulNBits: A @ dequantize(B)^T with block-wise 2/4/8-bit weights (ONNX Runtime semantics).

B is uint8 of shape (N, k_blocks, blob_size), k_blocks = ceil(K / block_size), blob_size =
block_size * bits / 8: within a block, element i sits in byte (i * bits) // 8 at bit offset (i * bits) % 8
(low bits first). scales are (N, k_blocks) (or flat N * k_blocks) in A's dtype. zero_points are absent
(default 2^(bits-1)), packed uint8 (N, ceil(k_blocks * bits / 8)) packed the same way along the blocks, or
unpacked in A's dtype (N, k_blocks). W[n, k] = (q[n, k] - zp[n, k // block_size]) * scale[n, k // block_size]
and Y = A @ W^T (+ bias).

accuracy_level 4 (int8 compute): when B is a constant initializer (ONNX Runtime prepacks it) and the zero
points are absent or uint8, ONNX Runtime's CPU kernel quantizes A per block of block_size along K to int8
(symmetric, scale = max|a| / 127, values times 127 / max|a| rounded half to even) and accumulates integer dot products per block. This
kernel reproduces that by multiplying the quantize-dequantized A with the dequantized weight (equal up to
float32 summation order). Otherwise (accuracy_level 0-3, float zero points, B computed at run time) A is
used as is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, constant_initializer, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register, workspace_nbytes
from ._util import out_dtype

MS = "com.microsoft"
_T1 = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})
_SUPPORTED_BITS = (2, 4, 8)


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Unpack the last axis of uint8 `packed` into `count` unsigned `bits`-wide values (low bits first)."""
    per_byte = 8 // bits
    shifts = (np.arange(per_byte, dtype=np.uint8) * bits).astype(np.uint8)
    mask = np.uint8((1 << bits) - 1)
    vals = (packed[..., :, None] >> shifts) & mask  # (..., bytes, per_byte)
    vals = vals.reshape(*packed.shape[:-1], packed.shape[-1] * per_byte)
    return vals[..., :count]


def unpack_bits_into(packed: np.ndarray, bits: int, out: np.ndarray) -> None:
    """`unpack_bits(packed, bits, ...)` written into float `out` of shape packed.shape + (8 // bits,) without a
    temporary: value j of a byte is floor(byte / 2^(j * bits)) mod 2^bits, each pass a uint8 ufunc cast into
    `out` through numpy's bounded buffer (a table lookup would convert every byte to an intp index first)."""
    for j in range(8 // bits):
        v = out[..., j]
        np.floor_divide(packed, np.uint8(1 << (j * bits)), out=v)
        if (j + 1) * bits < 8:
            np.fmod(v, v.dtype.type(1 << bits), out=v)


_LUTS: dict[int, np.ndarray] = {}


def _byte_lut(bits: int) -> np.ndarray:
    """(256, 8 // bits) float32: the values packed in each byte, low bits first."""
    if bits not in _LUTS:
        _LUTS[bits] = unpack_bits(np.arange(256, dtype=np.uint8)[:, None], bits, 8 // bits).astype(np.float32)
    return _LUTS[bits]


def dequantize_weight(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, *, K: int, N: int,
                      bits: int, block_size: int, dtype: type = np.float32, out: np.ndarray | None = None) -> np.ndarray:
    """The dequantized weight W of shape (N, K) in `dtype`, vectorized over all blocks (rows of B may be a slice
    of the full N: scales/zero_points then hold the same rows). `out`: a float32 buffer of at least
    N * k_blocks * block_size elements to dequantize into (the kernel's workspace)."""
    k_blocks = (K + block_size - 1) // block_size
    blob = block_size * bits // 8
    packed = np.asarray(b, dtype=np.uint8).reshape(N, k_blocks, blob)
    if out is not None and dtype == np.float32:
        q = out.reshape(-1)[: N * k_blocks * block_size].reshape(N, k_blocks, block_size)
        if bits == 8:
            q[...] = packed
        else:
            unpack_bits_into(packed, bits, q.reshape(N, k_blocks, blob, 8 // bits))
    elif bits == 8:
        q = packed.astype(dtype)
    else:
        q = _byte_lut(bits)[packed].reshape(N, k_blocks, blob * (8 // bits))[..., :block_size].astype(dtype, copy=False)
    # scales and float zero points in their own dtype: the in-place ufuncs cast them (exactly) as they go
    sc = np.asarray(scales).reshape(N, k_blocks)
    if zero_points is None:
        q -= q.dtype.type(2 ** (bits - 1))
    else:
        if zero_points.dtype == np.uint8:
            zp_bytes = (k_blocks * bits + 7) // 8
            zp = unpack_bits(zero_points.reshape(N, zp_bytes), bits, k_blocks)  # N * k_blocks bytes
        else:
            zp = np.asarray(zero_points).reshape(N, k_blocks)
        q -= zp[:, :, None]
    q *= sc[:, :, None]
    return q.reshape(N, k_blocks * block_size)[:, :K]


def fake_quantize_a(a: np.ndarray, block_size: int, out: np.ndarray | None = None) -> np.ndarray:
    """A (M, K) float32 quantized per K-block to int8 (scale max|a|/127, round half even) and dequantized,
    computed in `out` (M * K rounded up to whole blocks float32 elements, e.g. a planned workspace) or a
    fresh array; only per-block statistics are allocated besides."""
    m, k = a.shape
    kb = (k + block_size - 1) // block_size
    if out is None:
        out = np.empty(m * kb * block_size, np.float32)
    padded = out.reshape(-1)[: m * kb * block_size].reshape(m, kb * block_size)
    padded[:, :k] = a
    padded[:, k:] = 0
    blocks = padded.reshape(m, kb, block_size)
    amax = np.maximum(blocks.max(axis=-1), -blocks.min(axis=-1))  # max |a| without an |a| copy
    scale = amax / np.float32(127)
    # the reciprocal as onnxruntime's quantizer computes it, 127 / max|a| in one rounding (not 1 / scale: the
    # two differ by an ulp, which moves values on a half step to the other integer)
    nz = amax != 0
    inv = np.where(nz, np.float32(127) / np.where(nz, amax, np.float32(1)), np.float32(0)).astype(np.float32)
    blocks *= inv[..., None]
    np.rint(blocks, out=blocks)
    blocks *= scale[..., None]
    return padded[:, :k]


def int8_compute(node: Node, zero_points: np.ndarray | None) -> bool:
    """Whether ONNX Runtime's CPU kernel would quantize A to int8 for this node (see the module doc)."""
    if int(node.attr("accuracy_level", 0)) != 4:
        return False
    if zero_points is not None and zero_points.dtype != np.uint8:
        return False
    graph = node.graph
    return graph is not None and len(node.inputs) > 1 and constant_initializer(graph, node.inputs[1]) is not None


_CHUNK_ELEMENTS = 1 << 22  # dequantized weight elements per band (16 MiB of float32) bounds the temporary


def _band_rows(K: int, N: int, block: int) -> int:
    k_padded = (K + block - 1) // block * block
    return min(N, max(1, _CHUNK_ELEMENTS // max(k_padded, 1)))


def matmul_nbits_workspace_bytes(node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
    """[(0, bytes)]: the float32 band of dequantized weight rows (at most 16 MiB), a function of the attributes
    alone, the same for the Level-1 estimate and the Level-2 declaration; [] for an empty weight."""
    K, N, _bits, block = _attrs(node)
    if K <= 0 or N <= 0 or block <= 0:
        return []
    b = input_shapes[1] if len(input_shapes) > 1 else None
    if b is not None and 0 in tuple(b):
        return []
    k_padded = (K + block - 1) // block * block
    slots = [(0, 4 * _band_rows(K, N, block) * k_padded)]
    a = input_shapes[0] if input_shapes else None
    if a is not None and _may_quantize_a(node):  # slot 1: A quantized to int8 and back (accuracy_level 4)
        slots.append((1, workspace_nbytes((int(np.prod(a[:-1], dtype=np.int64)) * k_padded,), np.float32)))
    if a is not None and _half(node):  # slot 2: float16 A upcast (M, K) and Y computed (M, N), float32
        slots.append((2, workspace_nbytes((int(np.prod(a[:-1], dtype=np.int64)) * (K + N),), np.float32)))
    return slots


def _half(node: Node) -> bool:
    """Y (A's dtype) is float16 in the graph: A and Y are staged in float32 in the declared slot 2."""
    return out_dtype(node) == TensorProto.FLOAT16


def _may_quantize_a(node: Node) -> bool:
    """`int8_compute` as far as the node alone tells (the zero points' dtype aside)."""
    graph = node.graph
    return (int(node.attr("accuracy_level", 0)) == 4 and graph is not None and len(node.inputs) > 1
            and constant_initializer(graph, node.inputs[1]) is not None)


def _attrs(node: Node) -> tuple[int, int, int, int]:
    a = attrs_of(node)
    return int(a.get("K", 0)), int(a.get("N", 0)), int(a.get("bits", 4)), int(a.get("block_size", 0))


@register("MatMulNBits", domain=MS)
class MatMulNBits(OpImpl):
    """Y = A @ dequant(B)^T (+ bias) with 2/4/8-bit block-quantized B."""

    writes_output = True  # into the output block, B dequantized band by band in slot 0 (float16: staged in slot 2)

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        K, N, bits, block = _attrs(node)
        if bits not in _SUPPORTED_BITS:
            return Decline(rejected=f"attribute bits={bits!r}", accepts="bits in (2, 4, 8)",
                           remedy="re-quantize the weights with 4 or 8 bits")
        if block < 16 or block & (block - 1):
            return Decline(rejected=f"attribute block_size={block!r}",
                           accepts="block_size a power of two >= 16", remedy="re-quantize with block_size 32 or 128")
        if K <= 0 or N <= 0:
            return Decline(rejected=f"attributes K={K!r}, N={N!r}", accepts="positive K and N",
                           remedy="set the K and N attributes")
        if int(node.attr("weight_prepacked", 0)) != 0:
            return Decline(rejected=f"weight_prepacked={node.attr('weight_prepacked')!r}",
                           accepts="weight_prepacked=0 (plain block layout)",
                           remedy="export without EP-specific prepacking")
        a = inputs[0]
        if a.dtype and a.dtype not in _T1:
            return Decline(rejected=f"input A dtype {dtype_name(a.dtype)}", accepts="float32, float16")
        if len(inputs) > 1 and inputs[1].dtype and inputs[1].dtype != TensorProto.UINT8:
            return Decline(rejected=f"input B dtype {dtype_name(inputs[1].dtype)}", accepts="uint8 packed weights")
        if len(inputs) > 4 and inputs[4].present:
            return Decline(rejected="input g_idx (act-order group index) present", accepts="g_idx absent",
                           remedy="re-quantize without act-order (desc_act=False) or reorder K beforehand")
        if len(inputs) > 3 and inputs[3].present and inputs[3].dtype not in (0, TensorProto.UINT8, a.dtype):
            return Decline(rejected=f"zero_points dtype {dtype_name(inputs[3].dtype)}",
                           accepts="uint8 (packed) or the dtype of A (unpacked)")
        if a.shape is not None and a.shape and isinstance(a.shape[-1], int) and a.shape[-1] != K:
            return Decline(rejected=f"A last dim {a.shape[-1]!r} != K={K!r}", accepts="A of shape (..., K)",
                           remedy="fix the K attribute or the input shape")
        if len(inputs) > 1 and inputs[1].shape is not None:
            k_blocks = (K + block - 1) // block
            blob = block * bits // 8
            want = (N, k_blocks, blob)
            got = inputs[1].shape
            static = all(isinstance(d, int) for d in got)
            if static and int(np.prod(got)) not in (N * k_blocks * blob, 0):
                return Decline(rejected=f"B shape {got!r}", accepts=f"B of shape {want!r} for K={K}, N={N}, "
                               f"bits={bits}, block_size={block}", remedy="fix the K/N/bits/block_size attributes")
        return None

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return matmul_nbits_workspace_bytes(node, input_shapes)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        K, N, bits, block = _attrs(node)
        a, b, scales = inputs[0], inputs[1], inputs[2]
        zp = inputs[3] if len(inputs) > 3 else None
        bias = inputs[5] if len(inputs) > 5 else None
        out_shape = a.shape[:-1] + (N,)
        into = a.dtype == np.float32  # computed in the output block
        staged = a.dtype == np.float16 and _half(node)  # computed in float32 in slot 2, rounded into the block
        if b.size == 0:  # omitted projection (ORT: zeros or the broadcast bias)
            y = self.output(0, out_shape, np.float32) if into else np.zeros(out_shape, dtype=np.float32)
            y.fill(0)
        else:
            if staged:
                m = int(np.prod(a.shape[:-1], dtype=np.int64))
                stage = self.workspace(2, (m * (K + N),), np.float32)
                a2, y_half = stage[:m * K].reshape(m, K), stage[m * K:].reshape(m, N)
                np.copyto(a2, a.reshape(m, K))
            else:
                a2 = a.reshape(-1, K).astype(np.float32, copy=False)
            if int8_compute(node, zp):
                kb = (K + block - 1) // block
                a2 = fake_quantize_a(a2, block, self.workspace(1, (a2.shape[0] * kb * block,), np.float32))
            y = y_half if staged else (
                self.output(0, out_shape, np.float32) if into else np.empty(out_shape, np.float32)).reshape(-1, N)
            k_blocks = (K + block - 1) // block
            b3 = b.reshape(N, k_blocks, -1)
            sc2 = np.asarray(scales).reshape(N, k_blocks)
            zp2 = None if zp is None else zp.reshape(N, -1)
            rows = _band_rows(K, N, block)  # dequantize a band of output rows at a time, into the workspace
            (_, nbytes), = matmul_nbits_workspace_bytes(node, [None, b.shape])
            buf = self.scratch(0, nbytes)
            band = None if buf is None else np.asarray(buf).reshape(-1).view(np.uint8)[:nbytes].view(np.float32)
            for n0 in range(0, N, rows):
                n1 = min(N, n0 + rows)
                w = dequantize_weight(b3[n0:n1], sc2[n0:n1], None if zp2 is None else zp2[n0:n1], K=K, N=n1 - n0,
                                      bits=bits, block_size=block, out=band)
                np.matmul(a2, w.T, out=y[:, n0:n1])
            y = y.reshape(out_shape)
        if bias is not None:
            np.add(y, bias, out=y)  # a float16 bias cast as it goes
        if staged and b.size:
            out = self.output(0, out_shape, a.dtype)
            np.copyto(out, y, casting="same_kind")
            return [out]
        return [y.astype(a.dtype, copy=False)]


__all__ = ["MatMulNBits", "matmul_nbits_workspace_bytes", "dequantize_weight", "fake_quantize_a", "int8_compute", "unpack_bits"]
