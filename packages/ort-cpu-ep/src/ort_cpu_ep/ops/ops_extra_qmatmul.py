"""com.microsoft DynamicQuantizeMatMul and MatMulIntegerToFloat (quantize_dynamic exports), ORT CPU semantics.

MatMulIntegerToFloat: Y = ((A - a_zero_point) @ (B - b_zero_point)) * (a_scale * b_scale) (+ bias), the
integer product exact (float64 accumulation of integers), zero points / scales per tensor or, for B, per
column. DynamicQuantizeMatMul first quantizes float A to uint8 per tensor as DynamicQuantizeLinear does
(range widened to include 0, scale = range / 255, zero point = round(-min / scale), round half to even).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, register

MS = "com.microsoft"
_I8 = frozenset({TensorProto.INT8, TensorProto.UINT8})


def dynamic_quantize_uint8(a: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """(A_q uint8, scale, zero_point) as ONNX DynamicQuantizeLinear / ORT's MLAS computes them."""
    lo = np.float32(min(0.0, float(a.min()) if a.size else 0.0))
    hi = np.float32(max(0.0, float(a.max()) if a.size else 0.0))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.uint8(np.clip(np.rint(np.float32(0) - lo / scale), 0, 255))
    q = np.clip(np.rint(a.astype(np.float32) / scale) + np.float32(zp), 0, 255).astype(np.uint8)
    return q, scale, zp


def _int_matmul(a: np.ndarray, azp: np.ndarray | float, b: np.ndarray, bzp: np.ndarray | float) -> np.ndarray:
    """(A - azp) @ (B - bzp), exact: integers accumulated in float64 (|sum| < 2^53 for any K here)."""
    return np.matmul(a.astype(np.float64) - np.asarray(azp, np.float64), b.astype(np.float64) - np.asarray(bzp, np.float64))


def _check_b_params(inputs: Sequence[InputInfo], scale_i: int, zp_i: int) -> Decline | None:
    b = inputs[1]
    for i, what in ((scale_i, "b_scale"), (zp_i, "b_zero_point")):
        if i < len(inputs) and inputs[i].present and inputs[i].shape is not None and len(inputs[i].shape) > 1:
            return Decline(rejected=f"{what} of rank {len(inputs[i].shape)}",
                           accepts=f"{what} scalar or 1-D per column", remedy="reshape it to 1-D")
    if b.shape is not None and len(b.shape) != 2:
        return Decline(rejected=f"B rank {len(b.shape)}", accepts="2-D B (K, N)", remedy="reshape B to 2-D")
    return None


@register("MatMulIntegerToFloat", domain=MS)
class MatMulIntegerToFloat(OpImpl):
    """(A - a_zp) @ (B - b_zp) * a_scale * b_scale + bias, in the scales' float type."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        for i in (0, 1):
            if inputs[i].dtype and inputs[i].dtype not in _I8:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="int8, uint8")
        if inputs[2].dtype and inputs[2].dtype not in (TensorProto.FLOAT, TensorProto.FLOAT16):
            return Decline(rejected=f"a_scale dtype {dtype_name(inputs[2].dtype)}", accepts="float32, float16")
        for i, what in ((2, "a_scale"), (4, "a_zero_point")):
            if i < len(inputs) and inputs[i].present and inputs[i].shape is not None and \
                    int(np.prod([d if isinstance(d, int) else 2 for d in inputs[i].shape])) != 1:
                return Decline(rejected=f"{what} shape {inputs[i].shape!r} (per-column A quantization)",
                               accepts=f"scalar {what}", remedy="quantize A per tensor")
        return _check_b_params(inputs, 3, 5)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a, b, a_scale, b_scale = inputs[0], inputs[1], inputs[2], inputs[3]
        azp = inputs[4] if len(inputs) > 4 and inputs[4] is not None else np.zeros((), a.dtype)
        bzp = inputs[5] if len(inputs) > 5 and inputs[5] is not None else np.zeros((), b.dtype)
        bias = inputs[6] if len(inputs) > 6 else None
        acc = _int_matmul(a, np.asarray(azp).reshape(()), b, bzp)
        mult = np.float32(np.asarray(a_scale, np.float32).reshape(())) * np.asarray(b_scale, np.float32)
        y = acc.astype(np.float32) * mult
        if bias is not None:
            y = y + bias.astype(np.float32)
        return [y.astype(a_scale.dtype)]


@register("DynamicQuantizeMatMul", domain=MS)
class DynamicQuantizeMatMul(OpImpl):
    """Quantize float A to uint8 per tensor, then MatMulIntegerToFloat with B, b_scale, b_zero_point, bias."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        if inputs[0].dtype and inputs[0].dtype != TensorProto.FLOAT:
            return Decline(rejected=f"A dtype {dtype_name(inputs[0].dtype)}", accepts="float32")
        if inputs[1].dtype and inputs[1].dtype not in _I8:
            return Decline(rejected=f"B dtype {dtype_name(inputs[1].dtype)}", accepts="int8, uint8")
        return _check_b_params(inputs, 2, 3)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a, b, b_scale = inputs[0], inputs[1], inputs[2]
        bzp = inputs[3] if len(inputs) > 3 and inputs[3] is not None else np.zeros((), b.dtype)
        bias = inputs[4] if len(inputs) > 4 else None
        q, scale, zp = dynamic_quantize_uint8(a)
        acc = _int_matmul(q, zp, b, bzp)
        y = acc.astype(np.float32) * (scale * np.asarray(b_scale, np.float32))
        if bias is not None:
            y = y + bias.astype(np.float32)
        return [y.astype(np.float32)]


__all__ = ["DynamicQuantizeMatMul", "MatMulIntegerToFloat", "dynamic_quantize_uint8"]
