"""Element-wise unary math and activation functions (float math in float32 for 16-bit types)."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from ._registry import OpImpl, register, workspace_nbytes
from ._util import (
    FLOATS_BF,
    NUMERIC_BF,
    SINT,
    check_all,
    check_dtype,
    decline_attr,
    first_version,
    is_lowp,
    np_dtype,
    out_dtype,
    upcast,
    write_output,
)


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorized erf: exact (math.erf) for float64, series + Abramowitz-Stegun 7.1.26 otherwise."""
    if x.dtype == np.float64:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)
    xf = x.astype(np.float64)
    ax = np.abs(xf)
    x2 = xf * xf
    series = 2 / math.sqrt(math.pi) * xf * (1 - x2 / 3 + x2**2 / 10 - x2**3 / 42 + x2**4 / 216 - x2**5 / 1320
                                            + x2**6 / 9360)
    t = 1.0 / (1.0 + 0.3275911 * ax)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    tail = np.sign(xf) * (1.0 - poly * np.exp(-x2))
    return np.where(ax < 0.5, series, tail).astype(x.dtype)


class _Unary(OpImpl):
    allowed = FLOATS_BF

    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, self.allowed)

    def fn(self, node, x):
        raise NotImplementedError

    ufunc: np.ufunc | None = None  # set: computed straight into the output block (16-bit floats excepted)

    def compute(self, node, inputs):
        x = inputs[0]
        with np.errstate(all="ignore"):
            if self.ufunc is not None and not is_lowp(x):
                out = self.output(0, x.shape, x.dtype)
                self.ufunc(x, out=out, casting="unsafe")
                return [out]
            return [np.asarray(self.fn(node, upcast(x))).astype(x.dtype, copy=False)]


def _unary(name: str, f, since: int | None = None, allowed=FLOATS_BF) -> None:
    into = {"ufunc": f, "writes_output": True} if isinstance(f, np.ufunc) else {}
    register(name, since=since or first_version(name))(type(name, (_Unary,), {"fn": lambda self, node, x: f(x), "allowed": allowed,
                                                                          **into}))


SIGMOID_CHUNK = 16384  # float32 elements per pass of a 16-bit Sigmoid (its declared workspace, 64 KiB)


def sigmoid_into(x: np.ndarray, out: np.ndarray) -> None:
    """out = 1 / (1 + exp(-x)) in four passes over `out` (which may be `x` itself) and no temporary:
    exp(-x) overflows to inf for x < -88 (float32) and 1 / inf is the exact limit 0, so the plain form is
    stable once overflow (and underflow) is not reported; subnormal results keep their relative accuracy."""
    with np.errstate(over="ignore", under="ignore"):
        np.negative(x, out=out)
        np.exp(out, out=out)
        np.add(out, 1, out=out)
        np.reciprocal(out, out=out)


for _n, _f in [("Sqrt", np.sqrt), ("Exp", np.exp), ("Log", np.log), ("Ceil", np.ceil), ("Floor", np.floor),
               ("Reciprocal", np.reciprocal), ("Tanh", np.tanh), ("Sin", np.sin), ("Cos", np.cos), ("Tan", np.tan),
               ("Asin", np.arcsin), ("Acos", np.arccos), ("Atan", np.arctan), ("Sinh", np.sinh), ("Cosh", np.cosh),
               ("Asinh", np.arcsinh), ("Acosh", np.arccosh), ("Atanh", np.arctanh), ("Round", np.round),
               ("Erf", erf), ("Softsign", lambda x: x / (1 + np.abs(x))),
               ("Softplus", lambda x: np.logaddexp(0, x)),
               ("Mish", lambda x: x * np.tanh(np.logaddexp(0, x))),
               ("HardSwish", lambda x: x * np.clip(x / 6 + 0.5, 0, 1))]:
    _unary(_n, _f)


@register("Sigmoid", since=first_version("Sigmoid"))
class Sigmoid(_Unary):
    """Computed in its output block (`sigmoid_into`); float16 / bfloat16 (the graph's output type) in float32
    chunks of `SIGMOID_CHUNK` elements in workspace slot 0, rounded into the block; other 16-bit floats in
    float32 through `fn`."""

    writes_output = True

    def fn(self, node, x):
        out = np.empty_like(x)
        sigmoid_into(x, out)
        return out

    def workspace_bytes(self, node, input_shapes):
        shape = input_shapes[0] if input_shapes else None
        if shape is None or out_dtype(node) not in (T.FLOAT16, T.BFLOAT16):
            return []
        return [(0, workspace_nbytes((min(int(np.prod(shape, dtype=np.int64)), SIGMOID_CHUNK),), np.float32))]

    def compute(self, node, inputs):
        x = inputs[0]
        if is_lowp(x) and out_dtype(node) in (T.FLOAT16, T.BFLOAT16) and np_dtype(out_dtype(node)) == x.dtype:
            out = self.output(0, x.shape, x.dtype)
            flat_x, flat_y = np.ascontiguousarray(x).reshape(-1), out.reshape(-1)
            tmp = self.workspace(0, (min(flat_x.size, SIGMOID_CHUNK),), np.float32)
            for start in range(0, flat_x.size, SIGMOID_CHUNK):
                t = tmp[:min(SIGMOID_CHUNK, flat_x.size - start)]
                np.copyto(t, flat_x[start:start + t.size])
                sigmoid_into(t, t)
                np.copyto(flat_y[start:start + t.size], t, casting="same_kind")
            return [out]
        if is_lowp(x):
            return super().compute(node, inputs)
        out = self.output(0, x.shape, x.dtype)
        sigmoid_into(x, out)
        return [out]


