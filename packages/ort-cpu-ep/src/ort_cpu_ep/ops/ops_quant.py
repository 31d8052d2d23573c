"""Quantization: QuantizeLinear, DequantizeLinear (per-tensor, per-axis, blocked; int8/16/4/2, float8/4),
ConvInteger, QLinearConv (DynamicQuantizeLinear, MatMulInteger, QLinearMatMul: ops_quant_matmul)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto as T

from ort_graph import dtype_name, from_numpy_dtype

from ._qdq_into import dequantize_fast, dequantize_into, quantize_into, quantize_slots
from ._registry import Decline, OpImpl, register, workspace_nbytes
from ._util import check_dtype, norm_axis, np_dtype

_INT_RANGES = {T.UINT8: (0, 255), T.INT8: (-128, 127), T.UINT16: (0, 65535), T.INT16: (-32768, 32767),
               T.UINT4: (0, 15), T.INT4: (-8, 7)}
for _n, _r in (("UINT2", (0, 3)), ("INT2", (-2, 1))):
    if hasattr(T, _n):
        _INT_RANGES[getattr(T, _n)] = _r
_F8 = {T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ}
_F4 = {T.FLOAT4E2M1}
_QTYPES = set(_INT_RANGES) | _F8 | _F4
_SCALE_TYPES = {T.FLOAT, T.FLOAT16, T.BFLOAT16, T.DOUBLE, getattr(T, "FLOAT8E8M0", T.FLOAT), T.INT32}


def _plain(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays as float32 / int32 so numpy arithmetic works on them."""
    if a.dtype.kind == "V" or a.dtype.name.startswith(("float8", "float4", "bfloat", "int4", "uint4", "int2",
                                                         "uint2")):
        return a.astype(np.int32 if "int" in a.dtype.name else np.float32)
    return a


