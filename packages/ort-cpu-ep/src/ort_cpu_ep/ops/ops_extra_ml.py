"""ai.onnx.ml tree ensembles (TreeEnsemble-5, TreeEnsembleRegressor) and linear models, ONNX Runtime semantics.

Trees of every format become one table of slots (branch nodes and leaves); all samples x trees descend
together, one vectorized step per tree level. A branch compares X[:, feature] with its split by mode
(LEQ, LT, GTE, GT, EQ, NEQ, MEMBER); NaN follows the true branch where missing_value_tracks_true.
Leaf weights are aggregated per target (SUM, AVERAGE, MIN, MAX; a target no tree reached is 0), then
base_values are added and post_transform applied (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np
from onnx import TensorProto, numpy_helper

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

ML = "ai.onnx.ml"
_MODE_CODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
               "BRANCH_MEMBER": 6, "LEAF": 7}
_AGG = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}
_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
_X_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT32,
                      TensorProto.INT64})


@attrs.define
class Forest:
    """Slots 0..S-1 (branches and leaves) and per-leaf contributions (slot, target, weight)."""

    is_leaf: np.ndarray
    feature: np.ndarray
    split: np.ndarray
    mode: np.ndarray
    true_next: np.ndarray
    false_next: np.ndarray
    missing_true: np.ndarray
    members: dict[int, np.ndarray]
    roots: np.ndarray
    leaf_slot: np.ndarray
    leaf_target: np.ndarray
    leaf_weight: np.ndarray

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """(N, trees) slot index of the leaf each sample reaches in each tree."""
        n = x.shape[0]
        cur = np.broadcast_to(self.roots, (n, len(self.roots))).copy()
        rows = np.arange(n)[:, None]
        for _ in range(len(self.is_leaf) + 1):
            active = ~self.is_leaf[cur]
            if not active.any():
                break
            v = x[rows, self.feature[cur]]
            s, m = self.split[cur], self.mode[cur]
            with np.errstate(invalid="ignore"):
                cond = np.select([m == 0, m == 1, m == 2, m == 3, m == 4, m == 5],
                                 [v <= s, v < s, v >= s, v > s, v == s, v != s], default=False)
            for slot, vals in self.members.items():
                here = cur == slot
                if here.any():
                    cond = np.where(here, np.isin(v, vals), cond)
            cond |= np.isnan(v) & self.missing_true[cur]
            cur = np.where(active, np.where(cond, self.true_next[cur], self.false_next[cur]), cur)
        return cur

    def scores(self, x: np.ndarray, n_targets: int, aggregate: int) -> np.ndarray:
        cur = self.leaves(x)
        n, trees = cur.shape
        table = np.zeros((len(self.is_leaf), n_targets))
        hit = np.zeros((len(self.is_leaf), n_targets), bool)
        np.add.at(table, (self.leaf_slot, self.leaf_target), self.leaf_weight)
        hit[self.leaf_slot, self.leaf_target] = True
        vals, has = table[cur], hit[cur]  # (N, trees, targets)
        if aggregate in (0, 1):
            out = vals.sum(axis=1)
            return out / trees if aggregate == 0 else out
        big = np.inf if aggregate == 2 else -np.inf
        red = np.where(has, vals, big)
        out = red.min(axis=1) if aggregate == 2 else red.max(axis=1)
        return np.where(has.any(axis=1), out, 0.0)


def _tensor_or_list(a: dict, name: str) -> np.ndarray | None:
    """A float attribute (`name_as_tensor` first) as float64; FLOATS lists are float32 values in ONNX."""
    v = a.get(name + "_as_tensor")
    if v is not None:
        return numpy_helper.to_array(v).astype(np.float64)
    v = a.get(name)
    if v is None:
        return None
    if hasattr(v, "dims"):
        return numpy_helper.to_array(v).astype(np.float64)
    return np.asarray(v, np.float32).astype(np.float64)


def forest_v5(a: dict) -> Forest:
    """TreeEnsemble-5: leaves are their own arrays; slot of leaf j = number of nodes + j."""
    splits = _tensor_or_list(a, "nodes_splits")
    modes = numpy_helper.to_array(a["nodes_modes"]).astype(np.int64)
    nn = len(modes)
    weights = _tensor_or_list(a, "leaf_weights")
    nl = len(weights)
    feat = np.asarray(a["nodes_featureids"], np.int64)
    tl, fl = np.asarray(a["nodes_trueleafs"], bool), np.asarray(a["nodes_falseleafs"], bool)
    tn, fn = np.asarray(a["nodes_truenodeids"], np.int64), np.asarray(a["nodes_falsenodeids"], np.int64)
    miss = np.asarray(a.get("nodes_missing_value_tracks_true") or [0] * nn, bool)
    members: dict[int, np.ndarray] = {}
    mv = _tensor_or_list(a, "membership_values")
    if mv is not None:
        groups, cur = [], []
        for v in mv:
            if np.isnan(v):
                groups.append(np.asarray(cur))
                cur = []
            else:
                cur.append(v)
        for slot, g in zip(np.nonzero(modes == 6)[0], groups):
            members[int(slot)] = g
    roots = np.asarray(a["tree_roots"], np.int64)
    # a one-leaf tree: both branches of its root reference the same leaf
    single = tl[roots] & fl[roots] & (tn[roots] == fn[roots])
    roots = np.where(single, nn + tn[roots], roots)
    pad = np.zeros(nl)
    return Forest(
        is_leaf=np.concatenate([np.zeros(nn, bool), np.ones(nl, bool)]),
        feature=np.concatenate([feat, np.zeros(nl, np.int64)]),
        split=np.concatenate([splits if splits is not None else np.zeros(nn), pad]),
        mode=np.concatenate([modes, np.full(nl, 7)]),
        true_next=np.concatenate([np.where(tl, nn + tn, tn), np.arange(nn, nn + nl)]),
        false_next=np.concatenate([np.where(fl, nn + fn, fn), np.arange(nn, nn + nl)]),
        missing_true=np.concatenate([miss, np.zeros(nl, bool)]),
        members=members, roots=roots,
        leaf_slot=np.arange(nn, nn + nl), leaf_target=np.asarray(a["leaf_targetids"], np.int64), leaf_weight=weights,
    )


def forest_legacy(a: dict, prefix: str) -> Forest:
    """TreeEnsembleRegressor / Classifier: nodes keyed by (tree id, node id), LEAF-mode nodes are leaves."""
    tree, nid = np.asarray(a["nodes_treeids"], np.int64), np.asarray(a["nodes_nodeids"], np.int64)
    index = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(tree, nid))}
    modes = np.asarray([_MODE_CODES[str(m)] for m in a["nodes_modes"]], np.int64)
    nn = len(modes)
    tn, fn = np.asarray(a["nodes_truenodeids"], np.int64), np.asarray(a["nodes_falsenodeids"], np.int64)
    leaf = modes == 7
    true_next = np.array([k if leaf[k] else index[(int(tree[k]), int(tn[k]))] for k in range(nn)], np.int64)
    false_next = np.array([k if leaf[k] else index[(int(tree[k]), int(fn[k]))] for k in range(nn)], np.int64)
    children = set(true_next[~leaf].tolist()) | set(false_next[~leaf].tolist())
    first: dict[int, int] = {}
    for k in range(nn):
        if k not in children:
            first.setdefault(int(tree[k]), k)
    roots = np.asarray([first[t] for t in sorted(first)], np.int64)
    t_tree = np.asarray(a[f"{prefix}_treeids"], np.int64)
    t_node = np.asarray(a[f"{prefix}_nodeids"], np.int64)
    slots = np.asarray([index[(int(t), int(i))] for t, i in zip(t_tree, t_node)], np.int64)
    miss = np.asarray(a.get("nodes_missing_value_tracks_true") or [0] * nn, bool)
    return Forest(is_leaf=leaf, feature=np.asarray(a.get("nodes_featureids") or [0] * nn, np.int64),
                  split=_tensor_or_list(a, "nodes_values") if (a.get("nodes_values") is not None
                                                                or a.get("nodes_values_as_tensor") is not None)
                  else np.zeros(nn),
                  mode=modes, true_next=true_next, false_next=false_next, missing_true=miss, members={},
                  roots=roots, leaf_slot=slots, leaf_target=np.asarray(a[f"{prefix}_ids"], np.int64),
                  leaf_weight=_tensor_or_list(a, f"{prefix}_weights"))


def post_transform(scores: np.ndarray, name: str) -> np.ndarray:
    if name == "LOGISTIC":
        return 1 / (1 + np.exp(-scores))
    if name == "SOFTMAX":
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if name == "SOFTMAX_ZERO":
        nz = scores != 0
        m = np.where(nz, scores, -np.inf).max(axis=1, keepdims=True)
        e = np.where(nz, np.exp(scores - np.where(np.isfinite(m), m, 0)), 0.0)
        tot = e.sum(axis=1, keepdims=True)
        return e / np.where(tot == 0, 1, tot)
    if name == "PROBIT":
        return math.sqrt(2) * _erfinv(2 * scores - 1)
    return scores


def _erfinv(y: np.ndarray) -> np.ndarray:
    """Inverse erf by bisection on math.erf over [-6, 6] (float64, ~1e-15)."""
    erf = np.frompyfunc(math.erf, 1, 1)
    y = np.asarray(y, np.float64)
    lo, hi = np.full(y.shape, -6.0), np.full(y.shape, 6.0)
    for _ in range(64):
        mid = (lo + hi) / 2
        below = erf(mid).astype(np.float64) < y
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def _check_x(inputs: Sequence[InputInfo]) -> Decline | None:
    x = inputs[0]
    if x.dtype and x.dtype not in _X_TYPES:
        return Decline(rejected=f"X dtype {dtype_name(x.dtype)}", accepts="float, double, float16, int32, int64")
    if x.shape is not None and len(x.shape) not in (1, 2):
        return Decline(rejected=f"X rank {len(x.shape)}", accepts="rank 1 or 2 (samples, features)",
                       remedy="reshape X to (samples, features)")
    return None


def _x2d(x: np.ndarray) -> np.ndarray:
    return x.reshape(1, -1).astype(np.float64) if x.ndim == 1 else x.astype(np.float64)


@register("TreeEnsemble", since=5, domain=ML)
class TreeEnsemble(OpImpl):
    """TreeEnsemble-5: Y (N, n_targets) in X's dtype."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        x = inputs[0]
        if x.dtype and x.dtype not in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
            return Decline(rejected=f"X dtype {dtype_name(x.dtype)}", accepts="float, double, float16")
        a = attrs_of(node)
        if int(a.get("aggregate_function", 1)) not in (0, 1, 2, 3) or int(a.get("post_transform", 0)) not in range(5):
            return Decline(rejected=f"aggregate_function={a.get('aggregate_function')!r}, post_transform="
                           f"{a.get('post_transform')!r}", accepts="aggregate 0-3, post_transform 0-4",
                           remedy="fix the attributes")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = inputs[0]
        forest = forest_v5(a)
        y = forest.scores(_x2d(x), int(a.get("n_targets", 1)), int(a.get("aggregate_function", 1)))
        y = post_transform(y, _POST[int(a.get("post_transform", 0))])
        return [y.astype(x.dtype)]


