"""com.microsoft GatherBlockQuantized: gather rows of a block-quantized table and dequantize them.

onnxruntime-genai's builder writes it for tied embeddings (the lm_head's MatMulNBits table read as the
embedding): uint8 data packing 4 or 8-bit values along the last axis, gather_axis 0, quantize_axis last,
scales (rows, blocks), packed uint8 zero points. That layout computes into the output block: the gathered
bytes, scales and zero points land in declared workspace slots, the values are unpacked straight into the
output (float32) or into a float32 slot rounded into it (float16). Other layouts (int4 / uint4 / float8 /
float4 tables, other axes) take the general path, which returns a fresh array.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, register, workspace_nbytes
from .ops_extra_quant import _SUPPORTED_BITS, _T1, MS, unpack_bits, unpack_bits_into

_GBQ_DATA = frozenset({TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT8E4M3FN,
                       TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ,
                       TensorProto.FLOAT4E2M1})
_GBQ_FLOAT_CODES = _GBQ_DATA - {TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4}
# workspace slots of the embedding layout
_ROWS, _STAGE, _SCALES, _ZP_ROWS, _ZP = range(5)


def _expand_blocks(x: np.ndarray, axis: int, block: int, length: int) -> np.ndarray:
    """Repeat per-block values `block` times along `axis` and cut to `length` (size-1 axes broadcast later)."""
    if x.shape[axis] == 1 and block >= length:
        return x
    return np.take(np.repeat(x, block, axis=axis), np.arange(length), axis=axis)


def _dtype_of(node: Node, index: int) -> int:
    g = node.graph
    name = node.inputs[index] if len(node.inputs) > index else ""
    return g.values[name].dtype if g is not None and name and name in g.values else 0


def _embedding_layout(node: Node, data_shape: Sequence[int] | None, data_dtype: int) -> bool:
    """uint8 data of rank 2, gather_axis 0, quantize_axis 1, whole blocks: the genai embedding layout."""
    if data_dtype != TensorProto.UINT8 or data_shape is None or len(data_shape) != 2:
        return False
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 128))
    k = int(data_shape[1]) * (8 // bits)
    return (int(node.attr("gather_axis", 0)) % 2 == 0 and int(node.attr("quantize_axis", 1)) % 2 == 1
            and block > 0 and k % block == 0)


def _slots(node: Node, data: Sequence[int], idx: Sequence[int], half: bool, zp: bool) -> list[tuple[int, int]]:
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 128))
    n = int(np.prod(idx, dtype=np.int64))
    k = int(data[1]) * (8 // bits)
    nb = k // block
    slots = [(_ROWS, workspace_nbytes((n, int(data[1])), np.uint8)), (_SCALES, workspace_nbytes((n, nb), np.float32))]
    if half:
        slots.append((_STAGE, workspace_nbytes((n, k), np.float32)))
    if zp:
        zbytes = (nb * bits + 7) // 8
        slots += [(_ZP_ROWS, workspace_nbytes((n, zbytes), np.uint8)),
                  (_ZP, workspace_nbytes((n, zbytes * (8 // bits)), np.float32))]
    return slots


@register("GatherBlockQuantized", domain=MS)
class GatherBlockQuantized(OpImpl):
    """Gather from a block-quantized table and dequantize the gathered slices: (q - zero_point) * scale.

    uint8 data packs 2/4-bit values along the last axis (low bits first; default zero point 2^(bits-1));
    int4/uint4 data has zero point 0 by default; float8/float4 data is symmetric (value * scale).
    Out-of-range indices give zeros."""

    writes_output = True  # the embedding layout (uint8, gather_axis 0, quantize_axis last)

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        data = inputs[0]
        if data.dtype and data.dtype not in _GBQ_DATA:
            return Decline(rejected=f"data dtype {dtype_name(data.dtype)}",
                           accepts="uint8 (packed 2/4/8-bit), int4, uint4, float8 variants, float4e2m1")
        if len(inputs) > 2 and inputs[2].dtype and inputs[2].dtype not in _T1:
            return Decline(rejected=f"scales dtype {dtype_name(inputs[2].dtype)}", accepts="float32, float16",
                           remedy="cast the scales to float32 (bfloat16 has no numpy type here)")
        bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 128))
        if data.dtype == TensorProto.UINT8 and bits not in _SUPPORTED_BITS:
            return Decline(rejected=f"bits={bits!r}", accepts="2, 4 or 8 for uint8 data", remedy="fix bits")
        if block != 0 and (block < 16 or block & (block - 1)):
            return Decline(rejected=f"block_size={block!r}", accepts="a power of two >= 16 (0 for float8/4 data)",
                           remedy="fix block_size")
        if block == 0 and data.dtype not in _GBQ_FLOAT_CODES:
            return Decline(rejected="block_size=0 with integer data", accepts="block_size=0 only for float8/4 data",
                           remedy="set block_size")
        if data.shape is not None:
            r = len(data.shape)
            ga, qa = int(node.attr("gather_axis", 0)), int(node.attr("quantize_axis", 1))
            if not (-r <= ga < r and -r <= qa < r):
                return Decline(rejected=f"gather_axis={ga!r}, quantize_axis={qa!r} for rank {r}",
                               accepts="axes in [-rank, rank)", remedy="fix the axes")
            if data.dtype == TensorProto.UINT8 and (ga % r != 0 or (bits < 8 and qa % r == 0)):
                return Decline(rejected=f"uint8 data with gather_axis={ga!r}, quantize_axis={qa!r}",
                               accepts="gather_axis 0 and (bits < 8) quantize_axis != 0",
                               remedy="store the table with rows along axis 0")
        return None

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        """The embedding layout's slots (gathered bytes, scales, zero points, float16 staging); [] otherwise."""
        data = input_shapes[0] if input_shapes else None
        idx = input_shapes[1] if len(input_shapes) > 1 else None
        if idx is None or not _embedding_layout(node, data, _dtype_of(node, 0)):
            return []
        zp = len(node.inputs) > 3 and bool(node.inputs[3])
        return _slots(node, data, idx, _dtype_of(node, 2) == TensorProto.FLOAT16, zp)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        data = inputs[0]
        if _embedding_layout(node, data.shape, TensorProto.UINT8 if data.dtype == np.uint8 else 0) and \
                inputs[2].dtype in (np.float32, np.float16):
            return [self._embedding(node, inputs)]
        return [self._general(node, inputs)]

    def _embedding(self, node: Node, inputs: list[np.ndarray | None]) -> np.ndarray:
        data, idx, scales = inputs[0], np.asarray(inputs[1]), inputs[2]
        zp = inputs[3] if len(inputs) > 3 else None
        bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 128))
        rows_n, packed_k = data.shape
        per = 8 // bits
        k, n = packed_k * per, idx.size
        nb = k // block
        flat = idx.reshape(-1)
        valid = (flat >= -rows_n) & (flat < rows_n)
        take = np.where(flat < 0, flat + rows_n, flat)
        take[~valid] = 0
        out = self.output(0, idx.shape + (k,), scales.dtype)
        half = scales.dtype == np.float16
        vals = self.workspace(_STAGE, (n, k), np.float32) if half else out.reshape(n, k)
        rows = self.workspace(_ROWS, (n, packed_k), np.uint8)
        np.take(data, take, axis=0, out=rows)
        if bits == 8:
            np.copyto(vals, rows)
        else:
            unpack_bits_into(rows, bits, vals.reshape(n, packed_k, per))
        q = vals.reshape(n, nb, block)
        sc = self.workspace(_SCALES, (n, nb), np.float32)
        np.copyto(sc, np.take(scales.reshape(rows_n, nb), take, axis=0))
        if zp is not None:
            zbytes = (nb * bits + 7) // 8
            zrows = self.workspace(_ZP_ROWS, (n, zbytes), np.uint8)
            np.take(zp.reshape(rows_n, zbytes), take, axis=0, out=zrows)
            z = self.workspace(_ZP, (n, zbytes * per), np.float32)
            if bits == 8:
                np.copyto(z, zrows)
            else:
                unpack_bits_into(zrows, bits, z.reshape(n, zbytes, per))
            q -= z[:, :nb, None]
        else:
            q -= np.float32(2 ** (bits - 1))
        q *= sc[:, :, None]
        if not valid.all():
            vals[~valid] = 0
        if half:
            np.copyto(out.reshape(n, k), vals, casting="same_kind")
        return out

    def _general(self, node: Node, inputs: list[np.ndarray | None]) -> np.ndarray:
        data, idx, scales = inputs[0], np.asarray(inputs[1], np.int64), inputs[2]
        zp = inputs[3] if len(inputs) > 3 else None
        bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 128))
        packed = data.dtype == np.uint8 and bits < 8
        r = data.ndim
        ga, qa = int(node.attr("gather_axis", 0)) % r, int(node.attr("quantize_axis", 1)) % r
        size = data.shape[ga]
        valid = (idx >= -size) & (idx < size)
        take = np.clip(np.where(idx < 0, idx + size, idx), 0, size - 1)
        rows = np.take(data, take, axis=ga)
        qa2 = qa + (idx.ndim - 1 if qa > ga else 0)
        if packed:
            vals = unpack_bits(rows, bits, rows.shape[-1] * (8 // bits)).astype(np.float32)
        else:
            vals = rows.astype(np.float32)
        length = vals.shape[qa2]
        block = block or length
        sc = np.take(scales, take, axis=ga) if scales.shape[ga] > 1 else np.expand_dims(
            np.take(scales, 0, axis=ga), tuple(range(ga, ga + idx.ndim)))
        sc = _expand_blocks(sc.astype(np.float32), qa2, block, length)
        if zp is not None:
            z = np.take(zp, take, axis=ga)
            z = unpack_bits(z, bits, scales.shape[-1]) if packed else z
            z = _expand_blocks(z.astype(np.float32), qa2, block, length)
        elif data.dtype == np.uint8:
            z = np.float32(2 ** (bits - 1))
        else:
            z = np.float32(0)
        out = (vals - z) * sc
        mask = valid.reshape(valid.shape + (1,) * (out.ndim - ga - valid.ndim)) if ga == 0 else np.expand_dims(
            valid, tuple(range(ga))).reshape((1,) * ga + valid.shape + (1,) * (r - ga - 1))
        out = np.where(mask, out, np.float32(0))
        return out.astype(scales.dtype)


__all__ = ["GatherBlockQuantized"]
