"""ai.onnx.ml preprocessing ops, LinearClassifier and SVMRegressor (ORT semantics; map ops: ops_extra_mlmaps).

- Imputer: values equal to replaced_value (NaN matches NaN) become imputed_value (one value, or one per
  feature along the last axis).
- FeatureVectorizer: inputs of shape (N, C_i) (or (C_i,)) cut or zero-padded to inputdimensions[i] and
  concatenated along the last axis (float32).
- OneHotEncoder: (..., ) -> (..., n_categories) float32 one-hot; unknown categories give zeros when zeros=1.
- CategoryMapper: int64 <-> string through the paired cats_int64s / cats_strings, defaults for misses.
- LinearClassifier: scores = X coefficients^T + intercepts (float32); label = argmax (first maximum) or, with
  one score column, score > 0 -> the positive label (classlabels[1] when there are 2, else 1 / "1"). With one
  column and two labels the scores become [1 - s, s] (s after LOGISTIC when asked); otherwise post_transform
  applies to multi-column scores only (and PROBIT to a lone column), as ONNX Runtime 1.32 does.
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


_POSTS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


@register("LinearClassifier", since=1, domain=ML)
class LinearClassifier(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = _numeric(inputs)
        if d is not None:
            return d
        a = attrs_of(node)
        post = str(a.get("post_transform", "NONE"))
        if post not in _POSTS:
            return Decline(rejected=f"post_transform={post!r}", accepts=", ".join(_POSTS), remedy="fix post_transform")
        n_cls = len(a.get("intercepts") or [])
        labels = a.get("classlabels_strings") or a.get("classlabels_ints") or []
        if n_cls == 0 or not a.get("coefficients"):
            return Decline(rejected="coefficients / intercepts missing", accepts="both attributes",
                           remedy="fix the node attributes")
        if n_cls == 1 and post == "PROBIT" and len(labels) == 2:
            return Decline(rejected="post_transform='PROBIT' with one score column and two labels",
                           accepts="NONE or LOGISTIC for binary single-column models", remedy="use two columns")
        if n_cls > 1 and len(labels) < n_cls:
            return Decline(rejected=f"{len(labels)} class labels for {n_cls} score columns",
                           accepts="one label per column", remedy="fix classlabels_*")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = inputs[0]
        x2 = x.reshape(1, -1) if x.ndim == 1 else x
        icpt = np.asarray(a["intercepts"], np.float32)
        n_cls = icpt.size
        coef = np.asarray(a["coefficients"], np.float32).reshape(n_cls, -1)
        scores = (x2.astype(np.float32) @ coef.T + icpt).astype(np.float32)
        strings = bool(a.get("classlabels_strings"))
        labels = [str(v) for v in a["classlabels_strings"]] if strings else [int(v) for v in a.get("classlabels_ints")
                                                                             or []]
        post = str(a.get("post_transform", "NONE"))
        if n_cls == 1:
            pos, neg = (labels[1], labels[0]) if len(labels) == 2 else (("1", "0") if strings else (1, 0))
            y = np.where(scores[:, 0] > 0, pos, neg)
            if len(labels) == 2:
                s1 = scores[:, 0]
                if post == "LOGISTIC":
                    s1 = (1 / (1 + np.exp(-s1.astype(np.float64)))).astype(np.float32)
                scores = np.stack([np.float32(1) - s1, s1], axis=1)
            elif post == "PROBIT":
                from .ops_extra_ml import post_transform

                scores = post_transform(scores.astype(np.float64), "PROBIT").astype(np.float32)
        else:
            y = np.asarray(labels, dtype=object if strings else np.int64)[np.argmax(scores, axis=1)]
            if post != "NONE":
                from .ops_extra_ml import post_transform

                scores = post_transform(scores.astype(np.float64), post).astype(np.float32)
        y = np.asarray(y, dtype=object) if strings else np.asarray(y, np.int64)
        return [y, scores]


_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def svm_kernel(x: np.ndarray, sv: np.ndarray, kind: str, gamma: float, coef0: float, degree: int) -> np.ndarray:
    """(N, S) kernel values between samples x (N, F) and support vectors sv (S, F), float64."""
    if kind == "RBF":
        d2 = (x * x).sum(1)[:, None] + (sv * sv).sum(1)[None, :] - 2 * x @ sv.T
        return np.exp(-gamma * np.maximum(d2, 0))
    dot = x @ sv.T
    if kind == "POLY":
        return (dot * gamma + coef0) ** degree
    if kind == "SIGMOID":
        return np.tanh(dot * gamma + coef0)
    return dot


@register("SVMRegressor", since=1, domain=ML)
class SVMRegressor(OpImpl):
    """y = sum_j coef_j K(x, sv_j) + rho (or the linear model x . coef + rho without support vectors);
    one_class gives +-1; output (N, 1) float32."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = _numeric(inputs)
        if d is not None:
            return d
        a = attrs_of(node)
        if str(a.get("kernel_type", "LINEAR")) not in _KERNELS:
            return Decline(rejected=f"kernel_type={a['kernel_type']!r}", accepts=", ".join(_KERNELS),
                           remedy="fix kernel_type")
        if str(a.get("post_transform", "NONE")) != "NONE":
            return Decline(rejected=f"post_transform={a['post_transform']!r}", accepts="NONE",
                           remedy="apply the transform after the node")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = inputs[0]
        x2 = (x.reshape(1, -1) if x.ndim == 1 else x).astype(np.float32).astype(np.float64)
        coef = np.asarray(a.get("coefficients") or [], np.float32).astype(np.float64)
        rho = float(np.float32((a.get("rho") or [0.0])[0]))
        params = [float(np.float32(v)) for v in (a.get("kernel_params") or [0.0, 0.0, 0.0])]
        n_sv = int(a.get("n_supports", 0))
        if n_sv > 0:
            sv = np.asarray(a["support_vectors"], np.float32).astype(np.float64).reshape(n_sv, -1)
            k = svm_kernel(x2, sv, str(a.get("kernel_type", "LINEAR")), params[0], params[1], int(params[2]))
            y = k @ coef + rho
        else:
            y = x2 @ coef + rho
        if int(a.get("one_class", 0)):
            y = np.where(y > 0, 1.0, -1.0)
        return [y.reshape(-1, 1).astype(np.float32)]


__all__ = ["CategoryMapper", "FeatureVectorizer", "Imputer", "LinearClassifier", "OneHotEncoder", "SVMRegressor",
           "svm_kernel"]
