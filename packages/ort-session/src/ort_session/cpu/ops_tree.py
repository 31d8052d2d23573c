"""ai.onnx.ml TreeEnsemble (opset 5): vectorized traversal, all samples one tree level at a time."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from ._registry import Decline, OpImpl, register
from ._util import FLOATS, check_dtype, decline_attr


def _arr(node, name, dtype=None):
    v = node.attr(name)
    if v is None:
        return None
    a = numpy_helper.to_array(v) if hasattr(v, "dims") else np.asarray(v)
    return a if dtype is None else a.astype(dtype)


@register("TreeEnsemble", domain="ai.onnx.ml", since=5)
class TreeEnsemble(OpImpl):
    def supports(self, node, inputs, opset):
        if node.attr("post_transform", 0) != 0:
            return decline_attr("post_transform", node.attr("post_transform"), "0 (NONE)")
        if node.attr("aggregate_function", 1) not in (0, 1, 2, 3):
            return decline_attr("aggregate_function", node.attr("aggregate_function"), "0..3")
        modes = _arr(node, "nodes_modes")
        if modes is not None and (modes > 6).any():
            return Decline(rejected=f"nodes_modes {sorted(set(modes.tolist()))!r}", accepts="0..6")
        return check_dtype(inputs, 0, FLOATS)

    def compute(self, node, inputs):
        x = inputs[0]
        splits = _arr(node, "nodes_splits", np.float64)
        feat = _arr(node, "nodes_featureids", np.int64)
        modes = _arr(node, "nodes_modes", np.int64)
        tnode, fnode = _arr(node, "nodes_truenodeids", np.int64), _arr(node, "nodes_falsenodeids", np.int64)
        tleaf, fleaf = _arr(node, "nodes_trueleafs", bool), _arr(node, "nodes_falseleafs", bool)
        ltarget, lweight = _arr(node, "leaf_targetids", np.int64), _arr(node, "leaf_weights", np.float64)
        roots = _arr(node, "tree_roots", np.int64)
        miss = _arr(node, "nodes_missing_value_tracks_true", bool)
        if miss is None:
            miss = np.zeros(len(modes), dtype=bool)
        members: dict[int, np.ndarray] = {}
        mv = _arr(node, "membership_values", np.float64)
        if mv is not None:
            it = iter(mv.tolist())
            for i in np.nonzero(modes == 6)[0]:
                vals = []
                for v in it:
                    if np.isnan(v):
                        break
                    vals.append(v)
                members[int(i)] = np.array(vals)
        n_targets = node.attr("n_targets")
        agg = node.attr("aggregate_function", 1)
        xf = x.astype(np.float64)
        rows = np.arange(x.shape[0])
        if agg in (0, 1):
            result = np.zeros((x.shape[0], n_targets))
        else:
            result = np.full((x.shape[0], n_targets), np.finfo(x.dtype).max if agg == 2 else np.finfo(x.dtype).min)
        for root in roots:
            cur = np.full(x.shape[0], root)
            if tleaf[root] and fleaf[root] and tnode[root] == fnode[root]:
                leaf = np.full(x.shape[0], tnode[root])
            else:
                leaf = np.full(x.shape[0], -1)
                active = np.ones(x.shape[0], dtype=bool)
                while active.any():
                    c = cur[active]
                    v = xf[rows[active], feat[c]]
                    s, m = splits[c], modes[c]
                    go = np.select([m == 0, m == 1, m == 2, m == 3, m == 4, m == 5],
                                   [v <= s, v < s, v >= s, v > s, v == s, v != s], False)
                    for j in np.nonzero(m == 6)[0]:
                        go[j] = v[j] in members.get(int(c[j]), ())
                    go |= miss[c] & np.isnan(v)
                    nxt = np.where(go, tnode[c], fnode[c])
                    is_leaf = np.where(go, tleaf[c], fleaf[c])
                    idx = np.nonzero(active)[0]
                    leaf[idx[is_leaf]] = nxt[is_leaf]
                    cur[idx] = nxt
                    active[idx[is_leaf]] = False
            tid, w = ltarget[leaf], lweight[leaf]
            if agg == 1:
                np.add.at(result, (rows, tid), w)
            elif agg == 0:
                np.add.at(result, (rows, tid), w / len(roots))
            elif agg == 2:
                np.minimum.at(result, (rows, tid), w)
            else:
                np.maximum.at(result, (rows, tid), w)
        return [result.astype(x.dtype)]
