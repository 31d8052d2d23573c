"""ai.onnx.ml TreeEnsemble-5 / TreeEnsembleRegressor / LinearRegressor / Normalizer / Scaler vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from ort_cpu_ep.ops import InputInfo
from ort_cpu_ep.ops.ops_extra_ml import TreeEnsemble

TREE_ENSEMBLE = TreeEnsemble()

ML = "ai.onnx.ml"
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def _random_forest(rng, trees=3, depth=3, features=4, targets=2):
    """Full binary trees as lists of (tree, node, feature, split, mode, true, false, missing) + leaves."""
    nodes, leaves = [], []
    for t in range(trees):
        n_inner = 2 ** depth - 1
        for i in range(2 ** (depth + 1) - 1):
            if i < n_inner:
                nodes.append(dict(tree=t, node=i, feature=int(rng.integers(features)),
                                  split=float(np.round(rng.standard_normal(), 1)),
                                  mode=MODES[int(rng.integers(len(MODES)))] if i % 3 else "BRANCH_LEQ",
                                  true=2 * i + 1, false=2 * i + 2, missing=int(rng.integers(2))))
            else:
                nodes.append(dict(tree=t, node=i, feature=0, split=0.0, mode="LEAF", true=0, false=0, missing=0))
                for tg in range(targets):
                    if rng.random() < 0.8:
                        leaves.append(dict(tree=t, node=i, target=tg, weight=float(rng.standard_normal())))
    return nodes, leaves


def _legacy_attrs(nodes, leaves):
    return dict(nodes_treeids=[n["tree"] for n in nodes], nodes_nodeids=[n["node"] for n in nodes],
                nodes_featureids=[n["feature"] for n in nodes], nodes_values=[n["split"] for n in nodes],
                nodes_modes=[n["mode"] for n in nodes], nodes_truenodeids=[n["true"] for n in nodes],
                nodes_falsenodeids=[n["false"] for n in nodes],
                nodes_missing_value_tracks_true=[n["missing"] for n in nodes],
                target_treeids=[lf["tree"] for lf in leaves], target_nodeids=[lf["node"] for lf in leaves],
                target_ids=[lf["target"] for lf in leaves], target_weights=[lf["weight"] for lf in leaves])


def _x(rng, n=20, features=4):
    x = np.round(rng.standard_normal((n, features)), 1).astype(np.float32)  # ties with splits exercise EQ/LEQ
    x[rng.random(x.shape) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_tree_ensemble_regressor_matches_onnxruntime(kit, rng, aggregate, post):
    nodes, leaves = _random_forest(rng)
    attrs = _legacy_attrs(nodes, leaves) | dict(n_targets=2, aggregate_function=aggregate, post_transform=post,
                                                base_values=[0.5, -0.25])
    x = _x(rng)
    ref = kit.ort("TreeEnsembleRegressor", [x], 1, domain=ML, opset=3, **attrs)[0]
    got = kit.ours("TreeEnsembleRegressor", [x], 1, domain=ML, opset=3, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _v5_attrs(nodes, leaves, post=0, aggregate=1):
    """The same forest in TreeEnsemble-5 layout (leaves as separate entries, one per (node, target))."""
    inner = [n for n in nodes if n["mode"] != "LEAF"]
    pos = {(n["tree"], n["node"]): i for i, n in enumerate(inner)}
    leaf_of: dict = {}
    leaf_w, leaf_t = [], []
    for lf in leaves:  # a legacy leaf with several targets becomes several leaves: keep one per node (first)
        key = (lf["tree"], lf["node"])
        if key not in leaf_of:
            leaf_of[key] = len(leaf_w)
            leaf_w.append(lf["weight"])
            leaf_t.append(lf["target"])
    for n in nodes:  # leaves without any target get weight 0 on target 0
        key = (n["tree"], n["node"])
        if n["mode"] == "LEAF" and key not in leaf_of:
            leaf_of[key] = len(leaf_w)
            leaf_w.append(0.0)
            leaf_t.append(0)

    def ref(n, child):
        key = (n["tree"], child)
        return (1, leaf_of[key]) if key in leaf_of else (0, pos[key])

    t = [ref(n, n["true"]) for n in inner]
    f = [ref(n, n["false"]) for n in inner]
    codes = {m: i for i, m in enumerate(MODES)}
    return dict(
        nodes_splits=numpy_helper.from_array(np.array([n["split"] for n in inner], np.float32)),
        nodes_featureids=[n["feature"] for n in inner],
        nodes_modes=numpy_helper.from_array(np.array([codes[n["mode"]] for n in inner], np.uint8)),
        nodes_truenodeids=[v for _, v in t], nodes_trueleafs=[k for k, _ in t],
        nodes_falsenodeids=[v for _, v in f], nodes_falseleafs=[k for k, _ in f],
        nodes_missing_value_tracks_true=[n["missing"] for n in inner],
        leaf_targetids=leaf_t, leaf_weights=numpy_helper.from_array(np.array(leaf_w, np.float32)),
        tree_roots=[pos[(tr, 0)] for tr in sorted({n["tree"] for n in nodes})],
        n_targets=2, post_transform=post, aggregate_function=aggregate)


def _spec_post(y, post):
    if post == 1:  # SOFTMAX
        e = np.exp(y - y.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if post == 2:  # LOGISTIC
        return 1 / (1 + np.exp(-y))
    return y


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 1, 2])
def test_tree_ensemble_v5_matches_onnxruntime(kit, rng, aggregate, post):
    """Scores vs onnxruntime; post_transform by the ONNX codes (onnxruntime reads 1 and 2 swapped: its enum
    order is NONE, LOGISTIC, SOFTMAX), so the transform is checked against the spec's formula."""
    nodes, leaves = _random_forest(rng)
    x = _x(rng)
    ref = kit.ort("TreeEnsemble", [x], 1, domain=ML, opset=5, **_v5_attrs(nodes, leaves, 0, aggregate))[0]
    attrs = _v5_attrs(nodes, leaves, post, aggregate)
    got = kit.ours("TreeEnsemble", [x], 1, domain=ML, opset=5, impl=TREE_ENSEMBLE, **attrs)[0]
    np.testing.assert_allclose(got, _spec_post(ref.astype(np.float64), post), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "PROBIT"])
