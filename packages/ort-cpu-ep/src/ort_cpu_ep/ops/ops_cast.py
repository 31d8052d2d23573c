"""Cast, CastLike and Constant."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto as T
from onnx import numpy_helper

from ort_graph import dtype_name, sparse_to_numpy

from ._registry import Decline, OpImpl, register
from ._util import ANY, check_dtype, decline_attr, np_dtype

_F8 = {getattr(T, n) for n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ") if hasattr(T, n)}
_E8M0 = getattr(T, "FLOAT8E8M0", -100)
_SMALL_INT = {getattr(T, n) for n in ("INT4", "UINT4", "INT2", "UINT2") if hasattr(T, n)}


def cast_array(x: np.ndarray, to: int, saturate: bool = True) -> np.ndarray:
    """Cast `x` to ONNX element type `to` with ONNX Cast semantics."""
    dst = np_dtype(to)
    if x.dtype == dst:
        return x.copy()
    if to == T.STRING:
        if x.dtype == bool:
            return np.vectorize(lambda v: "1" if v else "0", otypes=[object])(x).astype(object)
        if x.dtype.kind == "f" or x.dtype.kind == "V" or x.dtype.name.startswith(("bfloat", "float")):
            xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
            return xf.astype(np.str_).astype(object)
        return x.astype(np.str_).astype(object)
    if x.dtype == object:  # strings to numbers
        if dst.kind in "iu":  # exact for integers beyond 2**53
            return np.array([_parse_int(str(v)) for v in x.reshape(-1)], dtype=dst).reshape(x.shape)
        floats = np.array([float(str(v)) for v in x.reshape(-1)], dtype=np.float64).reshape(x.shape)
        if to == T.BOOL:
            return floats != 0
        return cast_array(floats, to, saturate)
    if to == T.BOOL:
        return x.astype(np.float32) != 0 if x.dtype.itemsize < 2 and x.dtype.kind not in "biu" else x != 0
    src = x
    if to in _F8 or to == getattr(T, "FLOAT4E2M1", -100):
        src = x.astype(np.float32)
        if saturate:
            m = float(ml_dtypes.finfo(dst).max)
            src = np.where(np.isnan(src), src, np.clip(src, -m, m))
        return src.astype(dst)
    if to == _E8M0:
        return _to_e8m0(x, saturate)
    if to in _SMALL_INT:  # wraps like a C integer conversion (ml_dtypes semantics)
        return x.astype(np.float32 if x.dtype.kind == "f" else x.dtype).astype(dst)
    if x.dtype.kind not in "biuf" or x.dtype.itemsize < 2 and x.dtype.kind == "f":
        src = x.astype(np.float32)
    return src.astype(dst)


def _parse_int(s: str) -> int:
    try:
        return int(s.strip())
    except ValueError:
        return int(float(s))


def _to_e8m0(x: np.ndarray, saturate: bool) -> np.ndarray:
    """float -> FLOAT8E8M0 with round_mode='up': keep the exponent, round up any fraction."""
    bits = x.astype(np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exp == 0xFF
    up = ((bits & 0x7FFFFF) > 0) & ~special
    if saturate:
        up &= exp != 0xFE
    exp = exp + up.astype(np.uint16)
    exp = np.where(special, 0xFF, exp).astype(np.uint8)
    return exp.view(np_dtype(_E8M0))


class _CastBase(OpImpl):
    def _check(self, node, inputs, to):
        d = check_dtype(inputs, 0, ANY)
        if d:
            return d
        if to not in ANY:
            return Decline(rejected=f"target type {dtype_name(to)}", accepts="numeric, bool, string, float8/4, int4")
        if to == _E8M0 and node.attr("round_mode", "up") != "up":
            return decline_attr("round_mode", node.attr("round_mode"), "'up' for FLOAT8E8M0")
        if inputs and inputs[0].dtype == T.STRING and to not in ANY - {T.STRING} | {T.STRING}:
            return Decline(rejected=f"string to {dtype_name(to)}", accepts="numeric targets")
        return None


def _to(node) -> int:
    """The `to` attribute as an element type (Cast-1 spells it as a name such as 'FLOAT')."""
    to = node.attr("to", 0)
    if isinstance(to, str):
        try:
            return int(T.DataType.Value(to.upper()))
        except ValueError:
            return 0
    return int(to)


@register("Cast", since=1)
class Cast(_CastBase):
    writes_output = True  # between bool, integer and 16/32/64-bit float types; the others cast through float32

    def supports(self, node, inputs, opset):
        return self._check(node, inputs, _to(node))

    def compute(self, node, inputs):
        to = _to(node)
        return self._cast(node, inputs[0], to, np_dtype(to) if to in _PLAIN_TYPES else None)

    def bind(self, node, opset):
        to = _to(node)  # the target type read once per node (it never raises: a bad name is 0, declined at claim)
        dst = np_dtype(to) if to in _PLAIN_TYPES else None
        return lambda inputs: self._cast(node, inputs[0], to, dst)

    def _cast(self, node, x, to: int, dst: np.dtype | None) -> list:
        """`x` cast to element type `to`; `dst`: its numpy dtype when numpy converts to it as Cast does."""
        if dst is not None and (_plain(x.dtype) or (x.dtype == _BF16 and to in (T.FLOAT, T.DOUBLE))):
            out = self.output(0, x.shape, dst)
            if to == T.BOOL:
                np.not_equal(x, 0, out=out)
            else:
                np.copyto(out, x, casting="unsafe")  # a C conversion, as astype
            return [out]
        return [cast_array(x, to, bool(node.attr("saturate", 1)))]


_PLAIN_TYPES = frozenset({T.BOOL, T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64, T.FLOAT16,
                          T.FLOAT, T.DOUBLE})
_BF16 = np.dtype(ml_dtypes.bfloat16)


def _plain(dtype: np.dtype) -> bool:
    """bool, integers, float16/32/64: numpy casts between them as ONNX Cast does."""
    found = _PLAIN_DTYPES.get(dtype)
    if found is None:
        found = _PLAIN_DTYPES[dtype] = dtype.kind in "biu" or dtype in (np.float16, np.float32, np.float64)
    return found


_PLAIN_DTYPES: dict[np.dtype, bool] = {}  # dtype -> _plain (comparing a dtype with three types costs per node)


@register("CastLike", since=15)
class CastLike(_CastBase):
    def supports(self, node, inputs, opset):
        to = inputs[1].dtype if len(inputs) > 1 else 0
        if not to:
            return Decline(rejected="input 1 of unknown dtype", accepts="a typed target_type input",
                           remedy="run shape inference on the model first")
        return self._check(node, inputs, to)

    def compute(self, node, inputs):
        from ort_graph import from_numpy_dtype

        return [cast_array(inputs[0], from_numpy_dtype(inputs[1].dtype), bool(node.attr("saturate", 1)))]


@register("Constant", since=1)
class Constant(OpImpl):
    def compute(self, node, inputs):
        for name, a in node.attributes.items():
            v = a.value
            if name == "value":
                return [numpy_helper.to_array(v)]
            if name == "sparse_value":
                return [sparse_to_numpy(v, f"the sparse_value of Constant node {node.name!r}")]
            if name == "value_float":
                return [np.array(v, dtype=np.float32)]
            if name == "value_floats":
                return [np.array(v, dtype=np.float32)]
            if name == "value_int":
                return [np.array(v, dtype=np.int64)]
            if name == "value_ints":
                return [np.array(v, dtype=np.int64)]
            if name == "value_string":
                return [np.array(v, dtype=object)]
            if name == "value_strings":
                return [np.array(v, dtype=object)]
        raise ValueError(f"Constant node {node.name!r} has no value attribute")

    def supports(self, node, inputs, opset):
        keys = set(node.attributes) & {"value", "sparse_value", "value_float", "value_floats", "value_int",
                                       "value_ints", "value_string", "value_strings"}
        if len(keys) != 1:
            return Decline(rejected=f"attributes {sorted(node.attributes)!r}", accepts="exactly one value* attribute",
                           remedy="fix the Constant node")
        return None