@register("TreeEnsembleRegressor", since=1, domain=ML)
class TreeEnsembleRegressor(OpImpl):
    """TreeEnsembleRegressor (ml 1, 3): Y (N, n_targets) float32."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = _check_x(inputs)
        if d is not None:
            return d
        a = attrs_of(node)
        for name, allowed, default in (("aggregate_function", tuple(_AGG), "SUM"), ("post_transform", _POST, "NONE")):
            if str(a.get(name, default)) not in allowed:
                return Decline(rejected=f"{name}={a[name]!r}", accepts=", ".join(allowed), remedy=f"fix {name}")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        forest = forest_legacy(a, "target")
        n_targets = int(a.get("n_targets", 1))
        y = forest.scores(_x2d(inputs[0]), n_targets, _AGG[str(a.get("aggregate_function", "SUM"))])
        base = _tensor_or_list(a, "base_values")
        if base is not None and base.size:
            y = y + base
        return [post_transform(y, str(a.get("post_transform", "NONE"))).astype(np.float32)]


@register("LinearRegressor", since=1, domain=ML)
class LinearRegressor(OpImpl):
    """Y = X @ coefficients^T + intercepts, then post_transform (float32 output)."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = _check_x(inputs)
        if d is None and str(node.attr("post_transform", "NONE")) not in _POST:
            return Decline(rejected=f"post_transform={node.attr('post_transform')!r}", accepts=", ".join(_POST),
                           remedy="fix post_transform")
        return d

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = _x2d(inputs[0])
        targets = int(a.get("targets", 1))
        coef = np.asarray(a.get("coefficients") or [], np.float64).reshape(targets, -1)
        y = x @ coef.T
        icpt = a.get("intercepts")
        if icpt:
            y = y + np.asarray(icpt, np.float64)
        return [post_transform(y, str(a.get("post_transform", "NONE"))).astype(np.float32)]