_unary("Abs", np.abs, allowed=NUMERIC_BF)
_unary("Neg", np.negative, allowed=SINT | FLOATS_BF)
_unary("Sign", np.sign, allowed=NUMERIC_BF)
_unary("Relu", lambda x: np.maximum(x, 0).astype(x.dtype), allowed=SINT | FLOATS_BF)


class _Alpha(_Unary):
    defaults: dict = {}

    def fn(self, node, x):
        a = {k: float(node.attr(k, v)) for k, v in self.defaults.items()}
        return self.f(x, **a)


def _alpha(name: str, f, defaults: dict, since: int | None = None) -> None:
    register(name, since=since or first_version(name))(type(name, (_Alpha,), {"f": staticmethod(f), "defaults": defaults}))


_alpha("LeakyRelu", lambda x, alpha: np.where(x >= 0, x, alpha * x), {"alpha": 0.01})
_alpha("Elu", lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))), {"alpha": 1.0})
_alpha("Celu", lambda x, alpha: np.maximum(0, x) + np.minimum(0, alpha * np.expm1(np.minimum(x, 0) / alpha)),
       {"alpha": 1.0})
_alpha("Selu", lambda x, alpha, gamma: gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))),
       {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875})
_alpha("HardSigmoid", lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1), {"alpha": 0.2, "beta": 0.5})
_alpha("ThresholdedRelu", lambda x, alpha: np.where(x > alpha, x, 0), {"alpha": 1.0})
_alpha("Swish", lambda x, alpha: x / (1 + np.exp(-alpha * x)), {"alpha": 1.0})


@register("Shrink", since=9)
class Shrink(_Alpha):
    allowed = NUMERIC_BF
    f = staticmethod(lambda x, bias, lambd: np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)))
    defaults = {"bias": 0.0, "lambd": 0.5}


@register("Gelu", since=20)
class Gelu(_Unary):
    def supports(self, node, inputs, opset):
        if node.attr("approximate", "none") not in ("none", "tanh"):
            return decline_attr("approximate", node.attr("approximate"), "'none' or 'tanh'")
        return super().supports(node, inputs, opset)

    def fn(self, node, x):
        if node.attr("approximate", "none") == "tanh":
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))


@register("PRelu", since=1)
class PRelu(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, NUMERIC_BF, range(2))

    def compute(self, node, inputs):
        from ._interp import node_opset

        x, s = inputs
        if node_opset(node) < 7 and s.size > 1 and s.ndim == 1 and x.ndim > 2:
            s = s.reshape((-1,) + (1,) * (x.ndim - 2))  # opsets 1-6: one slope per channel (axis 1)
        return [np.where(x < 0, upcast(x) * upcast(s), upcast(x)).astype(x.dtype)]


@register("Clip", since=1)
class Clip(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, NUMERIC_BF if opset >= 12 else FLOATS_BF)

    def compute(self, node, inputs):
        x = inputs[0]
        attributes = len(inputs) == 1  # opset 6's min / max attributes (inputs since 11)
        if attributes:
            lo, hi = node.attr("min", None), node.attr("max", None)
        else:
            lo = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
            hi = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        floating = x.dtype.kind == "f" or x.dtype.name == "bfloat16"
        if floating and not (attributes and x.dtype != np.float32):
            # an absent bound is the type's lowest / largest finite value, as onnxruntime takes it: infinities
            # come out finite (numeric_limits<T>::lowest() / max()); opset 6's attribute form does that for
            # float32 only (onnxruntime 1.32 leaves float16's infinities there)
            import ml_dtypes

            info = ml_dtypes.finfo(x.dtype)
            lo = info.min if lo is None else lo
            hi = info.max if hi is None else hi
        y = upcast(x)
        if lo is not None:
            y = np.maximum(y, np.asarray(lo).astype(y.dtype))
        if hi is not None:
            y = np.minimum(y, np.asarray(hi).astype(y.dtype))
        return [np.array(y, dtype=x.dtype)]


@register("IsNaN", since=9)
class IsNaN(_Unary):
    writes_output = True

    def compute(self, node, inputs):
        x = upcast(inputs[0])
        out = self.output(0, x.shape, np.bool_)
        np.isnan(x, out=out)
        return [out]


@register("IsInf", since=10)
class IsInf(_Unary):
    def compute(self, node, inputs):
        x = upcast(inputs[0])
        neg, pos = node.attr("detect_negative", 1), node.attr("detect_positive", 1)
        return [np.isinf(x) & (((x < 0) & bool(neg)) | ((x > 0) & bool(pos)))]


@register("Identity", since=1)
class Identity(OpImpl):
    writes_output = True

    def compute(self, node, inputs):
        x = inputs[0]
        return [write_output(self, x) if isinstance(x, np.ndarray) else x]
