"""ai.onnx.ml preprocessing ops: Imputer, FeatureVectorizer, OneHotEncoder, CategoryMapper (ORT semantics).

- Imputer: values equal to replaced_value (NaN matches NaN) become imputed_value (one value, or one per
  feature along the last axis).
- FeatureVectorizer: inputs of shape (N, C_i) (or (C_i,)) cut or zero-padded to inputdimensions[i] and
  concatenated along the last axis (float32).
- OneHotEncoder: (..., ) -> (..., n_categories) float32 one-hot; unknown categories give zeros when zeros=1.
- CategoryMapper: int64 <-> string through the paired cats_int64s / cats_strings, defaults for misses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

ML = "ai.onnx.ml"
_NUM = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32})


def _numeric(inputs: Sequence[InputInfo], allowed: frozenset[int] = _NUM) -> Decline | None:
    x = inputs[0]
    if x.dtype and x.dtype not in allowed:
        return Decline(rejected=f"input dtype {dtype_name(x.dtype)}",
                       accepts=", ".join(sorted(dtype_name(d) for d in allowed)))
    return None


@register("Imputer", since=1, domain=ML)
class Imputer(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = _numeric(inputs)
        if d is not None:
            return d
        a = attrs_of(node)
        floats, ints = a.get("imputed_value_floats"), a.get("imputed_value_int64s")
        is_float = inputs[0].dtype in (TensorProto.FLOAT, TensorProto.DOUBLE)
        if inputs[0].dtype and ((is_float and not floats) or (not is_float and not ints)):
            return Decline(rejected=f"no imputed values of the input's kind ({dtype_name(inputs[0].dtype)})",
                           accepts="imputed_value_floats for float input, imputed_value_int64s for integers",
                           remedy="fix the node attributes")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = inputs[0]
        if x.dtype.kind == "f":
            imputed = np.asarray(a["imputed_value_floats"], np.float32)
            rv = np.float32(a.get("replaced_value_float", 0.0))
            hit = np.isnan(x) if np.isnan(rv) else x == rv
        else:
            imputed = np.asarray(a["imputed_value_int64s"], np.int64)
            hit = x == np.int64(a.get("replaced_value_int64", 0))
        fill = imputed if imputed.size > 1 else imputed.reshape(())
        return [np.where(hit, np.broadcast_to(fill, x.shape) if fill.ndim else fill, x).astype(x.dtype)]


@register("FeatureVectorizer", since=1, domain=ML)
class FeatureVectorizer(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        for i, info in enumerate(inputs):
            if info.dtype and info.dtype not in _NUM:
                return Decline(rejected=f"input {i} dtype {dtype_name(info.dtype)}",
                               accepts="float, double, int32, int64")
        dims = node.attr("inputdimensions") or []
        if len(dims) != len(inputs):
            return Decline(rejected=f"{len(dims)} inputdimensions for {len(inputs)} inputs",
                           accepts="one input dimension per input", remedy="fix inputdimensions")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        dims = [int(d) for d in node.attr("inputdimensions")]
        parts = []
        for x, d in zip(inputs, dims):
            x2 = x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)
            part = np.zeros((x2.shape[0], d), np.float32)
            n = min(d, x2.shape[1])
            part[:, :n] = x2[:, :n]
            parts.append(part)
        return [np.concatenate(parts, axis=1)]


@register("OneHotEncoder", since=1, domain=ML)
class OneHotEncoder(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        if int(a.get("zeros", 1)) != 1:
            return Decline(rejected="zeros=0 (fail on unknown categories)", accepts="zeros=1",
                           remedy="set zeros=1 or check categories before the node")
        x = inputs[0]
        if x.dtype == TensorProto.STRING and not a.get("cats_strings"):
            return Decline(rejected="string input without cats_strings", accepts="cats_strings for strings",
                           remedy="fix the node attributes")
        if x.dtype and x.dtype != TensorProto.STRING and not a.get("cats_int64s"):
            return Decline(rejected="numeric input without cats_int64s", accepts="cats_int64s for numbers",
                           remedy="fix the node attributes")
        return _numeric(inputs, _NUM | {TensorProto.STRING})

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = inputs[0]
        if x.dtype.kind in "OUS":
            cats = [str(c) for c in a["cats_strings"]]
            keys = np.asarray([str(v) for v in x.reshape(-1)], dtype=object)
        else:
            cats = [int(c) for c in a["cats_int64s"]]
            keys = x.reshape(-1).astype(np.int64)
        index = {c: i for i, c in enumerate(cats)}
        pos = np.asarray([index.get(k.item() if hasattr(k, "item") else k, -1) for k in keys], np.int64)
        out = np.zeros((pos.size, len(cats)), np.float32)
        ok = pos >= 0
        out[np.nonzero(ok)[0], pos[ok]] = 1.0
        return [out.reshape(x.shape + (len(cats),))]


@register("CategoryMapper", since=1, domain=ML)
class CategoryMapper(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        if len(a.get("cats_int64s") or []) != len(a.get("cats_strings") or []):
            return Decline(rejected="cats_int64s and cats_strings of different lengths",
                           accepts="paired category lists", remedy="fix the node attributes")
        return _numeric(inputs, frozenset({TensorProto.STRING, TensorProto.INT64}))

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = inputs[0]
        ints = [int(v) for v in a.get("cats_int64s") or []]
        strs = [str(v) for v in a.get("cats_strings") or []]
        if x.dtype.kind in "OUS":
            table = dict(zip(strs, ints))
            default = int(a.get("default_int64", -1))
            return [np.asarray([table.get(str(v), default) for v in x.reshape(-1)], np.int64).reshape(x.shape)]
        table = dict(zip(ints, strs))
        default_s = str(a.get("default_string", "_Unused"))
        return [np.asarray([table.get(int(v), default_s) for v in x.reshape(-1)], dtype=object).reshape(x.shape)]


__all__ = ["CategoryMapper", "FeatureVectorizer", "Imputer", "OneHotEncoder"]