def _along(p: np.ndarray, shape: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """Broadcastable view of a scale / zero point over an input of `shape`."""
    if p.size == 1 and (p.ndim <= 1 or block == 0):
        return p.reshape(())
    axis = norm_axis(axis, len(shape))
    if block:
        return np.repeat(p, block, axis=axis)[tuple(slice(0, d) for d in shape)]
    return p.reshape([-1 if i == axis else 1 for i in range(len(shape))])


def _qtype(node, inputs_dtype_zp: int) -> int:
    return inputs_dtype_zp or node.attr("output_dtype", 0) or T.UINT8


@register("QuantizeLinear", since=10)
class QuantizeLinear(OpImpl):
    writes_output = True  # float32 to 8/16-bit
    def supports(self, node, inputs, opset):
        d = check_dtype(inputs, 0, {T.FLOAT, T.FLOAT16, T.BFLOAT16, T.INT32}) or check_dtype(inputs, 1, _SCALE_TYPES)
        if d:
            return d
        zp = inputs[2].dtype if len(inputs) > 2 and inputs[2].present else 0
        qt = _qtype(node, zp)
        if qt not in _QTYPES:
            return Decline(rejected=f"quantized type {dtype_name(qt)}", accepts="int8/16, uint8/16, int4/2, float8, float4")
        p = node.attr("precision", 0)
        if p and p not in (T.FLOAT, T.FLOAT16, T.BFLOAT16, T.DOUBLE):
            return Decline(rejected=f"precision {dtype_name(p)}", accepts="FLOAT, FLOAT16, BFLOAT16, DOUBLE")
        return None

    def workspace_bytes(self, node, input_shapes):
        return quantize_slots(input_shapes[0] if input_shapes else None)

    def compute(self, node, inputs):
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else None
        axis, block = node.attr("axis", 1), node.attr("block_size", 0)
        qt = _qtype(node, from_numpy_dtype(zp.dtype) if zp is not None else 0)
        s = _along(_plain(scale), x.shape, axis, block)
        prec = node.attr("precision", 0)
        if not prec and qt in _INT_RANGES:
            into = quantize_into(self, x, s, None if zp is None else _along(zp, x.shape, axis, block), np_dtype(qt))
            if into is not None:
                return [into]
        xv = _plain(x)
        if prec:
            pd = np_dtype(prec)
            v = xv.astype(pd) / s.astype(pd)
        else:
            v = xv / s
        dst = np_dtype(qt)
        if qt in _INT_RANGES:
            q = np.rint(v.astype(np.float64) if v.dtype.kind != "f" or v.dtype.itemsize < 4 else v).astype(np.int64)
            if zp is not None:
                q = q + _along(_plain(zp).astype(np.int64), x.shape, axis, block)
            lo, hi = _INT_RANGES[qt]
            return [np.clip(q, lo, hi).astype(dst)]
        v = v.astype(np.float32)
        if qt in _F8:
            if node.attr("saturate", 1):
                m = float(ml_dtypes.finfo(dst).max)
                v = np.where(np.isnan(v), v, np.clip(v, -m, m))
            return [v.astype(dst)]
        if zp is not None:
            v = v + _along(_plain(zp), x.shape, axis, block)
        return [v.astype(dst)]


@register("DequantizeLinear", since=10)
class DequantizeLinear(OpImpl):
    writes_output = True  # 8/16-bit to float32
    def supports(self, node, inputs, opset):
        d = check_dtype(inputs, 0, _QTYPES | {T.INT32}) or check_dtype(inputs, 1, _SCALE_TYPES - {T.INT32})
        if d:
            return d
        od = node.attr("output_dtype", 0)
        if od and od not in (T.FLOAT, T.FLOAT16, T.BFLOAT16):
            return Decline(rejected=f"output_dtype {dtype_name(od)}", accepts="FLOAT, FLOAT16, BFLOAT16")
        return None

    def workspace_bytes(self, node, input_shapes):
        """None in the common case (into the block); else the general path's temporaries (an int64 difference
        and a float32 product of x's size), reserved so the estimate covers them."""
        x = input_shapes[0] if input_shapes else None
        if x is None or dequantize_fast(node):
            return []
        return [(0, 12 * int(np.prod(x, dtype=np.int64)))]

    def compute(self, node, inputs):
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else None
        axis, block = node.attr("axis", 1), node.attr("block_size", 0)
        od = node.attr("output_dtype", 0)
        if od in (0, T.FLOAT):
            into = dequantize_into(self, x, _along(scale, x.shape, axis, block),
                                   None if zp is None else _along(zp, x.shape, axis, block))
            if into is not None:
                return [into]
        out_dt = np_dtype(od) if od else (scale.dtype if scale.dtype.name != "float8_e8m0fnu" else np.dtype(np.float32))
        xv = _plain(x)
        if zp is not None:
            zv = _along(_plain(zp), x.shape, axis, block)
            xv = (xv.astype(np.int64) - zv.astype(np.int64)) if xv.dtype.kind in "iu" else xv - zv
        s = _along(_plain(scale), x.shape, axis, block)
        y = xv.astype(np.float32) * s.astype(np.float32)
        return [np.asarray(y).astype(out_dt)]


def _sub_zp(a: np.ndarray, zp: np.ndarray | None, axis_for_vector: int) -> np.ndarray:
    av = _plain(a).astype(np.int64) if a.dtype.kind in "iu" else _plain(a).astype(np.float64)
    if zp is None:
        return av
    z = _plain(zp).astype(av.dtype)
    if z.ndim == 1 and z.size > 1:
        shape = [1] * av.ndim
        shape[axis_for_vector] = -1
        z = z.reshape(shape)
    return av - z


def _requant(acc: np.ndarray, mult: np.ndarray, yzp: np.ndarray | None, ydt: np.dtype) -> np.ndarray:
    v = acc.astype(np.float64) * mult
    t = from_numpy_dtype(ydt)
    if t in _INT_RANGES:
        q = np.rint(v)
        if yzp is not None:
            q = q + _plain(yzp).astype(np.float64)
        lo, hi = _INT_RANGES[t]
        return np.clip(q, lo, hi).astype(ydt)
    if yzp is not None:
        v = v + _plain(yzp).astype(np.float64)
    m = float(ml_dtypes.finfo(ydt).max)
    return np.clip(v, -m, m).astype(np.float32).astype(ydt)


_XV, _WV, _COLS, _ROWS, _ACC = range(5)  # the integer convolutions' float64 slots


def _zp_along(zp, ndim: int, axis: int) -> np.ndarray:
    """A zero point as float64, per tensor or per channel along `axis`."""
    if zp is None:
        return np.zeros((), np.float64)
    z = _plain(np.asarray(zp)).astype(np.float64)
    if z.size == 1:
        return z.reshape(())
    return z.reshape([-1 if i == axis else 1 for i in range(ndim)])


def _int_conv(impl: OpImpl, x: np.ndarray, w: np.ndarray, xzp, wzp, node) -> np.ndarray:
    """(x - x_zp) * (w - w_zp) convolved exactly in float64, rounded, in the declared slots 0-4: the two
    differences, the im2col rows, the GEMM result and the (N, M, *out) accumulator returned."""
    from .ops_conv import _geometry, conv

    xv = impl.workspace(_XV, x.shape, np.float64)
    np.subtract(x, _zp_along(xzp, x.ndim, 1), out=xv)
    wv = impl.workspace(_WV, w.shape, np.float64)
    np.subtract(w, _zp_along(wzp, w.ndim, 0), out=wv)
    outs = _geometry(node, x.shape, w.shape)[4]
    acc = impl.workspace(_ACC, (x.shape[0], w.shape[0], *outs), np.float64)
    conv(xv, wv, None, node, scratch=lambda nbytes: impl.scratch(_COLS, nbytes),
         rows_scratch=lambda shape, dt: impl.workspace(_ROWS, shape, dt), out=acc)
    return np.rint(acc, out=acc)


def _int_conv_slots(node, input_shapes) -> list[tuple[int, int]]:
    from .ops_conv import _geometry, im2col_bytes

    xs = input_shapes[0] if input_shapes else None
    ws = input_shapes[1] if len(input_shapes) > 1 else None
    if node.op_type == "QLinearConv":
        ws = input_shapes[3] if len(input_shapes) > 3 else None
    if not xs or not ws or any(not isinstance(d, int) for d in list(xs) + list(ws)) or len(xs) < 3:
        return []
    outs = _geometry(node, xs, ws)[4]
    n = xs[0] * int(np.prod(outs, dtype=np.int64))
    return [(_XV, workspace_nbytes(xs, np.float64)), (_WV, workspace_nbytes(ws, np.float64)),
            (_COLS, im2col_bytes(xs, ws, node, np.dtype(np.float64))), (_ROWS, workspace_nbytes((n, ws[0]), np.float64)),
            (_ACC, workspace_nbytes((xs[0], ws[0], *outs), np.float64))]


@register("ConvInteger", since=10)
class ConvInteger(OpImpl):
    writes_output = True

    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, {T.INT8, T.UINT8}) or check_dtype(inputs, 1, {T.INT8, T.UINT8})

    def workspace_bytes(self, node, input_shapes):
        return _int_conv_slots(node, input_shapes)

    def compute(self, node, inputs):
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        acc = _int_conv(self, inputs[0], inputs[1], get(2), get(3), node)
        out = self.output(0, acc.shape, np.int32)
        np.copyto(out, acc, casting="unsafe")
        return [out]


