"""ai.onnx.ml TreeEnsembleClassifier (ml opsets 1, 3) with ONNX Runtime's scoring and binary-case rules.

Per class: the sum of the weights of the leaves reached (a class no leaf names has no score). More than two
classes: base_values are added (a class without a score takes its base value), the label is the first
class of maximum score among those with a score, post_transform applies to all scores. Two classes follow
ONNX Runtime: when only one class id appears in class_ids ("binary case") the positive score decides the
label against 0.5 (all weights >= 0) or 0 (mixed signs) and the second score column is derived
([1 - s, s], or [-s, s] / logistic pair for mixed signs); otherwise the label is positive when the positive
class score is > 0 (the label is classlabels[1] / [0]; onnxruntime returns raw 1 / 0 there for int64 labels).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register
from .ops_extra_ml import _MODE_CODES, _POST, _tensor_or_list, forest_legacy, post_transform

ML = "ai.onnx.ml"
_X = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64})


def _logistic(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


@register("TreeEnsembleClassifier", since=1, domain=ML)
class TreeEnsembleClassifier(OpImpl):
    """Outputs Y (N,) labels (int64 or string) and Z (N, n_classes) float32 scores."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        x = inputs[0]
        if x.dtype and x.dtype not in _X:
            return Decline(rejected=f"X dtype {dtype_name(x.dtype)}", accepts="float, double, int32, int64")
        a = attrs_of(node)
        post = str(a.get("post_transform", "NONE"))
        if post not in _POST:
            return Decline(rejected=f"post_transform={post!r}", accepts=", ".join(_POST), remedy="fix post_transform")
        labels = a.get("classlabels_int64s") or a.get("classlabels_strings") or []
        if len(labels) < 2:
            return Decline(rejected=f"{len(labels)} class labels", accepts="two or more class labels",
                           remedy="fix classlabels_int64s / classlabels_strings")
        if len(labels) == 2 and post == "PROBIT":
            return Decline(rejected="post_transform='PROBIT' with two classes", accepts="NONE, LOGISTIC, SOFTMAX*",
                           remedy="apply PROBIT after the node")
        if any(str(m) not in _MODE_CODES for m in a.get("nodes_modes") or []):
            return Decline(rejected="unknown nodes_modes value", accepts=", ".join(_MODE_CODES),
                           remedy="fix nodes_modes")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = inputs[0]
        x2 = (x.reshape(1, -1) if x.ndim == 1 else x).astype(np.float32).astype(np.float64)
        strings = bool(a.get("classlabels_strings"))
        labels = [str(v) for v in a["classlabels_strings"]] if strings else [int(v) for v in a["classlabels_int64s"]]
        n_cls = len(labels)
        forest = forest_legacy(a, "class")
        cur = forest.leaves(x2)
        table = np.zeros((len(forest.is_leaf), n_cls))
        hit = np.zeros((len(forest.is_leaf), n_cls), bool)
        np.add.at(table, (forest.leaf_slot, forest.leaf_target), forest.leaf_weight)
        hit[forest.leaf_slot, forest.leaf_target] = True
        score, has = table[cur].sum(axis=1), hit[cur].any(axis=1)  # (N, C)
        base = _tensor_or_list(a, "base_values")
        base = np.zeros(0) if base is None else base
        post = str(a.get("post_transform", "NONE"))
        lab = np.asarray(labels, dtype=object if strings else np.int64)
        if n_cls > 2:
            if base.size:
                score = np.where(has, score + base, base)
                has = np.ones_like(has)
            masked = np.where(has, score, -np.inf)
            y = lab[np.argmax(masked, axis=1)]
            z = post_transform(score, post) if post != "NONE" else score
            return [y, z.astype(np.float32)]
        return self._binary(a, score, has, base, post, lab, forest)

    @staticmethod
    def _binary(a: dict, score: np.ndarray, has: np.ndarray, base: np.ndarray, post: str, lab: np.ndarray,
                forest) -> list[np.ndarray]:
        s0, s1, h0, h1 = score[:, 0].copy(), score[:, 1].copy(), has[:, 0], has[:, 1].copy()
        two_cols = h1.copy()  # rows whose class-1 score exists keep both columns
        extra = np.full(score.shape[0], -1)
        if base.size == 2:
            s1 = np.where(h1, base[1] + s0, s1 + base[1])
            s0 = np.where(h1, -s1, s0 + base[0])
            two_cols = np.ones_like(h1)
        elif base.size == 1:
            s0 = s0 + base[0]
        else:
            extra[:] = 3
        pos = np.where(two_cols & h1, s1, np.where(h0, s0, 0.0))
        binary_case = len(set(int(c) for c in a["class_ids"])) == 1
        if binary_case:
            if bool((forest.leaf_weight >= 0).all()):
                up = pos > 0.5
                extra = np.where(up, 0, 1)
            else:
                up = pos > 0
                extra = np.where(up, 2, 3)
        else:
            up = pos > 0
        y = np.where(up, lab[1], lab[0]).astype(lab.dtype)
        # scores: two columns through post_transform, or one column expanded by `extra`
        both = np.stack([s0, s1], axis=1)
        z = post_transform(both, post) if post != "NONE" else both
        single = s0
        one_minus = np.stack([1 - single, single], axis=1)
        signed = (np.stack([_logistic(-single), _logistic(single)], axis=1) if post == "LOGISTIC"
                  else np.stack([-single, single], axis=1))
        expanded = np.where(np.isin(extra, (0, 1))[:, None], one_minus,
                            np.where(np.isin(extra, (2, 3))[:, None], signed, np.stack([single, single * 0], 1)))
        out = np.where(two_cols[:, None], z, expanded)
        return [y, out.astype(np.float32)]


__all__ = ["TreeEnsembleClassifier"]
