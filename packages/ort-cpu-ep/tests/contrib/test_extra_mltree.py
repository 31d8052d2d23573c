"""ai.onnx.ml TreeEnsembleClassifier (ops_extra_mltree) against onnxruntime: multi-class and the binary cases."""

from __future__ import annotations

import numpy as np
import pytest

ML = "ai.onnx.ml"
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT"]


def _forest(rng, trees, depth, features, class_ids, positive):
    nodes, leaves = [], []
    for t in range(trees):
        n_inner = 2 ** depth - 1
        for i in range(2 ** (depth + 1) - 1):
            if i < n_inner:
                nodes.append((t, i, int(rng.integers(features)), float(np.round(rng.standard_normal(), 1)),
                              MODES[int(rng.integers(4))], 2 * i + 1, 2 * i + 2))
            else:
                nodes.append((t, i, 0, 0.0, "LEAF", 0, 0))
                for c in class_ids:
                    w = float(rng.random()) if positive else float(rng.standard_normal())
                    leaves.append((t, i, c, w))
    return dict(nodes_treeids=[n[0] for n in nodes], nodes_nodeids=[n[1] for n in nodes],
                nodes_featureids=[n[2] for n in nodes], nodes_values=[n[3] for n in nodes],
                nodes_modes=[n[4] for n in nodes], nodes_truenodeids=[n[5] for n in nodes],
                nodes_falsenodeids=[n[6] for n in nodes], class_treeids=[lf[0] for lf in leaves],
                class_nodeids=[lf[1] for lf in leaves], class_ids=[lf[2] for lf in leaves],
                class_weights=[lf[3] for lf in leaves])


CASES = {
    "multiclass_rf": dict(n=3, ids=[0, 1, 2], positive=True, post="NONE", base=None),
    "multiclass_gbt_softmax": dict(n=3, ids=[0, 1, 2], positive=False, post="SOFTMAX", base=[0.1, -0.2, 0.3]),
    "multiclass_logistic_partial": dict(n=4, ids=[0, 2], positive=False, post="LOGISTIC", base=None),
    "binary_rf": dict(n=2, ids=[0, 1], positive=True, post="NONE", base=None),
    "binary_two_ids_base2": dict(n=2, ids=[0, 1], positive=False, post="NONE", base=[0.5, 0.5]),
    "binary_gbt_logistic": dict(n=2, ids=[0], positive=False, post="LOGISTIC", base=[0.2]),
    "binary_one_id_positive": dict(n=2, ids=[0], positive=True, post="NONE", base=None),
    "binary_one_id_mixed": dict(n=2, ids=[0], positive=False, post="NONE", base=None),
    "binary_id1_only": dict(n=2, ids=[1], positive=True, post="NONE", base=None),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("strings", [False, True])
def test_tree_ensemble_classifier_matches_onnxruntime(kit, rng, name, strings):
    c = CASES[name]
    attrs = _forest(rng, 3, 2, 4, c["ids"], c["positive"]) | dict(post_transform=c["post"])
    if c["base"] is not None:
        attrs["base_values"] = c["base"]
    if strings:
        attrs["classlabels_strings"] = [f"k{i}" for i in range(c["n"])]
    else:
        attrs["classlabels_int64s"] = list(range(5, 5 + c["n"]))
    x = np.round(rng.standard_normal((12, 4)), 1).astype(np.float32)
    ref = kit.ort("TreeEnsembleClassifier", [x], 2, domain=ML, opset=3, **attrs)
    got = kit.ours("TreeEnsembleClassifier", [x], 2, domain=ML, opset=3, **attrs)
    if c["n"] == 2 and len(c["ids"]) == 2 and not strings:
        # onnxruntime returns 0 / 1 here instead of classlabels_int64s[0] / [1]; the labels follow the spec
        ref[0] = np.asarray(attrs["classlabels_int64s"])[ref[0]]
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-5, atol=1e-6)
