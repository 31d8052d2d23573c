"""Overridable initializers (listed in graph.input, IR >= 4) are fed as onnxruntime feeds them: no fold consumes
them, a device node reads the fed value, not a copy uploaded at initialization; before IR 4 (or not listed) an
initializer is a constant, and a feed of it is refused with the typed error of an unknown input name, saying how
to make it feedable. `optimized_model_filepath` writes an IR-3 model that stays valid and means the same."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_session import InferenceSession, InvalidInputError, SessionOptions

ort = pytest.importorskip("onnxruntime")

F = np.float32
RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 3, 8, 8)).astype(F)
W = RNG.standard_normal((4, 3, 3, 3)).astype(F)
BN = {"s": RNG.random(4).astype(F) + .5, "b": RNG.random(4).astype(F), "mu": RNG.random(4).astype(F),
      "var": RNG.random(4).astype(F) + .5}
A, B, C = (RNG.standard_normal(s).astype(F) for s in ((2, 64), (64, 32), (32,)))
PROVIDERS = [["CPUExecutionProvider"], ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]]


def _proto(nodes, inputs, out, out_shape, inits, listed, ir=10, opset=17):
    vi = lambda name, a: helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))  # noqa: E731
    g = helper.make_graph(nodes, "g", [vi(n, a) for n, a in inputs.items()] + [vi(n, inits[n]) for n in listed],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def conv_bn(listed=("W", "s", "b", "mu", "var"), ir=10):
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "s", "b", "mu", "var"], ["Y"], name="bn")]
    return _proto(nodes, {"X": X}, "Y", [1, 4, 6, 6], {"W": W, **BN}, listed, ir, opset=9)


def gemm(listed=("B",), ir=10):
    return _proto([helper.make_node("Gemm", ["A", "B", "C"], ["Y"], name="gemm")], {"A": A}, "Y", [2, 32],
                  {"B": B, "C": C}, listed, ir)


def fill(listed=("shape",), ir=10):
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["Y"], value=numpy_helper.from_array(np.array([1.5], F)))]
    return _proto(nodes, {}, "Y", None, {"shape": np.array([2, 3], np.int64)}, listed, ir)


def _ours(proto, providers=PROVIDERS[0], options=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an overridable shape: planning traces that node at run time (warned)
        return InferenceSession(proto.SerializeToString(), options, providers=providers)


def _theirs(proto):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


CASES = [
    ("conv_bn W", conv_bn, {"X": X, "W": W * 0.5}),
    ("conv_bn scale and mean", conv_bn, {"X": X, "s": BN["s"] * 3, "mu": BN["mu"] - 1}),
    ("gemm B", gemm, {"A": A, "B": B * 2}),
    ("fill shape", fill, {"shape": np.array([3, 2], np.int64)}),
]


@pytest.mark.parametrize("providers", PROVIDERS, ids=["cpu", "simgpu"])
@pytest.mark.parametrize(("case", "build", "feeds"), CASES, ids=[c[0] for c in CASES])
def test_a_fed_initializer_gives_onnxruntimes_result_and_the_stored_one_stays_the_default(case, build, feeds,
                                                                                           providers):
    proto = build()
    ours, theirs = _ours(proto, providers), _theirs(proto)
    assert [i.name for i in ours.get_inputs()] == [i.name for i in theirs.get_inputs()]
    assert [i.name for i in ours.get_overridable_initializers()] == \
        [i.name for i in theirs.get_overridable_initializers()]
    defaults = {k: v for k, v in feeds.items() if k in ("X", "A")}
    for run in (feeds, defaults, feeds):  # the feed replaces the stored value for that run only
        want = theirs.run(None, run)[0]
        got = ours.run(None, run)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_same_model_with_constant_initializers_is_still_folded():
    assert [f.fusion for f in _ours(conv_bn(listed=())).fusions] == ["ConvBNFusion"]
    assert [f.fusion for f in _ours(conv_bn(listed=(), ir=3)).fusions] == ["ConvBNFusion"]
    assert not [f.fusion for f in _ours(conv_bn()).fusions]  # overridable: left to the run, as onnxruntime


@pytest.mark.parametrize(("proto", "name"), [(conv_bn(ir=3), "s"), (gemm(ir=3), "B"), (gemm(listed=()), "B")],
                         ids=["ir3 conv_bn", "ir3 gemm", "ir10 not listed"])
def test_a_feed_of_a_constant_initializer_is_refused_like_an_unknown_name_saying_how_to_feed_it(proto, name):
    ours, theirs = _ours(proto), _theirs(proto)
    assert ours.get_overridable_initializers() == [] and theirs.get_overridable_initializers() == []
    assert [i.name for i in ours.get_inputs()] == [i.name for i in theirs.get_inputs()]
    first = next(iter(i.name for i in ours.get_inputs()))
    feeds = {first: X if first == "X" else A}
    value = proto.graph.initializer[[t.name for t in proto.graph.initializer].index(name)]
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match=f"Invalid input name: {name}"):
        theirs.run(None, {**feeds, name: numpy_helper.to_array(value)})
    ours.run(None, feeds)  # a run first: the replayed all-C run (`_quick_run`) checks the names too
    with pytest.raises(InvalidInputError, match=rf"\['{name}'\] name initializers that are constants of the model.*"
                                                r"list it in graph.input and save the model with ir_version >= 4"):
        ours.run(None, {**feeds, name: numpy_helper.to_array(value)})
    with pytest.raises(InvalidInputError, match="unknown input name"):  # the same type as a name the model lacks
        ours.run(None, {**feeds, "nothing": X})


def test_optimized_model_filepath_writes_a_valid_ir3_model_that_means_the_same(tmp_path):
    a = RNG.standard_normal((2, 3, 8)).astype(F)
    nodes = [helper.make_node("MatMul", ["A", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["Y"])]
    proto = _proto(nodes, {"A": a}, "Y", [2, 3, 5], {"W": RNG.standard_normal((8, 5)).astype(F), "b": np.ones(5, F)},
                   ("W", "b"), ir=3, opset=9)
    onnx.checker.check_model(proto)
    so = SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = _ours(proto, options=so)
    assert [f.fusion for f in sess.fusions] == ["MatMulAddFusion"]  # new shape initializers for Reshape/Gemm
    saved = onnx.load(so.optimized_model_filepath)
    assert saved.ir_version == 3
    onnx.checker.check_model(saved)  # every initializer, the new ones too, listed as an input
    want = _theirs(proto).run(None, {"A": a})[0]
    np.testing.assert_allclose(ort.InferenceSession(so.optimized_model_filepath, providers=["CPUExecutionProvider"])
                               .run(None, {"A": a})[0], want, rtol=1e-5, atol=1e-5)
    again = _ours(saved)
    assert [i.name for i in again.get_inputs()] == ["A"] and again.get_overridable_initializers() == []
    np.testing.assert_allclose(again.run(None, {"A": a})[0], want, rtol=1e-5, atol=1e-5)
