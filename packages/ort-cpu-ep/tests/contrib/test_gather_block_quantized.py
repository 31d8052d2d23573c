"""GatherBlockQuantized in onnxruntime-genai's tied-embedding layout (uint8 data packing 4/8-bit values,
gather_axis 0, quantize_axis last) against onnxruntime: block sizes 16..256, with and without zero points,
float32 and float16 scales; the slots it declares (tests/integration/test_quantized_ops.py runs it in a session)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_graph import from_proto, zoo

ort = pytest.importorskip("onnxruntime")


def _table(rng, V, K, bits, block, with_zp, sdtype):
    w = rng.standard_normal((V, K)).astype(np.float32)
    q, scales, zp = zoo.quantize_blocks(w, bits, block)
    return q.reshape(V, K * bits // 8), scales.astype(sdtype), (zp if with_zp else None)


def _model(data, scales, zp, idx_shape, bits, block):
    names = ["D", "I", "S"] + (["Z"] if zp is not None else [])
    inits = [numpy_helper.from_array(data, "D"), numpy_helper.from_array(scales, "S")]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "Z"))
    node = helper.make_node("GatherBlockQuantized", names, ["Y"], name="/model/embed_tokens/GatherBlockQuantized",
                            domain="com.microsoft", bits=bits, block_size=block, gather_axis=0, quantize_axis=1)
    sdt = helper.np_dtype_to_tensor_dtype(scales.dtype)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("I", TensorProto.INT64, ["batch", "seq"])],
                              [helper.make_tensor_value_info("Y", sdt, None)], inits)
    assert len(idx_shape) == 2
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("with_zp", [False, True])
@pytest.mark.parametrize("sdtype", [np.float32, np.float16])
def test_embedding_layout_matches_onnxruntime(rng, bits, block, with_zp, sdtype):
    from ort_cpu_ep.ops import find

    V, K = 40, 512
    data, scales, zp = _table(rng, V, K, bits, block, with_zp, sdtype)
    model = _model(data, scales, zp, (2, 5), bits, block)
    idx = np.array([[0, 3, 39, 7, 3], [12, -1, -40, 25, 1]], np.int64)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"I": idx})[0]
    node = from_proto(model).graph.nodes[0]
    got = find("GatherBlockQuantized", "com.microsoft", 1).compute(node, [data, idx, scales, zp])[0]
    assert got.dtype == ref.dtype and got.shape == ref.shape == (2, 5, K)
    tol = 1e-3 if sdtype == np.float16 else 1e-6
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=tol, atol=tol if tol > 1e-6 else 0)


@pytest.mark.parametrize("with_zp", [False, True])
@pytest.mark.parametrize("sdtype", [np.float32, np.float16])
def test_embedding_layout_declares_its_slots_for_the_estimate_and_the_declaration(rng, with_zp, sdtype):
    from ort_cpu_ep.ops import find

    V, K, bits, block = 16, 256, 4, 32
    data, scales, zp = _table(rng, V, K, bits, block, with_zp, sdtype)
    m = from_proto(_model(data, scales, zp, (3, 7), bits, block))
    import ort_graph

    ort_graph.resolve_shapes(m, {"batch": 3, "seq": 7})
    node = m.graph.nodes[0]
    assert m.graph.values["Y"].shape == (3, 7, K) and m.graph.values["Y"].dtype == helper.np_dtype_to_tensor_dtype(np.dtype(sdtype))
    slots = dict(find("GatherBlockQuantized", "com.microsoft", 1).workspace_bytes(
        node, [(V, K // 2), (3, 7), (V, K // block)] + ([(V, K // block // 2)] if with_zp else [])))
    n = 21
    assert slots[0] >= n * K // 2 and slots[2] >= n * (K // block) * 4
    assert (1 in slots) == (sdtype == np.float16) and (slots.get(1, n * K * 4) >= n * K * 4)
    assert (3 in slots and 4 in slots) == with_zp


def test_general_layouts_still_match(rng):
    """int4 data along another axis takes the general path (a fresh array), still equal to the embedding path."""
    from ort_cpu_ep.ops import find

    V, K, bits, block = 8, 64, 4, 16
    data, scales, zp = _table(rng, V, K, bits, block, True, np.float32)
    impl = find("GatherBlockQuantized", "com.microsoft", 1)
    m = from_proto(_model(data, scales, zp, (1, 3), bits, block))
    node = m.graph.nodes[0]
    idx = np.array([[1, 7, 0]], np.int64)
    fast = impl.compute(node, [data, idx, scales, zp])[0]
    slow = impl._general(node, [data, idx, scales, zp])
    np.testing.assert_array_equal(fast, slow)