@register("Normalizer", since=1, domain=ML)
class Normalizer(OpImpl):
    """Row normalization by MAX, L1 or L2 (float32 output)."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = _check_x(inputs)
        if d is None and str(node.attr("norm", "MAX")) not in ("MAX", "L1", "L2"):
            return Decline(rejected=f"norm={node.attr('norm')!r}", accepts="MAX, L1, L2", remedy="fix norm")
        return d

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x = _x2d(inputs[0])
        norm = str(node.attr("norm", "MAX"))
        if norm == "MAX":
            d = x.max(axis=1, keepdims=True)
        elif norm == "L1":
            d = np.abs(x).sum(axis=1, keepdims=True)
        else:
            d = np.sqrt((x * x).sum(axis=1, keepdims=True))
        y = x / np.where(d == 0, 1, d)
        return [y.reshape(inputs[0].shape).astype(np.float32)]


@register("Scaler", since=1, domain=ML)
class Scaler(OpImpl):
    """Y = (X - offset) * scale, per feature or one value for all (float32 output)."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check_x(inputs)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x = inputs[0].astype(np.float64)
        off = np.asarray(node.attr("offset") or [0.0], np.float64)
        sc = np.asarray(node.attr("scale") or [1.0], np.float64)
        return [((x - off) * sc).astype(np.float32)]


__all__ = ["Forest", "LinearRegressor", "Normalizer", "Scaler", "TreeEnsemble", "TreeEnsembleRegressor",
           "forest_legacy", "forest_v5", "post_transform"]
