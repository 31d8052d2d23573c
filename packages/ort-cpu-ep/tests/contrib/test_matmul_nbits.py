"""MatMulNBits against onnxruntime: bits 2/4/8, zero points absent/packed/float, ragged K, bias, float16."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo
from ort_cpu_ep.ops.ops_extra_quant import dequantize_weight, unpack_bits


def _weights(rng, K, N, bits, bs, zp_kind, dt=np.float32):
    kb = (K + bs - 1) // bs
    b = rng.integers(0, 256, (N, kb, bs * bits // 8), dtype=np.uint8)
    scales = (rng.random((N, kb)) * 0.1 + 0.01).astype(dt)
    zp = None
    if zp_kind == "packed":
        zp = rng.integers(0, 256, (N, (kb * bits + 7) // 8), dtype=np.uint8)
    elif zp_kind == "float":
        zp = (rng.random((N, kb)) * 2**bits).astype(dt)
    return b, scales, zp


# onnxruntime's CPU kernel rejects 8-bit weights with float zero points; that case is checked elementwise below
_CASES = [(bits, zp) for bits in (2, 4, 8) for zp in ("none", "packed", "float") if (bits, zp) != (8, "float")]


@pytest.mark.parametrize("bits,zp_kind", _CASES)
@pytest.mark.parametrize("K,N,bs", [(64, 48, 32), (80, 24, 16), (256, 16, 128)])
@pytest.mark.parametrize("accuracy_level", [0, 4])
def test_matmul_nbits_matches_onnxruntime(kit, rng, bits, K, N, bs, zp_kind, accuracy_level):
    b, scales, zp = _weights(rng, K, N, bits, bs, zp_kind)
    a = rng.standard_normal((2, 3, K)).astype(np.float32)
    attrs = dict(K=K, N=N, bits=bits, block_size=bs, accuracy_level=accuracy_level)
    ref = kit.ort("MatMulNBits", [a, b, scales, zp], 1, **attrs)[0]
    got = kit.ours("MatMulNBits", [a, b, scales, zp], 1, **attrs)[0]
    assert got.shape == ref.shape == (2, 3, N) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_matmul_nbits_bias_and_float16(kit, rng):
    K, N, bs = 64, 32, 32
    b, scales, zp = _weights(rng, K, N, 4, bs, "packed", np.float16)
    a = rng.standard_normal((5, K)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float16)
    attrs = dict(K=K, N=N, bits=4, block_size=bs)
    ref = kit.ort("MatMulNBits", [a, b, scales, zp, None, bias], 1, **attrs)[0]
    got = kit.ours("MatMulNBits", [a, b, scales, zp, None, bias], 1, **attrs)[0]
    assert got.dtype == np.float16 and got.shape == (5, N)
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=2e-2)


def test_dequantize_weight_is_the_documented_formula(rng):
    K, N, bs = 40, 3, 16
    b, scales, zp = _weights(rng, K, N, 4, bs, "packed")
    w = dequantize_weight(b, scales, zp, K=K, N=N, bits=4, block_size=bs)
    n, k = 2, 37
    byte = b[n, k // bs, (k % bs) // 2]
    q = (byte >> 4) if k % 2 else (byte & 0xF)
    zbyte = zp[n, (k // bs) // 2]
    z = (zbyte >> 4) if (k // bs) % 2 else (zbyte & 0xF)
    assert w.shape == (N, K)
    assert w[n, k] == pytest.approx((int(q) - int(z)) * float(scales[n, k // bs]))
    assert unpack_bits(np.array([[0b11100100]], np.uint8), 2, 4).tolist() == [[0, 1, 2, 3]]


def test_matmul_nbits_8bit_float_zero_points_elementwise(kit, rng):
    K, N, bs = 48, 5, 16
    b, scales, zp = _weights(rng, K, N, 8, bs, "float")
    a = rng.standard_normal((3, K)).astype(np.float32)
    w = np.empty((N, K), np.float64)
    for n in range(N):
        for k in range(K):
            w[n, k] = (float(b[n, k // bs, k % bs]) - float(zp[n, k // bs])) * float(scales[n, k // bs])
    got = kit.ours("MatMulNBits", [a, b, scales, zp], 1, K=K, N=N, bits=8, block_size=bs)[0]
    np.testing.assert_allclose(got, a.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-4)


def test_matmul_nbits_empty_weight_gives_bias(kit, rng):
    a = rng.standard_normal((2, 64)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    ins = [a, np.zeros((8, 0, 16), np.uint8), np.zeros((8, 0), np.float32), None, None, bias]
    ref = kit.ort("MatMulNBits", ins, 1, K=64, N=8, bits=4, block_size=32)[0]
    got = kit.ours("MatMulNBits", ins, 1, K=64, N=8, bits=4, block_size=32)[0]
    np.testing.assert_allclose(got, ref)
    np.testing.assert_allclose(got, np.broadcast_to(bias, (2, 8)))


@pytest.mark.parametrize("attrs,inputs,needle", [
    (dict(bits=3), None, "bits=3"),
    (dict(block_size=24), None, "block_size=24"),
    (dict(weight_prepacked=1), None, "weight_prepacked"),
    (dict(), "g_idx", "g_idx"),
    (dict(), "double", "DOUBLE"),
    (dict(), "badK", "!= K"),
])
def test_matmul_nbits_declines(kit, attrs, inputs, needle):
    base = dict(K=64, N=32, bits=4, block_size=32) | attrs
    infos = [InputInfo(TensorProto.FLOAT, (2, 64)), InputInfo(TensorProto.UINT8, (32, 2, 16)),
             InputInfo(TensorProto.FLOAT, (32, 2))]
    if inputs == "g_idx":
        infos += [InputInfo(0, None, present=False), InputInfo(TensorProto.INT32, (64,))]
    elif inputs == "double":
        infos[0] = InputInfo(TensorProto.DOUBLE, (2, 64))
    elif inputs == "badK":
        infos[0] = InputInfo(TensorProto.FLOAT, (2, 65))
    d = kit.decline_of("MatMulNBits", infos, **base)
    assert d is not None and needle.upper() in d.rejected.upper(), d
    assert d.accepts and d.remedy


def _const_b_model(a, b, scales, zp, **attrs):
    """A one-node model whose B/scales/zero points are initializers (so onnxruntime prepacks B)."""
    import onnx
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "S")]
    names = ["A", "B", "S"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "Z"))
        names.append("Z")
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "A", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)], [onnx.ValueInfoProto(name="Y")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


@pytest.mark.parametrize("bits,K,bs,zp_kind", [(4, 64, 32, "none"), (4, 300, 128, "packed"), (8, 100, 64, "packed"),
                                               (2, 64, 32, "none"), (4, 64, 32, "float"), (8, 64, 16, "none")])
@pytest.mark.parametrize("accuracy_level", [0, 4])
def test_matmul_nbits_constant_weights_match_onnxruntime_int8_compute(kit, rng, bits, K, bs, zp_kind, accuracy_level):
    """With constant B and accuracy_level 4 onnxruntime quantizes A per block to int8; we reproduce it."""
    import onnxruntime as ort

    import ort_graph

    N = 24
    b, scales, zp = _weights(rng, K, N, bits, bs, zp_kind)
    a = rng.standard_normal((3, K)).astype(np.float32)
    model = _const_b_model(a, b, scales, zp, K=K, N=N, bits=bits, block_size=bs, accuracy_level=accuracy_level)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"A": a})[0]
    g = ort_graph.from_proto(model).graph
    node = g.nodes[0]
    impl = kit.cpu.find("MatMulNBits", "com.microsoft", 1)
    got = impl.compute(node, [a] + [g.initializers[n].numpy() for n in node.inputs[1:]])[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("bits", [4, 8, 2])
@pytest.mark.parametrize("with_zp", [False, True])
@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
def test_gather_block_quantized_uint8_matches_onnxruntime(kit, rng, bits, with_zp, idx_dtype):
    V, K, bs = 12, 64, 16
    data = rng.integers(0, 256, (V, K * bits // 8), dtype=np.uint8)
    scales = rng.random((V, K // bs)).astype(np.float32)
    zp = rng.integers(0, 256, (V, (K // bs * bits + 7) // 8), dtype=np.uint8) if with_zp else None
    idx = np.array([[1, 3, 11], [0, -1, -12]], idx_dtype)
    attrs = dict(bits=bits, block_size=bs, gather_axis=0, quantize_axis=1)
    ins = [data, idx, scales, zp]
    ref = kit.ort("GatherBlockQuantized", ins, 1, **attrs)[0]
    got = kit.ours("GatherBlockQuantized", ins, 1, **attrs)[0]
    assert got.shape == ref.shape == (2, 3, K)
    np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("dt", ["int4", "uint4"])
@pytest.mark.parametrize("shape,gather_axis,quantize_axis", [((6, 32, 4), 0, 1), ((32, 6, 4), 1, 0),
                                                             ((6, 4, 32), 0, 2), ((5, 48), 0, 1)])
@pytest.mark.parametrize("with_zp", [False, True])
def test_gather_block_quantized_int4_matches_onnxruntime(kit, rng, dt, shape, gather_axis, quantize_axis, with_zp):
    """int4/uint4 tables as initializers (onnxruntime's Python API takes no int4 feeds)."""
    import ml_dtypes
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    np_dt = getattr(ml_dtypes, dt)
    lo, hi = (-8, 8) if dt == "int4" else (0, 16)
    data = rng.integers(lo, hi, shape).astype(np_dt)
    sshape = list(shape)
    sshape[quantize_axis] = shape[quantize_axis] // 16
    scales = rng.random(sshape).astype(np.float32)
    zp = rng.integers(lo, hi, sshape).astype(np_dt) if with_zp else None
    idx = np.array([2, 0, 3, -1], np.int64)
    attrs = dict(bits=4, block_size=16, gather_axis=gather_axis, quantize_axis=quantize_axis)
    inits = [numpy_helper.from_array(data, "D"), numpy_helper.from_array(scales, "S")]
    names = ["D", "I", "S"] + (["Z"] if with_zp else [])
    if with_zp:
        inits.append(numpy_helper.from_array(zp, "Z"))
    node = helper.make_node("GatherBlockQuantized", names, ["Y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("I", TensorProto.INT64, idx.shape)],
                              [onnx.ValueInfoProto(name="Y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)], ir_version=10)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"I": idx})[0]
    got = kit.ours("GatherBlockQuantized", [data, idx, scales, zp], 1, **attrs)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_gather_block_quantized_declines(kit):
    F, U8 = TensorProto.FLOAT, TensorProto.UINT8
    d = kit.decline_of("GatherBlockQuantized", [InputInfo(TensorProto.INT8, (4, 8)), InputInfo(TensorProto.INT64, (2,)),
                                                InputInfo(F, (4, 1))], block_size=16)
    assert d is not None and "INT8" in d.rejected
    d = kit.decline_of("GatherBlockQuantized", [InputInfo(U8, (4, 8)), InputInfo(TensorProto.INT64, (2,)),
                                                InputInfo(F, (4, 1))], block_size=16, gather_axis=1)
    assert d is not None and "gather_axis=1" in d.rejected


def test_matmul_nbits_workspace_is_the_dequantized_band(kit, rng):
    from ort_cpu_ep.ops._registry import workspace_scope
    from ort_cpu_ep.ops.ops_extra_quant import matmul_nbits_workspace_bytes

    K, N, bs = 64, 48, 32
    b, scales, zp = _weights(rng, K, N, 4, bs, "packed")
    node = kit.make_node("MatMulNBits", 4, 1, K=K, N=N, bits=4, block_size=bs)
    impl = kit.cpu.find("MatMulNBits", kit.MS, 1)
    (slot, nbytes), = impl.workspace_bytes(node, [(3, K), b.shape, scales.shape, zp.shape])
    assert (slot, nbytes) == (0, 4 * N * K) and matmul_nbits_workspace_bytes(node, [None, None]) == [(0, nbytes)]
    assert matmul_nbits_workspace_bytes(node, [None, (N, 0, 16)]) == []
    buf = np.zeros(nbytes, np.uint8)
    seen = []
    a = rng.standard_normal((3, K)).astype(np.float32)
    with workspace_scope(lambda s, n: seen.append((s, n)) or buf):
        got = impl.compute(node, [a, b, scales, zp])[0]
    ref = kit.ort("MatMulNBits", [a, b, scales, zp], 1, K=K, N=N, bits=4, block_size=bs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert seen == [(0, nbytes)] and buf.any()


def test_matmul_nbits_several_bands(kit, rng):
    """K * N above the 16 MiB band: the weight is dequantized in several bands of rows."""
    K, N, bs = 8192, 1100, 128
    b, scales, zp = _weights(rng, K, N, 4, bs, "none")
    a = rng.standard_normal((2, K)).astype(np.float32)
    attrs = dict(K=K, N=N, bits=4, block_size=bs)
    ref = kit.ort("MatMulNBits", [a, b, scales], 1, **attrs)[0]
    got = kit.ours("MatMulNBits", [a, b, scales], 1, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("bits", [2, 4])
def test_unpack_bits_into_equals_unpack_bits(bits):
    from ort_cpu_ep.ops.ops_extra_quant import unpack_bits_into

    packed = np.arange(256, dtype=np.uint8).reshape(4, 8, 8)
    out = np.full((4, 8, 8, 8 // bits), np.nan, np.float32)
    unpack_bits_into(packed, bits, out)
    assert np.array_equal(out.reshape(4, 8, -1), unpack_bits(packed, bits, 8 * (8 // bits)).astype(np.float32))
