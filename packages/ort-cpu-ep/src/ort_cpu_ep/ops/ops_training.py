"""ai.onnx.preview.training optimizers (Adagrad, Momentum, Adam) and small ai.onnx.ml ops
(Binarizer, ArrayFeatureExtractor, LabelEncoder)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import numpy_helper

from ._registry import Decline, OpImpl, register
from ._util import FLOATS, check_all, check_dtype, decline_attr

TRAINING = "ai.onnx.preview.training"
ML = "ai.onnx.ml"


def _groups(inputs: list, k: int) -> list[list[np.ndarray]]:
    rest = inputs[2:]
    n = len(rest) // k
    return [rest[i * n:(i + 1) * n] for i in range(k)]


class _Optimizer(OpImpl):
    k = 3

    def supports(self, node, inputs, opset):
        if (len(inputs) - 2) % self.k:
            return Decline(rejected=f"{len(inputs)} inputs", accepts=f"R, T and {self.k} equal groups of tensors",
                           remedy="fix the node")
        return check_all(inputs, FLOATS, [0]) or check_dtype(inputs, 1, {T.INT64}) or \
            check_all(inputs, FLOATS, range(2, len(inputs)))


@register("Adagrad", domain=TRAINING)
class Adagrad(_Optimizer):
    def compute(self, node, inputs):
        r, t = float(inputs[0]), int(inputs[1])
        decay, eps = node.attr("decay_factor", 0.0), node.attr("epsilon", 1e-6)
        norm = node.attr("norm_coefficient", 0.0)
        xs, gs, hs = _groups(inputs, 3)
        rate = r / (1 + t * decay)
        new_x, new_h = [], []
        for x, g, h in zip(xs, gs, hs):
            gr = norm * x + g
            hn = h + gr * gr
            new_x.append((x - rate * gr / (np.sqrt(hn) + eps)).astype(x.dtype))
            new_h.append(hn.astype(h.dtype))
        return new_x + new_h


@register("Momentum", domain=TRAINING)
class Momentum(_Optimizer):
    def supports(self, node, inputs, opset):
        if node.attr("mode", "standard") not in ("standard", "nesterov"):
            return decline_attr("mode", node.attr("mode"), "'standard' or 'nesterov'")
        return super().supports(node, inputs, opset)

    def compute(self, node, inputs):
        r, t = float(inputs[0]), int(inputs[1])
        alpha, beta = node.attr("alpha"), node.attr("beta")
        norm = node.attr("norm_coefficient", 0.0)
        xs, gs, vs = _groups(inputs, 3)
        new_x, new_v = [], []
        for x, g, v in zip(xs, gs, vs):
            gr = norm * x + g
            vn = alpha * v + (beta if t > 0 else 1.0) * gr
            step = vn if node.attr("mode", "standard") == "standard" else gr + alpha * vn
            new_x.append((x - r * step).astype(x.dtype))
            new_v.append(vn.astype(v.dtype))
        return new_x + new_v


@register("Adam", domain=TRAINING)
class Adam(_Optimizer):
    k = 4

    def compute(self, node, inputs):
        r, t = float(inputs[0]), int(inputs[1])
        alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
        eps = node.attr("epsilon", 1e-6)
        norm, post = node.attr("norm_coefficient", 0.0), node.attr("norm_coefficient_post", 0.0)
        xs, gs, vs, hs = _groups(inputs, 4)
        rate = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
        new_x, new_v, new_h = [], [], []
        for x, g, v, h in zip(xs, gs, vs, hs):
            gr = norm * x + g
            vn = alpha * v + (1 - alpha) * gr
            hn = beta * h + (1 - beta) * gr * gr
            xn = (x - rate * vn / (np.sqrt(hn) + eps)) * (1 - post)
            new_x.append(xn.astype(x.dtype))
            new_v.append(vn.astype(v.dtype))
            new_h.append(hn.astype(h.dtype))
        return new_x + new_v + new_h


@register("Binarizer", domain=ML)
class Binarizer(OpImpl):
    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, FLOATS | {T.INT32, T.INT64})

    def compute(self, node, inputs):
        x = inputs[0]
        return [(x > node.attr("threshold", 0.0)).astype(x.dtype)]


@register("ArrayFeatureExtractor", domain=ML)
class ArrayFeatureExtractor(OpImpl):
    def compute(self, node, inputs):
        x, idx = inputs
        y = np.take(x, idx.reshape(-1).astype(np.int64), axis=-1)
        return [y.reshape(1, -1) if x.ndim == 1 else y]


def _attr_values(node, prefix: str):
    for suffix, dt in (("strings", object), ("int64s", np.int64), ("floats", np.float32)):
        v = node.attr(f"{prefix}_{suffix}")
        if v is not None:
            return np.array(v, dtype=dt)
    t = node.attr(f"{prefix}_tensor")
    return None if t is None else numpy_helper.to_array(t)


@register("LabelEncoder", domain=ML)
class LabelEncoder(OpImpl):
    def supports(self, node, inputs, opset):
        if _attr_values(node, "keys") is None or _attr_values(node, "values") is None:
            return Decline(rejected="LabelEncoder without keys/values", accepts="keys_* and values_* attributes",
                           remedy="fix the node")
        return None

    def compute(self, node, inputs):
        x = inputs[0]
        keys, vals = _attr_values(node, "keys"), _attr_values(node, "values")
        if node.attr("default_tensor") is not None:
            default = numpy_helper.to_array(node.attr("default_tensor")).reshape(-1)[0]
        elif vals.dtype == object:
            default = node.attr("default_string", "_Unused")
        elif vals.dtype.kind == "i":
            default = node.attr("default_int64", -1)
        else:
            default = node.attr("default_float", -0.0)
        table = {(k.item() if hasattr(k, "item") else k): v for k, v in zip(keys, vals)}
        nan_val = next((v for k, v in zip(keys, vals) if isinstance(k, float) and np.isnan(k)), None)

        def look(k):
            k = k.item() if hasattr(k, "item") else k
            if isinstance(k, float) and np.isnan(k) and nan_val is not None:
                return nan_val
            return table.get(k, default)

        out = np.array([look(k) for k in x.reshape(-1)], dtype=vals.dtype).reshape(x.shape)
        return [out]
