"""com.microsoft QMoE (ops_extra_qmoe) against onnxruntime: 4/8-bit experts, per-row or block scales, zero
points, constant weights (ORT's int8-activation path) and weights fed at run time."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_cpu_ep.ops import InputInfo, find

F = np.float32
T, H, INTER, E = 5, 64, 64, 4


def _fc(rng, bits, n, k, block, zp):
    w = rng.integers(0, 256, (E, n, k * bits // 8), dtype=np.uint8)
    nb = k // block if block else 1
    sc = (rng.random((E, n, nb) if block else (E, n)) * 0.01 + 0.002).astype(F)
    z = None
    if zp:
        z = rng.integers(0, 256, (E, n, (nb * bits + 7) // 8) if block else (E, (n * bits + 7) // 8), dtype=np.uint8)
    return w, sc, z


def _case(rng, bits, block, zp, act="relu"):
    x = rng.standard_normal((T, H)).astype(F)
    router = rng.standard_normal((T, E)).astype(F)
    n1 = 2 * INTER if act == "swiglu" else INTER
    w1, s1, z1 = _fc(rng, bits, n1, H, block, zp)
    w2, s2, z2 = _fc(rng, bits, H, INTER, block, zp)
    b1 = rng.standard_normal((E, n1)).astype(F) * 0.1
    ins = [x, router, w1, s1, b1, w2, s2, None, None, None, None, z1, z2]
    attrs = dict(k=2, activation_type=act, expert_weight_bits=bits)
    if act == "swiglu":
        attrs |= dict(swiglu_fusion=1, activation_alpha=1.702, activation_beta=1.0, swiglu_limit=7.0)
    if block:
        attrs["block_size"] = block
    return ins, attrs


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [0, 32])
@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("act", ["relu", "swiglu"])
def test_qmoe_runtime_weights_match_onnxruntime(kit, rng, bits, block, zp, act):
    ins, attrs = _case(rng, bits, block, zp, act)
    while ins[-1] is None:
        ins.pop()
    ref = kit.ort("QMoE", ins, 1, **attrs)[0]
    got = kit.ours("QMoE", ins, 1, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("bits,block,accuracy", [(4, 0, 0), (4, 32, 0), (4, 32, 4), (8, 32, 0), (8, 0, 4)])
@pytest.mark.parametrize("zp", [False, True])
def test_qmoe_constant_weights_match_onnxruntime(kit, rng, bits, block, accuracy, zp):
    """Constant experts: onnxruntime quantizes activations to int8 for block-wise 8-bit (and 4-bit at
    accuracy_level 4); the kernel reproduces it."""
    import onnxruntime as ort

    ins, attrs = _case(rng, bits, block, zp)
    if accuracy:
        attrs["accuracy_level"] = accuracy
    names = ["x", "router", "w1", "s1", "b1", "w2", "s2", "", "", "", "", "z1", "z2"]
    inits = [numpy_helper.from_array(v, n) for n, v in zip(names, ins) if v is not None and n not in ("x", "router", "")]
    node_inputs = [n if v is not None else "" for n, v in zip(names, ins)]
    while node_inputs[-1] == "":
        node_inputs.pop()
    node = helper.make_node("QMoE", node_inputs, ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ins[0].shape),
                                            helper.make_tensor_value_info("router", TensorProto.FLOAT, ins[1].shape)],
                              [onnx.ValueInfoProto(name="y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": ins[0], "router": ins[1]})[0]
    g = ort_graph.from_proto(model).graph
    n = g.nodes[0]
    args = [ins[0], ins[1]] + [g.initializers[i].numpy() if i else None for i in n.inputs[2:]]
    got = find("QMoE", "com.microsoft", 1).compute(n, args)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def test_qmoe_declines(kit):
    FL, U8 = TensorProto.FLOAT, TensorProto.UINT8
    infos = [InputInfo(FL, (T, H)), InputInfo(FL, (T, E)), InputInfo(U8, (E, INTER, H // 2)), InputInfo(FL, (E, INTER)),
             InputInfo(0, None, False), InputInfo(U8, (E, H, INTER // 2)), InputInfo(FL, (E, H))]
    for attrs, needle in ((dict(quant_type="fp4"), "quant_type"), (dict(weights_prepacked=1), "weights_prepacked"),
                          (dict(expert_weight_bits=3), "bits"), (dict(block_size=24), "block_size"),
                          (dict(activation_type="geglu"), "geglu")):
        d = kit.decline_of("QMoE", infos, **attrs)
        assert d is not None and needle in d.rejected, (attrs, d)