@register("QLinearConv", since=10)
class QLinearConv(OpImpl):
    writes_output = True

    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, {T.INT8, T.UINT8}) or check_dtype(inputs, 3, {T.INT8, T.UINT8})

    def workspace_bytes(self, node, input_shapes):
        return _int_conv_slots(node, input_shapes)

    def compute(self, node, inputs):
        x, xs, xzp, w, ws, wzp, ys, yzp = inputs[:8]
        bias = inputs[8] if len(inputs) > 8 else None
        acc = _int_conv(self, x, w, xzp, wzp, node)
        per_channel = (1, -1) + (1,) * (x.ndim - 2)
        if bias is not None:
            acc += bias.astype(np.float64).reshape(per_channel)  # int32: exact in float64
        wsc = _plain(ws).astype(np.float64)
        if wsc.ndim == 1 and wsc.size > 1:
            wsc = wsc.reshape(per_channel)
        acc *= _plain(xs).astype(np.float64) * wsc / _plain(ys).astype(np.float64)
        ydt = yzp.dtype if yzp is not None else x.dtype
        lo, hi = _INT_RANGES[from_numpy_dtype(ydt)]
        np.rint(acc, out=acc)
        if yzp is not None:
            acc += _plain(yzp).astype(np.float64)
        np.clip(acc, lo, hi, out=acc)
        out = self.output(0, acc.shape, ydt)
        np.copyto(out, acc, casting="unsafe")
        return [out]
