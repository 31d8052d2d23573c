"""QuantizeLinear / DequantizeLinear (ONNX and com.microsoft) in the common case, into the output block: float32
values and scales, 8/16-bit integers. Quantize keeps x / scale in a declared float32 slot (x's size) and
saturates with fmax / fmin (NaN to the low end, infinities to the ends); Dequantize needs no temporary
((q - zero_point) is exact in float32, then times the scale). Other forms (float8/4, int4/2, int32,
float16/bfloat16, `precision`) take the callers' general paths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._registry import OpImpl, workspace_nbytes

_INTS = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16))


def quantize_into(impl: OpImpl, x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, dtype: np.dtype) -> np.ndarray | None:
    """saturate(rint(x / scale) + zp) into output 0, or None when this is not the common case. `scale` and `zp`
    are already shaped to broadcast over x."""
    dtype = np.dtype(dtype)
    if x.dtype != np.float32 or scale.dtype != np.float32 or dtype not in _INTS:
        return None
    info = np.iinfo(dtype)
    out = impl.output(0, x.shape, dtype)
    v = impl.workspace(0, x.shape, np.float32)
    np.divide(x, scale, out=v)
    np.rint(v, out=v)
    if zp is not None:
        np.add(v, zp, out=v, casting="unsafe")
    np.fmax(v, np.float32(info.min), out=v)
    np.fmin(v, np.float32(info.max), out=v)
    np.copyto(out, v, casting="unsafe")
    return out


def dequantize_into(impl: OpImpl, x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None) -> np.ndarray | None:
    """(x - zp) * scale into a float32 output 0, or None when this is not the common case."""
    if x.dtype not in _INTS or scale.dtype != np.float32:
        return None
    out = impl.output(0, x.shape, np.float32)
    np.subtract(x, np.float32(0) if zp is None else zp, out=out, dtype=np.float32, casting="unsafe")
    out *= scale
    return out


def dequantize_fast(node) -> bool:
    """Whether the graph's dtypes make a DequantizeLinear node the common case (8/16-bit to float32)."""
    from onnx import TensorProto as T

    g = node.graph
    dts = [g.values[n].dtype if g is not None and n in g.values else 0 for n in node.inputs[:2]]
    return (dts[0] in (T.INT8, T.UINT8, T.INT16, T.UINT16) and len(dts) > 1 and dts[1] == T.FLOAT
            and node.attr("output_dtype", 0) in (0, T.FLOAT) and not node.attr("block_size", 0))


def quantize_slots(x: Sequence[int] | None) -> list[tuple[int, int]]:
    return [] if x is None else [(0, workspace_nbytes(x, np.float32))]


__all__ = ["dequantize_fast", "dequantize_into", "quantize_into", "quantize_slots"]
