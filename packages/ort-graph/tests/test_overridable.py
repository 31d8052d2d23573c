"""Overridable initializers, decided once per model (`_overridable`): before IR 4 none (they leave graph.input at
load, and `save` lists them again), from IR 4 on those listed in graph.input. No fold, fusion or shape
propagation consumes an overridable initializer's value (as onnxruntime, which does not constant-fold them); the
same graph with the initializer a constant (IR 3) is folded."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_graph import (
    constant_initializer,
    conv1d_as_conv2d,
    fold_constant_layouts,
    fold_constant_of_shape,
    from_proto,
    fuse_conv_add,
    fuse_conv_batchnorm,
    fuse_conv_mul,
    fuse_repeat_kv,
    is_overridable,
    overridable_initializers,
)
from ort_graph._fusions import fuse_layer_norm, fuse_simplified_layer_norm

F = np.float32
RNG = np.random.default_rng(0)


def _model(nodes, inputs, inits, listed=(), *, ir=10, opset=17, out="Y", out_shape=None, domains=()):
    """X-style inputs `inputs` (name -> shape), initializers `inits` (name -> array), `listed` of them in
    graph.input too."""
    vi = lambda name, shape, t=TensorProto.FLOAT: helper.make_tensor_value_info(name, t, shape)  # noqa: E731
    ins = [vi(n, s) for n, s in inputs.items()]
    ins += [vi(n, list(inits[n].shape), helper.np_dtype_to_tensor_dtype(inits[n].dtype)) for n in listed]
    g = helper.make_graph(nodes, "g", ins, [vi(out, out_shape)], [numpy_helper.from_array(a, n) for n, a in inits.items()])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=opsets, ir_version=ir)


def _loaded(*args, **kw):
    model = from_proto(_model(*args, **kw))
    ort_graph.resolve_shapes(model, {})
    return model


# -- the decision -----------------------------------------------------------------------------------------------

def _two_weights(ir, listed=("W",)):
    nodes = [helper.make_node("Mul", ["X", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["Y"])]
    return _model(nodes, {"X": [4]}, {"W": np.ones(4, F), "B": np.zeros(4, F)}, listed, ir=ir)


@pytest.mark.parametrize(("ir", "listed", "want"), [(10, ("W",), ["W"]), (4, ("W", "B"), ["W", "B"]),
                                                    (10, (), []), (3, ("W", "B"), [])])
def test_overridable_from_ir4_when_listed_in_graph_input_and_never_before(ir, listed, want):
    g = from_proto(_two_weights(ir, listed)).graph
    assert overridable_initializers(g) == want
    assert g.inputs == ["X", *want]  # before IR 4 the initializers leave the inputs at load
    for name in ("W", "B"):
        assert is_overridable(g, name) == (name in want)
        assert (constant_initializer(g, name) is None) == (name in want)
    assert constant_initializer(g, "X") is None and constant_initializer(g, "") is None


def test_settle_inputs_decides_for_a_model_built_in_code_and_is_idempotent():
    model = from_proto(_two_weights(10, ("W", "B")))
    model.ir_version = 3  # as if built so: the inputs still list the initializers
    ort_graph.settle_inputs(model)
    ort_graph.settle_inputs(model)
    assert model.graph.inputs == ["X"] and overridable_initializers(model.graph) == []


def test_an_ir3_subgraph_initializer_leaves_the_body_inputs_too():
    body_init = numpy_helper.from_array(np.ones(1, F), "k")
    body = helper.make_graph([helper.make_node("Mul", ["X", "k"], ["o"])], "then", [
        helper.make_tensor_value_info("k", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])],
        [body_init])
    els = helper.make_graph([helper.make_node("Identity", ["X"], ["o2"])], "else", [],
                            [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [4])])
    node = helper.make_node("If", ["c"], ["Y"], then_branch=body, else_branch=els)
    m = _model([node], {"X": [4]}, {"c": np.array(True)}, ("c",), ir=3, opset=11, out_shape=[4])
    onnx.checker.check_model(m)
    model = from_proto(m)
    then = model.graph.nodes[0].attr("then_branch")
    assert model.graph.inputs == ["X"] and then.inputs == []
    saved = ort_graph.to_proto(model)
    onnx.checker.check_model(saved)  # IR 3: every initializer listed as an input again, the body's too
    assert [i.name for i in saved.graph.input] == ["X", "c"]
    then_proto = next(a.g for a in saved.graph.node[0].attribute if a.name == "then_branch")
    assert [i.name for i in then_proto.input] == ["k"]


def test_an_ir3_save_lists_every_initializer_as_an_input_new_ones_included():
    a = RNG.standard_normal((2, 3, 8)).astype(F)
    nodes = [helper.make_node("MatMul", ["A", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["Y"])]
    m = _model(nodes, {"A": list(a.shape)}, {"W": RNG.standard_normal((8, 5)).astype(F), "b": np.ones(5, F)},
               ("W", "b"), ir=3, opset=9, out_shape=[2, 3, 5])
    model = from_proto(m)
    ort_graph.resolve_shapes(model, {})
    fused = ort_graph.apply_l1_fusions(model)
    assert [r.fusion for r in fused] == ["MatMulAddFusion"]  # Reshape / Gemm / Reshape: two new shape initializers
    saved = ort_graph.to_proto(model)
    onnx.checker.check_model(saved)
    assert {i.name for i in saved.graph.input} == {"A"} | {t.name for t in saved.graph.initializer}
    assert [i.name for i in ort_graph.to_proto(from_proto(_two_weights(10))).graph.input] == ["X", "W"]  # IR >= 4 as is


# -- no fold consumes an overridable initializer ------------------------------------------------------------------

W4 = RNG.standard_normal((4, 3, 3, 3)).astype(F)
BN = {"s": RNG.random(4).astype(F) + .5, "bb": RNG.random(4).astype(F), "mu": RNG.random(4).astype(F),
      "var": RNG.random(4).astype(F) + .5}
X4 = {"X": [1, 3, 8, 8]}


def _conv_bn(listed, ir):
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["Y"], name="bn")]
    return _loaded(nodes, X4, {"W": W4, **BN}, listed, ir=ir)


def _conv_then(op, listed, ir):
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"], name="conv"), helper.make_node(op, ["c", "k"], ["Y"], name="op")]
    return _loaded(nodes, X4, {"W": W4, "k": RNG.random((4, 1, 1)).astype(F)}, listed, ir=ir)


def _conv1d(listed, ir):
    nodes = [helper.make_node("Conv", ["X", "W"], ["Y"], name="conv")]
    return _loaded(nodes, {"X": [1, 3, 10]}, {"W": RNG.standard_normal((4, 3, 3)).astype(F)}, listed, ir=ir)


def _fill(listed, ir):
    nodes = [helper.make_node("ConstantOfShape", ["shp"], ["f"], value=numpy_helper.from_array(np.array([1.5], F))),
             helper.make_node("Add", ["X", "f"], ["Y"])]
    return _loaded(nodes, {"X": [2, 3]}, {"shp": np.array([2, 3], np.int64)}, listed, ir=ir)


def _unsqueeze(listed, ir):
    nodes = [helper.make_node("Unsqueeze", ["k", "ax"], ["u"]), helper.make_node("Mul", ["X", "u"], ["Y"])]
    return _loaded(nodes, {"X": [4, 1, 1]}, {"k": RNG.random(4).astype(F), "ax": np.array([1, 2], np.int64)},
                   listed, ir=ir)


def _layer_norm(listed, ir, simplified=False):
    x = "X"
    nodes = []
    if not simplified:
        nodes += [helper.make_node("ReduceMean", ["X"], ["mu"], axes=[-1]), helper.make_node("Sub", ["X", "mu"], ["d"])]
        x = "d"
    nodes += [helper.make_node("Pow", [x, "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
              helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
              helper.make_node("Div", [x, "sd"], ["n"]), helper.make_node("Mul", ["n", "gamma"], ["Y"])]
    inits = {"two": np.array(2.0, F), "eps": np.array(1e-5, F), "gamma": RNG.random(16).astype(F)}
    return _loaded(nodes, {"X": [2, 16]}, inits, listed, ir=ir, opset=13)


def _repeat_kv(listed, ir):
    kvh, g, t, d = 2, 3, 5, 8
    nodes = [helper.make_node("Unsqueeze", ["KV", "axes"], ["u"]), helper.make_node("Expand", ["u", "rep"], ["e"]),
             helper.make_node("Reshape", ["e", "merge"], ["r"]), helper.make_node("MatMul", ["P", "r"], ["Y"])]
    inits = {"axes": np.array([2], np.int64), "rep": np.array([1, 1, g, 1, 1], np.int64),
             "merge": np.array([0, kvh * g, -1, d], np.int64)}
    return _loaded(nodes, {"P": [1, kvh * g, 4, t], "KV": [1, kvh, t, d]}, inits, listed, ir=ir)


FOLDS = [  # (case, what builds it, the fold, the initializers it reads; the fold's records when it folds)
    ("ConvBNFusion", _conv_bn, lambda m: fuse_conv_batchnorm(m.graph), ["W", "s", "bb", "mu", "var"]),
    ("ConvMulFusion", lambda listed, ir: _conv_then("Mul", listed, ir), lambda m: fuse_conv_mul(m.graph), ["W", "k"]),
    ("ConvAddFusion", lambda listed, ir: _conv_then("Add", listed, ir), lambda m: fuse_conv_add(m.graph), ["W", "k"]),
    ("Conv1dAs2d", _conv1d, lambda m: conv1d_as_conv2d(m.graph), ["W"]),
    ("ConstantOfShape", _fill, lambda m: fold_constant_of_shape(m.graph), ["shp"]),
    ("layout fold", _unsqueeze, lambda m: fold_constant_layouts(m.graph), ["k", "ax"]),
    ("LayerNormFusion", _layer_norm, lambda m: fuse_layer_norm(m.graph), ["two", "eps"]),
    ("SimplifiedLayerNormFusion", lambda listed, ir: _layer_norm(listed, ir, True),
     lambda m: fuse_simplified_layer_norm(m.graph), ["two", "eps"]),
    ("RepeatKVFusion", _repeat_kv, lambda m: fuse_repeat_kv(m.graph), ["rep", "merge"]),
]


@pytest.mark.filterwarnings("ignore::ort_graph.ShapeResolutionWarning")  # an overridable shape or axes: the run's
@pytest.mark.parametrize(("case", "build", "fold", "reads"), FOLDS, ids=[f[0] for f in FOLDS])
def test_a_fold_leaves_an_overridable_initializer_to_the_run_and_folds_the_same_constant(case, build, fold, reads):
    assert fold(build(reads, 3)), f"{case}: with the initializers constants (IR 3) the fold applies"
    for name in reads:
        model = build([name], 10)
        before = [(n.op_type, list(n.inputs)) for n in model.graph.nodes]
        assert not fold(model), f"{case} consumed the overridable initializer {name!r}"
        assert [(n.op_type, list(n.inputs)) for n in model.graph.nodes] == before
        assert overridable_initializers(model.graph) == [name]


def test_shapes_do_not_propagate_an_overridable_initializers_value():
    nodes = [helper.make_node("Reshape", ["A", "rs"], ["Y"])]
    shape = np.array([4, 32], np.int64)
    fixed = _loaded(nodes, {"A": [2, 64]}, {"rs": shape}, (), ir=10)
    assert fixed.graph.values["Y"].shape == (4, 32)
    fed = from_proto(_model(nodes, {"A": [2, 64]}, {"rs": shape}, ("rs",), ir=10))
    with pytest.warns(ort_graph.ShapeResolutionWarning):
        ort_graph.resolve_shapes(fed, {})
    assert fed.graph.values["Y"].shape != (4, 32)  # the run's value decides: not the stored one
