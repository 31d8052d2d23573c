"""ai.onnx.ml Imputer / FeatureVectorizer / OneHotEncoder / CategoryMapper (ops_extra_mlprep) vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo

ML = "ai.onnx.ml"


@pytest.mark.parametrize("kind", ["float_nan", "float_value", "float_per_feature", "int64"])
def test_imputer(kit, rng, kind):
    if kind.startswith("float"):
        x = np.round(rng.standard_normal((4, 3)), 0).astype(np.float32)
        x[0, 1] = np.nan
        attrs = dict(imputed_value_floats=[9.5] if kind != "float_per_feature" else [1.5, 2.5, 3.5],
                     replaced_value_float=float("nan") if kind == "float_nan" else 0.0)
    else:
        x = rng.integers(-2, 3, (4, 3)).astype(np.int64)
        attrs = dict(imputed_value_int64s=[7], replaced_value_int64=1)
    ref = kit.ort("Imputer", [x], 1, domain=ML, opset=1, **attrs)[0]
    got = kit.ours("Imputer", [x], 1, domain=ML, opset=1, **attrs)[0]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dt", [np.float32, np.int64, np.float64])
def test_feature_vectorizer(kit, rng, dt):
    ins = [(rng.standard_normal(s) * 5).astype(dt) for s in ((3, 2), (3, 4), (3, 1))]
    attrs = dict(inputdimensions=[2, 3, 2])
    np.testing.assert_allclose(kit.ours("FeatureVectorizer", ins, 1, domain=ML, opset=1, **attrs)[0],
                               kit.ort("FeatureVectorizer", ins, 1, domain=ML, opset=1, **attrs)[0])


@pytest.mark.parametrize("strings", [False, True])
def test_one_hot_encoder(kit, rng, strings):
    if strings:
        x = np.array([["a", "c"], ["zz", "b"]], dtype=object)
        attrs = dict(cats_strings=["a", "b", "c"], zeros=1)
    else:
        x = np.array([[1, 5], [3, 9]], np.int64)
        attrs = dict(cats_int64s=[1, 3, 5, 7], zeros=1)
    ref = kit.ort("OneHotEncoder", [x], 1, domain=ML, opset=1, **attrs)[0]
    got = kit.ours("OneHotEncoder", [x], 1, domain=ML, opset=1, **attrs)[0]
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def test_category_mapper(kit):
    attrs = dict(cats_int64s=[1, 2, 3], cats_strings=["one", "two", "three"], default_int64=-5, default_string="?")
    s = np.array(["two", "x", "one"], dtype=object)
    i = np.array([[3, 4], [1, 2]], np.int64)
    np.testing.assert_array_equal(kit.ours("CategoryMapper", [s], 1, domain=ML, opset=1, **attrs)[0],
                                  kit.ort("CategoryMapper", [s], 1, domain=ML, opset=1, **attrs)[0])
    np.testing.assert_array_equal(kit.ours("CategoryMapper", [i], 1, domain=ML, opset=1, **attrs)[0],
                                  kit.ort("CategoryMapper", [i], 1, domain=ML, opset=1, **attrs)[0])


def test_mlprep_declines(kit):
    d = kit.decline_of("OneHotEncoder", [InputInfo(TensorProto.INT64, (2,))], domain=ML, opset=1,
                       cats_int64s=[1], zeros=0)
    assert d is not None and "zeros=0" in d.rejected
    d = kit.decline_of("FeatureVectorizer", [InputInfo(TensorProto.FLOAT, (2, 2))] * 2, domain=ML, opset=1,
                       inputdimensions=[2])
    assert d is not None and "inputdimensions" in d.rejected


@pytest.mark.parametrize("n_cls,labels", [(3, "ints"), (3, "strings"), (1, "ints"), (1, "strings"), (1, "none")])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_linear_classifier(kit, rng, n_cls, labels, post):
    x = rng.standard_normal((6, 4)).astype(np.float32)
    attrs = dict(coefficients=[float(v) for v in rng.standard_normal(n_cls * 4)],
                 intercepts=[float(v) for v in rng.standard_normal(n_cls)], post_transform=post)
    k = max(n_cls, 2)
    if labels == "ints":
        attrs["classlabels_ints"] = list(range(10, 10 + k))
    elif labels == "strings":
        attrs["classlabels_strings"] = [f"c{i}" for i in range(k)]
    ref = kit.ort("LinearClassifier", [x], 2, domain=ML, opset=1, **attrs)
    got = kit.ours("LinearClassifier", [x], 2, domain=ML, opset=1, **attrs)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strings", [False, True])
def test_zipmap(kit, rng, strings):
    x = rng.random((3, 2)).astype(np.float32)
    attrs = dict(classlabels_strings=["no", "yes"]) if strings else dict(classlabels_int64s=[0, 7])
    ref = kit.ort("ZipMap", [x], 1, domain=ML, opset=1, **attrs)[0]
    got = kit.ours("ZipMap", [x], 1, domain=ML, opset=1, **attrs)[0]
    assert len(got) == len(ref) == 3
    for g, r in zip(got, ref):
        assert g.keys() == r.keys() and all(abs(g[k] - r[k]) < 1e-6 for k in g)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID", "none"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kit, rng, kernel, one_class):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    if kernel == "none":
        attrs = dict(coefficients=[0.3, -0.2, 0.5], rho=[0.1], n_supports=0, kernel_params=[0.0, 0.0, 0.0])
    else:
        attrs = dict(kernel_type=kernel, kernel_params=[0.4, 0.2, 3.0], n_supports=4,
                     support_vectors=[float(v) for v in rng.standard_normal(12)],
                     coefficients=[float(v) for v in rng.standard_normal(4)], rho=[-0.3])
    attrs["one_class"] = one_class
    ref = kit.ort("SVMRegressor", [x], 1, domain=ML, opset=1, **attrs)[0]
    got = kit.ours("SVMRegressor", [x], 1, domain=ML, opset=1, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def _map_session(op, key_type, value_type, **attrs):
    import onnx
    import onnxruntime as ort
    from onnx import helper

    map_type = helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(value_type, None))
    node = helper.make_node(op, ["x"], ["y"], domain=ML, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_value_info("x", map_type)], [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, 3)],
                              ir_version=10)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("keys", ["int", "str"])
def test_dict_vectorizer(kit, keys):
    if keys == "int":
        m, attrs, kt = {1: 2.0, 5: 7.0, 9: 1.0}, dict(int64_vocabulary=[1, 3, 5]), TensorProto.INT64
    else:
        m, attrs, kt = {"a": 2.0, "c": 7.0}, dict(string_vocabulary=["c", "b", "a"]), TensorProto.STRING
    ref = _map_session("DictVectorizer", kt, TensorProto.FLOAT, **attrs).run(None, {"x": m})[0]
    got = kit.ours("DictVectorizer", [m], 1, domain=ML, opset=1, **attrs)[0]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("cast_to,form", [(c, f) for c in ("TO_FLOAT", "TO_STRING", "TO_INT64")
                                          for f in ("DENSE", "SPARSE") if (c, f) != ("TO_STRING", "SPARSE")])
def test_cast_map(kit, cast_to, form):
    m = {3: 2.5, 1: 7.25, 4: -1.0}
    attrs = dict(cast_to=cast_to, map_form=form) | (dict(max_map=6) if form == "SPARSE" else {})
    ref = _map_session("CastMap", TensorProto.INT64, TensorProto.FLOAT, **attrs).run(None, {"x": m})[0]
    got = kit.ours("CastMap", [m], 1, domain=ML, opset=1, **attrs)[0]
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def test_cast_map_declines_sparse_strings(kit):
    d = kit.decline_of("CastMap", [InputInfo(0, None)], domain=ML, opset=1, cast_to="TO_STRING", map_form="SPARSE")
    assert d is not None and "SPARSE" in d.rejected
