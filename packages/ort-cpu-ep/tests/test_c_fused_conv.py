"""com.microsoft FusedConv (the ConvActivationFusion's node): the C kernel (Relu, Sigmoid, HardSwish, LeakyRelu,
HardSigmoid, Clip applied in the Conv's epilogue, activation_params through the ABI's float-list getter) against
the numpy kernel and onnxruntime, on random shapes through every Conv path (im2col
chunks, 1x1 as a GEMM, depthwise, grouped, strided, dilated, padded, batch > 1, threads), with and without Z; the
numpy kernel for Tanh and onnxruntime's FusedConv; which nodes the C kernel takes, and the
declines."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import c_kernel_workspace, one_node_model, run_one_node

F = TensorProto.FLOAT
ORT_ACTIVATIONS = {"Relu": {}, "Sigmoid": {}, "Tanh": {}, "LeakyRelu": {"alpha": 0.1},
                   "HardSigmoid": {"alpha": 0.3, "beta": 0.4}, "Clip": {"min": -0.5, "max": 0.7}}
ACTIVATION_PARAMS = {"LeakyRelu": [0.1], "HardSigmoid": [0.3, 0.4], "Clip": [-0.5, 0.7]}


def _fused(x_shape, w_shape, activation, *, bias=True, z=False, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(w_shape) * 2 / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    if bias or z:
        inits.append(numpy_helper.from_array(rng.standard_normal(w_shape[0]).astype(np.float32), "b"))
        inputs.append("b")
    if activation in ACTIVATION_PARAMS:
        attrs["activation_params"] = ACTIVATION_PARAMS[activation]
    vis = [helper.make_tensor_value_info("x", F, list(x_shape))]
    feeds = {"x": (rng.standard_normal(x_shape) * 3).astype(np.float32)}
    node = helper.make_node("FusedConv", inputs, ["y"], domain="com.microsoft", activation=activation, **attrs)
    model = one_node_model(node, vis, [helper.make_tensor_value_info("y", F, None)], inits)
    if z:  # Z: Y's shape (the Conv's output, from the model without Z)
        zshape = list(run_one_node(model, feeds, "numpy")["y"].shape)
        node.input.append("z")
        model = one_node_model(node, [*vis, helper.make_tensor_value_info("z", F, zshape)],
                               [helper.make_tensor_value_info("y", F, None)], inits)
        feeds["z"] = rng.standard_normal(zshape).astype(np.float32)
    return model, feeds


def _unfused_reference(model, feeds, activation, with_conv=False):
    """onnxruntime on Conv followed by the activation node (HardSwish included: onnxruntime's FusedConv has none);
    with_conv: also the Conv's output (the tolerances' scale: a bounded activation hides the sums' size)."""
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
             if a.name not in ("activation", "activation_params")}
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    conv_in = list(node.input[:3])
    nodes = [helper.make_node("Conv", conv_in, ["c"], **attrs)]
    last = "c"
    if len(node.input) > 3:
        nodes.append(helper.make_node("Add", ["c", node.input[3]], ["cz"]))
        last = "cz"
    inits = list(model.graph.initializer)
    extra = {}
    if activation == "Clip":
        lo, hi = ACTIVATION_PARAMS["Clip"]
        inits += [numpy_helper.from_array(np.float32(lo), "lo"), numpy_helper.from_array(np.float32(hi), "hi")]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
    else:
        extra = {k: v for k, v in ORT_ACTIVATIONS.get(activation, {}).items()}
        nodes.append(helper.make_node(activation, [last], ["y"], **extra))
    outputs = [helper.make_tensor_value_info(n, F, None) for n in ("y", "c")]
    graph = helper.make_graph(nodes, "ref", list(model.graph.input), outputs, inits)
    ref = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    y, c = ort.InferenceSession(ref.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    return (y, c) if with_conv else y


CASES = [
    ((1, 3, 12, 17), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 5, 11, 9), (7, 5, 3, 2), {"strides": [2, 1], "pads": [0, 1, 2, 0]}),
    ((1, 4, 15, 13), (6, 4, 3, 3), {"dilations": [2, 3], "pads": [2, 1, 0, 3]}),
    ((1, 6, 10, 10), (8, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((2, 8, 9, 14), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),                     # depthwise
    ((1, 6, 13, 11), (6, 1, 5, 5), {"group": 6, "strides": [2, 2], "pads": [2, 2, 2, 2]}),  # depthwise 5x5 s2
    ((2, 16, 7, 9), (24, 16, 1, 1), {}),                                                     # 1x1: X is B
    ((1, 40, 30, 40), (20, 40, 3, 3), {"pads": [1, 1, 1, 1]}),                               # several chunks
    ((1, 3, 10, 11), (5, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((2, 8, 13, 17), (28, 8, 3, 3), {"pads": [1, 1, 1, 1]}),                                # direct (W packed)
    ((1, 6, 12, 11), (60, 6, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),              # direct, strided
]


def _c_runs(model, feeds):
    """The C kernel's Y as a lone node (W read per call) and, where W packs for the direct path, as a session runs
    it (W packed at initialization)."""
    runs = [run_one_node(model, feeds, "C")["y"]]
    try:
        runs.append(run_one_node(model, feeds, "C", prepack=True)["y"])
    except AssertionError as e:
        if "no constant input was pre-packed" not in str(e):
            raise
    return runs


def test_the_direct_cases_pack_their_weights():
    for x_shape, w_shape, attrs in CASES[-2:]:
        model, feeds = _fused(x_shape, w_shape, "Relu", z=True, **attrs)
        assert len(_c_runs(model, feeds)) == 2


@pytest.mark.parametrize("activation", sorted(c_kernels.C_CONV_ACTIVATIONS))
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_c_fused_conv_matches_numpy_and_the_unfused_pair_in_onnxruntime(x_shape, w_shape, attrs, activation):
    model, feeds = _fused(x_shape, w_shape, activation, **attrs)
    want = run_one_node(model, feeds, "numpy")["y"]
    ref, conv = _unfused_reference(model, feeds, activation, with_conv=True)
    scale = max(float(np.abs(conv).max()), 1.0)
    for got in _c_runs(model, feeds):
        assert got.shape == ref.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-6 * scale)
        np.testing.assert_allclose(got, ref, rtol=0, atol=3e-6 * scale)


@pytest.mark.parametrize("activation", ["Relu", "HardSwish"])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_c_fused_conv_with_z_adds_it_after_the_bias_on_every_conv_path(x_shape, w_shape, attrs, activation):
    """Z (ConvAddActivationFusion's residual) through im2col chunks, the 1x1 GEMM, depthwise, grouped and direct paths."""
    model, feeds = _fused(x_shape, w_shape, activation, z=True, **attrs)
    want = run_one_node(model, feeds, "numpy")["y"]
    ref, conv = _unfused_reference(model, feeds, activation, with_conv=True)
    scale = max(float(np.abs(conv).max()), 1.0)
    for got in _c_runs(model, feeds):
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-6 * scale)
        np.testing.assert_allclose(got, ref, rtol=0, atol=3e-6 * scale)


def test_c_fused_conv_refuses_a_z_of_another_shape():
    import ort_abi

    model, feeds = _fused((1, 3, 8, 8), (4, 3, 3, 3), "Relu", z=True, pads=[1, 1, 1, 1])
    model.graph.input[1].type.tensor_type.shape.dim[3].dim_value = 7
    feeds["z"] = feeds["z"][..., :7].copy()
    with pytest.raises(ort_abi.KernelError, match=r"Z must have the output's shape \[1, 4, 8, 8\]"):
        run_one_node(model, feeds, "C")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_c_fused_conv_same_result_at_every_thread_count(threads):
    model, feeds = _fused((2, 12, 21, 19), (16, 12, 3, 3), "HardSwish", pads=[1, 1, 1, 1])
    one = run_one_node(model, feeds, "C", threads=1)["y"]
    np.testing.assert_array_equal(run_one_node(model, feeds, "C", threads=threads)["y"], one)


@pytest.mark.parametrize("activation", sorted(ORT_ACTIVATIONS))
@pytest.mark.parametrize("z", [False, True])
def test_numpy_fused_conv_matches_onnxruntimes_fused_conv(activation, z):
    model, feeds = _fused((2, 4, 9, 8), (6, 4, 3, 3), activation, z=z, pads=[1, 0, 1, 2], strides=[1, 2])
    got = run_one_node(model, feeds, "numpy")["y"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    peer = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, peer, rtol=0, atol=3e-6 * max(float(np.abs(peer).max()), 1.0))
    np.testing.assert_allclose(got, _unfused_reference(model, feeds, activation), rtol=0, atol=3e-5)


def _claims_c(model) -> bool:
    m = ort_graph.from_proto(model)
    ort_graph.resolve_shapes(m, {})
    node = m.graph.nodes[0]
    return c_kernels.c_kernel_applies(node) and CpuExecutionProvider(m.graph, m.opset_imports).claim(node).supported


@pytest.mark.parametrize(("activation", "z", "c"), [("Relu", False, True), ("HardSwish", False, True),
                                                    ("Sigmoid", False, True), ("LeakyRelu", False, True),
                                                    ("Clip", False, True), ("HardSigmoid", False, True),
                                                    ("Tanh", False, False), ("Relu", True, True),
                                                    ("Tanh", True, False)])
def test_the_c_kernel_takes_the_activations_it_reads_and_numpy_the_rest(activation, z, c):
    model, _ = _fused((1, 4, 6, 6), (4, 4, 3, 3), activation, z=z)
    assert _claims_c(model) is c


def test_c_fused_conv_declares_the_conv_workspace():
    fused, _ = _fused((1, 40, 30, 40), (20, 40, 3, 3), "Relu", pads=[1, 1, 1, 1])
    conv = one_node_model(helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]), list(fused.graph.input),
                          list(fused.graph.output), list(fused.graph.initializer))
    shapes = [(1, 40, 30, 40), (20, 40, 3, 3), (20,)]
    got = c_kernel_workspace(fused, shapes)
    assert got == c_kernel_workspace(conv, shapes) and got[0] and got[1]


@pytest.mark.parametrize(("attrs", "match"), [({"activation": "Gelu"}, r"attribute activation='Gelu'"),
                                              ({"activation": "LeakyRelu"}, r"activation_params \[\] for activation 'LeakyRelu'")])
def test_fused_conv_activations_it_cannot_apply_are_declined(attrs, match):
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], domain="com.microsoft", **attrs)
    model = one_node_model(node, [helper.make_tensor_value_info("x", F, [1, 2, 5, 5])],
                           [helper.make_tensor_value_info("y", F, None)],
                           [numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")])
    m = ort_graph.from_proto(model)
    ort_graph.resolve_shapes(m, {})
    claim = CpuExecutionProvider(m.graph, m.opset_imports).claim(m.graph.nodes[0])
    assert not claim.supported
    assert __import__("re").search(match, str(claim))


def test_c_fused_conv_refuses_a_wrong_parameter_count():
    import ort_abi

    model, _ = _fused((1, 4, 6, 6), (4, 4, 3, 3), "Clip")
    model.graph.node[0].attribute.pop()  # activation_params
    model.graph.node[0].attribute.append(helper.make_attribute("activation_params", [0.5]))
    m = ort_graph.from_proto(model)
    ort_graph.resolve_shapes(m, {})
    node = m.graph.nodes[0]
    assert not c_kernels.c_kernel_applies(node)  # the provider gives it numpy, which declines it
    entry = c_kernels.c_registry().find("FusedConv", "com.microsoft", 1, "CPUExecutionProvider")
    with pytest.raises(ort_abi.KernelError, match=r"'Clip' takes 2 activation_params, the node has 1"):
        entry.create_kernel(ort_abi.KernelInfo.from_node(node, CpuExecutionProvider(m.graph, m.opset_imports)))
