"""An execution provider's own graph passes (003's Optimization surface): the simulated GPU fuses Conv + a
per-channel Add it claimed into Conv with a bias (the CPU provider too, and the Relu after it into FusedConv),
after placement; the Level-2 re-check and the memory
plan see the fused node and its declared workspace; nodes the provider did not claim are left alone."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_session import InferenceSession, SimulatedGpuExecutionProvider
from ort_session._errors import PlacementError

SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
IM2COL = 3 * 3 * 3 * 8 * 8 * 4  # C * kH * kW * outH * outW float32: the Conv kernel's declared slot 0


def conv_add(bias_shape=(1, 4, 1, 1)):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(bias_shape).astype(np.float32), "B")]
    nodes = [helper.make_node("Conv", ["X", "W"], ["C"], name="features.0/conv", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["C", "B"], ["A"], name="features.0/add"),
             helper.make_node("Relu", ["A"], ["Y"], name="features.0/relu")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def session(rule="gpu(features.0/)", model=None, budget="simgpu:1MiB"):
    return InferenceSession(model or conv_add(), {"budgets": budget, "session.name_based_layer_assignment": rule},
                            providers=SIM)


X = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)


def test_the_simulated_gpu_fuses_its_conv_add_and_the_recheck_counts_the_fused_workspace():
    sess = session()
    fused = [f for f in sess.fusions if f.fusion == "ConvAddFusion"]
    assert [(f.replaced, f.created) for f in fused] == [(("features.0/conv", "features.0/add"),
                                                         ("features.0/conv/ConvAddFusion",))]
    # then the Relu after it: the provider's CPU passes (ConvActivationFusion) make it a FusedConv
    node = sess.model.graph.node_by_name("features.0/conv/ConvAddFusion/ConvActivationFusion")
    assert node.ep == "SimulatedGPUExecutionProvider" and len(node.inputs) == 3
    assert (node.op_type, node.attr("activation")) == ("FusedConv", "Relu")
    assert not any(n.op_type in ("Add", "Relu") for n in sess.model.graph.nodes)
    assert sess.memory.slots == {(node.index, 0): IM2COL}  # the fused kernel's Level-2 declaration
    cost = sess.recheck.costs[node]
    assert (cost.workspace, cost.workspace_source) == (IM2COL, "estimate")
    assert sess.recheck.totals["SimulatedGPUExecutionProvider"] == sum(c.total for c in sess.recheck.costs.values()
                                                                        if c.node != "Y/on_simgpu/MemcpyToHost")
    want = InferenceSession(conv_add(), providers=["CPUExecutionProvider"]).run(None, {"X": X})[0]
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], want, rtol=1e-5, atol=1e-5)
    sess.close()


def test_a_pair_split_across_providers_is_not_fused():
    sess = session(rule="gpu(features.0/conv, features.0/relu); cpu(features.0/add)")
    assert not [f for f in sess.fusions if f.fusion == "ConvAddFusion"]
    assert sess.model.graph.node_by_name("features.0/add").ep == "CPUExecutionProvider"


def test_the_cpu_provider_folds_the_add_and_the_relu_into_the_conv():
    sess = InferenceSession(conv_add(), providers=["CPUExecutionProvider"])
    assert [f.fusion for f in sess.fusions] == ["ConvAddFusion", "ConvActivationFusion"]
    (node,) = sess.model.graph.nodes
    assert (node.op_type, node.attr("activation"), len(node.inputs)) == ("FusedConv", "Relu", 3)
    unfused = InferenceSession(conv_add(), {"enable_fusions": False}, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], unfused.run(None, {"X": X})[0], rtol=1e-5, atol=1e-5)


def test_a_bias_that_is_not_per_channel_is_not_fused():
    model = ort_graph.from_proto(conv_add(bias_shape=(1, 4, 8, 8)))
    ort_graph.resolve_shapes(model, {})
    assert ort_graph.fuse_conv_add(model.graph) == []


def test_a_pass_that_creates_a_node_its_provider_does_not_claim_is_an_error(monkeypatch):
    def bogus(graph, nodes):
        relu = next(n for n in nodes if n.op_type == "Relu")
        graph.remove_node(relu)
        graph.add_node("NoSuchOp", list(relu.inputs), list(relu.outputs), name="bogus", domain="com.nowhere")
        return ["bogus"]

    monkeypatch.setattr(SimulatedGpuExecutionProvider, "graph_passes",
                        lambda self: [ort_abi.EpGraphPass("Bogus", bogus)])
    with pytest.raises(PlacementError, match=r"graph pass 'Bogus' created node 'bogus'.*does not claim"):
        session()


def test_a_fused_conv_plans_no_block_for_the_conv_output():
    """Conv (1x1, 4 -> 32 channels) + Relu: unfused, the Relu's step holds the Conv's output and its own (2 x 32 KiB);
    fused, one FusedConv step holds the input, the output (4 + 32 KiB) and its workspace: the plan shrinks by the
    intermediate, less the input and workspace the fused step holds."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 4, 1, 1)).astype(np.float32), "W")
    nodes = [helper.make_node("Conv", ["X", "W"], ["C"], name="pw/conv"), helper.make_node("Relu", ["C"], ["Y"], name="pw/relu")]
    graph = helper.make_graph(nodes, "pw", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 32, 16, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fused = InferenceSession(model, providers=["CPUExecutionProvider"])
    unfused = InferenceSession(model, {"enable_fusions": False}, providers=["CPUExecutionProvider"])
    assert [n.op_type for n in fused.model.graph.nodes] == ["FusedConv"]
    peak = {name: s.plan.to_dict()["devices"]["cpu"]["peak_activations"] for name, s in (("fused", fused), ("unfused", unfused))}
    workspace = sum(fused.memory.slots.values())  # the FusedConv's declared buffers, live in its step
    assert peak["unfused"] == 2 * 32 * 256 * 4
    assert (4 + 32) * 256 * 4 + workspace <= peak["fused"] <= (4 + 32) * 256 * 4 + workspace + 256  # block alignment
    assert peak["fused"] < peak["unfused"]
    x = np.random.default_rng(2).standard_normal((1, 4, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(fused.run(None, {"X": x})[0], unfused.run(None, {"X": x})[0], rtol=1e-6, atol=1e-6)


def caffe_scale(ir_version):
    """Conv -> Mul(Unsqueeze(scale)) -> Add(Unsqueeze(shift)) -> Relu, every initializer listed as an input too,
    as the onnx package's IR-3 light CNNs (Caffe2 exports) ship it."""
    rng = np.random.default_rng(2)
    arrays = {"W": rng.standard_normal((4, 3, 3, 3)), "s": rng.standard_normal(4), "b": rng.standard_normal(4)}
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
    nodes = [helper.make_node("Conv", ["X", "W"], ["C"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Unsqueeze", ["s"], ["s3"], name="us", axes=[1, 2]),
             helper.make_node("Mul", ["C", "s3"], ["M"], name="mul"),
             helper.make_node("Unsqueeze", ["b"], ["b3"], name="ub", axes=[1, 2]),
             helper.make_node("Add", ["M", "b3"], ["A"], name="add"),
             helper.make_node("Relu", ["A"], ["Y"], name="relu")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8])] + [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in arrays.items()]
    graph = helper.make_graph(nodes, "caffe", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=ir_version)


def test_constant_unsqueezes_fold_so_the_scale_and_shift_fold_into_the_conv():
    import onnxruntime as ort

    model = caffe_scale(3)
    sess = InferenceSession(model, providers=["CPUExecutionProvider"])
    (node,) = sess.model.graph.nodes  # IR 3: no initializer can be fed, the Unsqueezes are constants
    assert (node.op_type, node.attr("activation")) == ("FusedConv", "Relu")
    assert {"s3", "b3"} <= set(sess.constants)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": X})[0]
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], want, rtol=1e-5, atol=1e-5)
    # IR 4+: an initializer that is also an input may be fed, so what reads it stays a node
    kept = InferenceSession(caffe_scale(7), providers=["CPUExecutionProvider"])
    assert {"Unsqueeze", "Mul", "Add"} <= {n.op_type for n in kept.model.graph.nodes}
    np.testing.assert_allclose(kept.run(None, {"X": X})[0], want, rtol=1e-5, atol=1e-5)


def residual_block():
    """x -> Conv(3x3)+BN-free bias -> Add(., x) -> Relu: a ResNet basic block's tail (4 channels, 8x8)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3, "W"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")]
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["C"], name="layer1/conv", pads=[1, 1, 1, 1]),
             helper.make_node("Sum", ["C", "X"], ["S"], name="layer1/sum"),
             helper.make_node("Relu", ["S"], ["Y"], name="layer1/relu")]
    graph = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_cpu_provider_folds_a_residual_add_and_relu_into_one_c_fused_conv():
    import onnxruntime as ort

    from ort_cpu_ep import c_kernels

    model = residual_block()
    x = np.random.default_rng(6).standard_normal((1, 4, 8, 8)).astype(np.float32)
    sess = InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [f.fusion for f in sess.fusions] == ["ConvAddActivationFusion"]
    (node,) = sess.model.graph.nodes
    assert (node.op_type, node.attr("activation"), node.inputs[3]) == ("FusedConv", "Relu", "X")
    assert c_kernels.kernel_language(sess.kernels[node.index]) == "C"
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(sess.run(None, {"X": x})[0], want, rtol=1e-5, atol=1e-5)
    unfused = InferenceSession(model, {"enable_fusions": False}, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], unfused.run(None, {"X": x})[0])
