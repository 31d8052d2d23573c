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

from ._int_matmul import A_SLOT, STAGE_SLOT, band_cols, int_matmul_into, int_matmul_slots, rows
from ._registry import Decline, InputInfo, OpImpl, register, workspace_nbytes
from ._util import out_dtype

MS = "com.microsoft"
_I8 = frozenset({TensorProto.INT8, TensorProto.UINT8})


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
    writes_output = True
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

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return _slots(node, input_shapes, out_dtype(node) == TensorProto.FLOAT16)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a, b, a_scale, b_scale = inputs[0], inputs[1], inputs[2], inputs[3]
        azp = inputs[4] if len(inputs) > 4 and inputs[4] is not None else np.zeros((), a.dtype)
        bias = inputs[6] if len(inputs) > 6 else None
        mult = np.float32(np.asarray(a_scale, np.float32).reshape(())) * np.asarray(b_scale, np.float32)
        return [_scaled_matmul(self, a, np.asarray(azp).reshape(()), b, inputs[5] if len(inputs) > 5 else None, mult,
                               bias, a_scale.dtype)]


@register("DynamicQuantizeMatMul", domain=MS)
class DynamicQuantizeMatMul(OpImpl):
    writes_output = True
    """Quantize float A to uint8 per tensor, then MatMulIntegerToFloat with B, b_scale, b_zero_point, bias."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        if inputs[0].dtype and inputs[0].dtype != TensorProto.FLOAT:
            return Decline(rejected=f"A dtype {dtype_name(inputs[0].dtype)}", accepts="float32")
        if inputs[1].dtype and inputs[1].dtype not in _I8:
            return Decline(rejected=f"B dtype {dtype_name(inputs[1].dtype)}", accepts="int8, uint8")
        return _check_b_params(inputs, 2, 3)

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        a = input_shapes[0] if input_shapes else None
        m, k = rows(a), (a[-1] if a else None)
        extra = [] if m is None else [(_QA_SLOT, workspace_nbytes((m, k), np.float32))]
        return _slots(node, input_shapes, False) + extra

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a, b, b_scale = inputs[0], inputs[1], inputs[2]
        bzp = inputs[3] if len(inputs) > 3 else None
        bias = inputs[4] if len(inputs) > 4 else None
        k = a.shape[-1] if a.ndim else 1
        a2 = a.reshape(-1, k)
        scale, zp = dynamic_params(a2)
        # A quantized in float32 steps as MLAS does, then less its zero point, in slot 0
        q = self.workspace(_QA_SLOT, a2.shape, np.float32)
        np.divide(a2, scale, out=q)
        np.rint(q, out=q)
        q += np.float32(zp)
        np.clip(q, 0, 255, out=q)
        ready = self.workspace(A_SLOT, a2.shape, np.float64)
        np.subtract(q, np.float64(zp), out=ready)
        return [_scaled_matmul(self, a, zp, b, bzp, scale * np.asarray(b_scale, np.float32), bias, np.dtype(np.float32),
                               ready=ready)]


def dynamic_params(a: np.ndarray) -> tuple[np.float32, np.uint8]:
    """(scale, zero_point) of A's per-tensor uint8 quantization as ORT's MLAS computes them (scale 1 for a
    constant A)."""
    lo = np.float32(min(0.0, float(a.min()) if a.size else 0.0))
    hi = np.float32(max(0.0, float(a.max()) if a.size else 0.0))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    return scale, np.uint8(np.clip(np.rint(np.float32(0) - lo / scale), 0, 255))


_QA_SLOT = 4  # DynamicQuantizeMatMul: A quantized, float32 (M, K)


def _slots(node: Node, input_shapes: Sequence[tuple[int, ...] | None], stage: bool) -> list[tuple[int, int]]:
    a = input_shapes[0] if input_shapes else None
    b = input_shapes[1] if len(input_shapes) > 1 else None
    if a is None or b is None or len(a) < 1 or len(b) != 2:
        return []
    return int_matmul_slots(rows(a), int(b[0]), int(b[1]), stage)


def _scaled_matmul(impl: OpImpl, a: np.ndarray, azp, b: np.ndarray, bzp: np.ndarray | None, mult: np.ndarray,
                   bias: np.ndarray | None, dtype: np.dtype, ready: np.ndarray | None = None) -> np.ndarray:
    """float32((A - azp) @ (B - bzp)) * mult (+ bias), written into the output block in `dtype` (float32, or
    float16 rounded from a float32 band in slot 3)."""
    k, n = b.shape
    out = impl.output(0, a.shape[:-1] + (n,), dtype)
    y = out.reshape(-1, n)
    half = out.dtype != np.float32
    mult = np.asarray(mult, np.float32)

    def finish(acc: np.ndarray, j0: int, j1: int) -> None:
        band = impl.workspace(STAGE_SLOT, (y.shape[0], band_cols(k, n)), np.float32)[:, : j1 - j0] if half else y[:, j0:j1]
        np.copyto(band, acc, casting="unsafe")
        band *= mult if mult.size == 1 else mult.reshape(-1)[j0:j1]
        if bias is not None:
            band += bias.astype(np.float32, copy=False).reshape(-1)[j0:j1]
        if half:
            np.copyto(y[:, j0:j1], band, casting="unsafe")

    int_matmul_into(impl, a.reshape(-1, k), azp, b, bzp, finish, a_ready=ready)
    return out


__all__ = ["DynamicQuantizeMatMul", "MatMulIntegerToFloat", "dynamic_params"]
