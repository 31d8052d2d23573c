"""com.microsoft quantized-operator kernels (ops_extra_qlinear) and GemmFastGelu / Inverse / Trilu vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

F = np.float32


def _q(rng, shape, dt):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


# int8 weights times uint8 activations stay within 7 bits ([-64, 64)): onnxruntime's u8s8 GEMM on x86 without
# AVX-512 VNNI adds pairs of products in int16 (vpmaddubsw) and saturates beyond that, which its quantizer
# avoids the same way (reduce_range); the peer would be the one off, on such a machine
def _w8(rng, shape):
    return rng.integers(-64, 64, shape).astype(np.int8)


def _close_codes(got, ref, steps=1):
    """Quantized outputs agree up to `steps` codes: MLAS's vectorized float arithmetic rounds a few values
    near .5 the other way (~0.5% of QLinearMul codes)."""
    assert got.dtype == ref.dtype and got.shape == ref.shape
    diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
    assert diff.max() <= steps, diff.max()
    assert (diff == 0).mean() > 0.97


@pytest.mark.parametrize("dt", [np.uint8, np.int8, np.int16, np.uint16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_contrib_quantize_dequantize(kit, rng, dt, per_axis):
    x = (rng.standard_normal((2, 3, 4)) * 3).astype(F)
    scale = (rng.random(3) * 0.05 + 0.01).astype(F) if per_axis else np.array(0.03, F)
    zp = np.asarray(_q(rng, scale.shape, dt) // 4, dt)
    q_ref = kit.ort("QuantizeLinear", [x, scale, zp], 1, axis=1)[0]
    q_got = kit.ours("QuantizeLinear", [x, scale, zp], 1, axis=1)[0]
    np.testing.assert_array_equal(q_got, q_ref)
    d_ref = kit.ort("DequantizeLinear", [q_ref, scale, zp], 1, axis=1)[0]
    d_got = kit.ours("DequantizeLinear", [q_ref, scale, zp], 1, axis=1)[0]
    np.testing.assert_allclose(d_got, d_ref, rtol=1e-6)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("bshape", [(4, 30, 20), (20,), (1, 30, 1)])
def test_qlinear_binary(kit, rng, op, dt, bshape):
    a, b = _q(rng, (4, 30, 20), dt), _q(rng, bshape, dt)
    ins = [a, np.array(0.05, F), np.array(3, dt), b, np.array(0.02, F), np.array(-2 if dt == np.int8 else 5, dt),
           np.array(0.07 if op == "QLinearAdd" else 0.3, F), np.array(1, dt)]
    _close_codes(kit.ours(op, ins, 1)[0], kit.ort(op, ins, 1)[0])


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.2})])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_unary(kit, rng, op, attrs, dt):
    x = _q(rng, (3, 50), dt)
    ins = [x, np.array(0.05, F), np.array(4, dt), np.array(0.004 if op == "QLinearSigmoid" else 0.04, F),
           np.array(0 if dt == np.int8 else 10, dt)]
    _close_codes(kit.ours(op, ins, 1, **attrs)[0], kit.ort(op, ins, 1, **attrs)[0])


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_global_average_pool(kit, rng, channels_last, dt):
    x = _q(rng, (2, 5, 6, 3) if channels_last else (2, 3, 5, 6), dt)
    ins = [x, np.array(0.05, F), np.array(2, dt), np.array(0.03, F), np.array(1, dt)]
    attrs = dict(channels_last=channels_last)
    _close_codes(kit.ours("QLinearGlobalAveragePool", ins, 1, **attrs)[0],
                 kit.ort("QLinearGlobalAveragePool", ins, 1, **attrs)[0])


def test_qlinear_concat(kit, rng):
    dt = np.uint8
    ins = [np.array(0.04, F), np.array(7, dt), _q(rng, (2, 3), dt), np.array(0.05, F), np.array(3, dt),
           _q(rng, (2, 5), dt), np.array(0.02, F), np.array(9, dt)]
    _close_codes(kit.ours("QLinearConcat", ins, 1, axis=1)[0], kit.ort("QLinearConcat", ins, 1, axis=1)[0])


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 1)])
@pytest.mark.parametrize("quantized_out", [False, True])
@pytest.mark.parametrize("per_column", [False, True])
def test_qgemm(kit, rng, trans_a, trans_b, quantized_out, per_column):
    M, K, N = 3, 8, 5
    a = _q(rng, (K, M) if trans_a else (M, K), np.uint8)
    b = _w8(rng, (N, K) if trans_b else (K, N))
    sb = (rng.random(N) * 0.01 + 0.01).astype(F) if per_column else np.array(0.02, F)
    zb = np.zeros(N if per_column else (), np.int8)
    c = rng.integers(-500, 500, (M, N)).astype(np.int32)
    ins = [a, np.array(0.03, F), np.array(120, np.uint8), b, sb, zb, c]
    if quantized_out:
        ins += [np.array(0.5, F), np.array(128, np.uint8)]
    attrs = dict(transA=trans_a, transB=trans_b, alpha=0.8)
    got, ref = kit.ours("QGemm", ins, 1, **attrs)[0], kit.ort("QGemm", ins, 1, **attrs)[0]
    if quantized_out:
        _close_codes(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_gemm_fast_gelu_inverse_trilu(kit, rng):
    x, w, b = (rng.standard_normal(s).astype(F) for s in ((2, 3, 8), (8, 6), (6,)))
    # onnxruntime has no CPU GemmFastGelu: compare with its FastGelu on the same product
    ref = kit.ort("FastGelu", [x @ w, b], 1)[0]
    np.testing.assert_allclose(kit.ours("GemmFastGelu", [x, w, b], 1)[0], ref, rtol=1e-5, atol=1e-5)
    m = (rng.standard_normal((2, 4, 4)) + 4 * np.eye(4)).astype(F)
    np.testing.assert_allclose(kit.ours("Inverse", [m], 1)[0], kit.ort("Inverse", [m], 1)[0], rtol=1e-4, atol=1e-5)
    t = rng.standard_normal((2, 4, 5)).astype(F)
    for upper in (0, 1):
        for k in (-1, 0, 2):
            ins = [t, np.array(k, np.int64)]
            np.testing.assert_array_equal(kit.ours("Trilu", ins, 1, upper=upper)[0],
                                          kit.ort("Trilu", ins, 1, upper=upper)[0])


def test_qlinear_declines_per_channel(kit):
    from onnx import TensorProto

    from ort_cpu_ep.ops import InputInfo

    U8, FL = TensorProto.UINT8, TensorProto.FLOAT
    infos = [InputInfo(U8, (2, 3)), InputInfo(FL, (3,)), InputInfo(U8, (3,)), InputInfo(U8, (2, 3)),
             InputInfo(FL, ()), InputInfo(U8, ()), InputInfo(FL, ()), InputInfo(U8, ())]
    d = kit.decline_of("QLinearAdd", infos)
    assert d is not None and "per-channel" in d.rejected
    d = kit.decline_of("QLinearSigmoid", [InputInfo(TensorProto.INT16, (4,))])
    assert d is not None and "INT16" in d.rejected