def test_linear_regressor_matches_onnxruntime(kit, rng, post):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    attrs = dict(coefficients=[0.1, -0.2, 0.3, 0.05, 0.1, 0.2], intercepts=[0.1, 0.2], targets=2,
                 post_transform=post)
    if post == "PROBIT":
        attrs |= dict(coefficients=[0.01, 0.02, -0.03], intercepts=[0.4], targets=1)  # probit needs (0, 1)
    ref = kit.ort("LinearRegressor", [x], 1, domain=ML, opset=1, **attrs)[0]
    got = kit.ours("LinearRegressor", [x], 1, domain=ML, opset=1, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_and_scaler_match_onnxruntime(kit, rng, norm):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    ref = kit.ort("Normalizer", [x], 1, domain=ML, opset=1, norm=norm)[0]
    got = kit.ours("Normalizer", [x], 1, domain=ML, opset=1, norm=norm)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    attrs = dict(offset=[0.5, 1.0, -1.0, 0.0, 2.0], scale=[2.0, 0.5, 1.0, 3.0, -1.0])
    ref = kit.ort("Scaler", [x], 1, domain=ML, opset=1, **attrs)[0]
    got = kit.ours("Scaler", [x], 1, domain=ML, opset=1, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_ml_declines(kit):
    d = kit.decline_of("TreeEnsembleRegressor", [InputInfo(TensorProto.STRING, (2, 3))], domain=ML, opset=3)
    assert d is not None and "STRING" in d.rejected
    d = kit.decline_of("TreeEnsembleRegressor", [InputInfo(TensorProto.FLOAT, (2, 3))], domain=ML, opset=3,
                       aggregate_function="MEDIAN")
    assert d is not None and "MEDIAN" in d.rejected
    d = kit.decline_of("Normalizer", [InputInfo(TensorProto.FLOAT, (2, 3))], domain=ML, opset=1, norm="L3")
    assert d is not None and "L3" in d.rejected
