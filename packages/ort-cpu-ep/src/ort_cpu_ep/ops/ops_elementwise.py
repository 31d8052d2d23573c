"""Element-wise binary ops with numpy broadcasting: arithmetic, comparison, logic, bitwise, Where."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import ml_dtypes
import numpy as np
from onnx import TensorProto as T

from ort_graph import Node

from ._registry import BoundCompute, Decline, InputInfo, OpImpl, register
from ._util import (
    ALL_PLAIN,
    ANY,
    FLOATS_BF,
    INTS,
    NUMERIC_BF,
    UINT,
    broadcast_shape,
    check_all,
    decline_attr,
    is_lowp,
    upcast,
)


def legacy_broadcast(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Opsets 1-6 `broadcast=1, axis=k`: B's dimensions line up with A's starting at `axis`
    (suffix-aligned when axis is absent), not numpy-style from the right."""
    if not node.attr("broadcast", 0) or b.ndim >= a.ndim:
        return b
    axis = node.attr("axis")
    axis = a.ndim - b.ndim if axis is None else (axis + a.ndim if axis < 0 else axis)
    shape = [1] * a.ndim
    shape[axis:axis + b.ndim] = b.shape
    return b.reshape(shape)


class _Binary(OpImpl):
    allowed: frozenset[int] = NUMERIC_BF
    ufunc: np.ufunc | None = None  # set: computed straight into the output block (any dtype but bfloat16)

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return check_all(inputs, self.allowed, range(2))

    def fn(self, node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def into(self, node: Node, a: np.ndarray, b: np.ndarray) -> np.ufunc | None:
        """The ufunc that computes this node into its output block, or None (computed by `fn`)."""
        return self.ufunc

    def compute(self, node: Node, inputs: list) -> list:
        return self._apply(node, inputs[0], legacy_broadcast(node, inputs[0], inputs[1]))

    def bind(self, node: Node, opset: int) -> BoundCompute:
        if node.attr("broadcast", 0):  # opsets 1-6 legacy broadcasting: B reshaped per call
            return functools.partial(self.compute, node)
        return lambda inputs: self._apply(node, inputs[0], inputs[1])

    def _apply(self, node: Node, a: np.ndarray, b: np.ndarray) -> list:
        bf16 = a.dtype == _BF16
        uf = self.into(node, a, b) if not bf16 else (
            self.ufunc if self.ufunc in _BF16_EXACT and b.dtype == a.dtype else None)
        if uf is not None:
            out = self.output(0, broadcast_shape(a.shape, b.shape), a.dtype)
            _ufunc_into(uf, a, b, out)  # exact overlap with an input (in-place plans) is safe
            return [out]
        if bf16:
            return [np.asarray(self.fn(node, upcast(a), upcast(b))).astype(a.dtype)]
        with np.errstate(all="ignore"):
            return [np.asarray(self.fn(node, a, b)).astype(a.dtype, copy=False)]


@np.errstate(all="ignore")  # as a decorator: no errstate object built and entered per call (about 0.5 us less)
def _ufunc_into(uf: np.ufunc, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    uf(a, b, out=out, casting="unsafe")


_BF16 = np.dtype(ml_dtypes.bfloat16)  # compared per node: np.dtype("bfloat16") looks the name up each time
# ml_dtypes' bfloat16 loops of these compute in float32 and round once: the same bits as upcasting first
_BF16_EXACT = (np.add, np.subtract, np.multiply)


def _ufunc_op(name: str, ufunc, since: int = 1) -> None:
    cls = type(name, (_Binary,), {"fn": lambda self, node, a, b: ufunc(a, b), "ufunc": ufunc, "writes_output": True})
    register(name, since=since)(cls)


_ufunc_op("Add", np.add)
_ufunc_op("Sub", np.subtract)
_ufunc_op("Mul", np.multiply)


@register("Div", since=1)
class Div(_Binary):
    writes_output = True

    def into(self, node, a, b):
        return np.divide if a.dtype.kind in "fc" else None

    def fn(self, node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind in "iu":
            safe = np.where(b == 0, 1, b)
            q = np.where(b == 0, 0, a // safe)
            if a.dtype.kind == "i":  # C semantics: truncate toward zero
                q = q + ((a % safe != 0) & ((a < 0) != (b < 0)))
            return q
        return a / b


@register("Pow", since=1)
class Pow(OpImpl):
    writes_output = True  # float base and exponent of one type: into the output block
    def supports(self, node, inputs, opset):
        return check_all(inputs, NUMERIC_BF - {T.UINT8, T.UINT16, T.INT8, T.INT16} | {T.INT32, T.INT64}, [0]) or \
            check_all(inputs, NUMERIC_BF, [1])

    def compute(self, node, inputs):
        a, b = inputs[0], legacy_broadcast(node, inputs[0], inputs[1])
        if a.dtype.kind == "f" and b.dtype == a.dtype and not is_lowp(a):
            out = self.output(0, broadcast_shape(a.shape, b.shape), a.dtype)
            with np.errstate(all="ignore"):
                np.power(a, b, out=out)
            return [out]
        with np.errstate(all="ignore"):
            if a.dtype.kind in "iu":
                if b.dtype.kind in "iu" and (b >= 0).all():
                    return [np.power(a, b.astype(a.dtype)).astype(a.dtype)]
                return [np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)]
            af = upcast(a)
            return [np.power(af, upcast(b).astype(af.dtype)).astype(a.dtype)]


@register("Mod", since=10)
class Mod(_Binary):
    def supports(self, node, inputs, opset):
        d = super().supports(node, inputs, opset)
        if d:
            return d
        if node.attr("fmod", 0) == 0 and inputs[0].dtype in FLOATS_BF and opset < 28:
            return decline_attr("fmod", 0, "fmod=1 for floating-point inputs before opset 28",
                                "set fmod=1 on the node")
        return None

    def fn(self, node, a, b):
        if node.attr("fmod", 0):
            return np.fmod(a, b)
        if a.dtype.kind == "f":
            return np.mod(a, b)
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, np.mod(a, safe))


@register("BitShift", since=11)
class BitShift(_Binary):
    allowed = INTS

    def supports(self, node, inputs, opset):
        d = check_all(inputs, INTS if opset >= 28 else UINT, range(2))
        if d is None and node.attr("direction") not in ("LEFT", "RIGHT"):
            return decline_attr("direction", node.attr("direction"), "'LEFT' or 'RIGHT'")
        return d

    def fn(self, node, a, b):
        bits = a.dtype.itemsize * 8
        inrange = (b >= 0) & (b < bits)
        sh = np.where(inrange, b, 0).astype(a.dtype)
        if node.attr("direction") == "LEFT":
            return np.where(inrange, np.left_shift(a, sh), 0)
        full = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
        return np.where(inrange, np.right_shift(a, sh), full)


class _Compare(OpImpl):
    ufunc = None
    allowed = ALL_PLAIN

    def supports(self, node, inputs, opset):
        return check_all(inputs, self.allowed, range(2))

    writes_output = True

    def compute(self, node, inputs):
        a, b = inputs[0], legacy_broadcast(node, inputs[0], inputs[1])
        if a.dtype == _BF16:
            a, b = upcast(a), upcast(b)
        out = self.output(0, broadcast_shape(a.shape, b.shape), np.bool_)
        type(self).ufunc(a, b, out=out, casting="unsafe")
        return [out]


for _name, _uf, _allowed in [("Equal", np.equal, ALL_PLAIN | {T.STRING}), ("Less", np.less, NUMERIC_BF),
                             ("Greater", np.greater, NUMERIC_BF), ("LessOrEqual", np.less_equal, NUMERIC_BF),
                             ("GreaterOrEqual", np.greater_equal, NUMERIC_BF)]:
    register(_name, since=1)(type(_name, (_Compare,), {"ufunc": staticmethod(_uf), "allowed": _allowed}))

for _name, _uf in [("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)]:
    register(_name, since=1)(type(_name, (_Compare,), {"ufunc": staticmethod(_uf), "allowed": frozenset({T.BOOL})}))

for _name, _uf in [("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)]:
    register(_name, since=18)(type(_name, (_Binary,), {"fn": (lambda uf: lambda self, node, a, b: uf(a, b))(_uf),
                                                       "allowed": INTS, "ufunc": _uf, "writes_output": True}))


@register("Not", since=1)
class Not(OpImpl):
    dtypes = frozenset({T.BOOL})

    def compute(self, node, inputs):
        return [np.logical_not(inputs[0])]


@register("BitwiseNot", since=18)
class BitwiseNot(OpImpl):
    dtypes = INTS

    def compute(self, node, inputs):
        return [np.invert(inputs[0])]


@register("Where", since=9)
class Where(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, {T.BOOL}, [0]) or check_all(inputs, ANY, [1, 2])

    writes_output = True

    def compute(self, node, inputs):
        c, x, y = inputs
        if x.dtype != y.dtype or x.dtype.kind == "O":
            return [np.where(c, x, y).astype(x.dtype, copy=False)]
        out = self.output(0, broadcast_shape(c.shape, x.shape, y.shape), x.dtype)
        if np.may_share_memory(out, c):  # a bool Where written over its condition
            np.copyto(out, np.where(c, x, y))
            return [out]
        # the plan may write the output over x or y (same shape, same block): keep what is still to be read
        if np.may_share_memory(out, y):
            np.copyto(out, x, where=c)
        elif np.may_share_memory(out, x):
            np.copyto(out, y, where=np.logical_not(c))
        else:
            np.copyto(out, y)
            np.copyto(out, x, where=c)
        return [out]


class _Variadic(OpImpl):
    allowed = NUMERIC_BF

    def supports(self, node, inputs, opset):
        return check_all(inputs, self.allowed)

    def compute(self, node, inputs):
        dt = inputs[0].dtype
        xs = [upcast(x) for x in inputs]
        out = xs[0]
        for x in xs[1:]:
            out = self.combine(out, x)
        return [np.asarray(self.finish(out, len(xs))).astype(dt, copy=False)]

    def combine(self, a, b):
        raise NotImplementedError

    def finish(self, out, n):
        return np.array(out, copy=True)


@register("Max", since=1)
class Max(_Variadic):
    def combine(self, a, b):
        return np.maximum(a, b)


@register("Min", since=1)
class Min(_Variadic):
    def combine(self, a, b):
        return np.minimum(a, b)


@register("Sum", since=1)
class Sum(_Variadic):
    allowed = FLOATS_BF

    def combine(self, a, b):
        return a + b


@register("Mean", since=1)
class Mean(_Variadic):
    allowed = FLOATS_BF

    def combine(self, a, b):
        return a + b

    def finish(self, out, n):
        return out / n
