"""com.microsoft DynamicQuantizeMatMul / MatMulIntegerToFloat (ops_extra_qmatmul) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo

# int8 weights times uint8 activations stay within 7 bits ([-64, 64)): onnxruntime's u8s8 GEMM on x86 without
# AVX-512 VNNI adds pairs of products in int16 (vpmaddubsw) and saturates beyond that, which its quantizer
# avoids the same way (reduce_range); the peer would be the one off, on such a machine


def _weights(rng, shape, dtype, a_dtype=np.uint8):
    info = np.iinfo(dtype)
    lo, hi = (-64, 64) if dtype == np.int8 and a_dtype == np.uint8 else (info.min, info.max + 1)
    return rng.integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("b_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_zp,with_bias", [(False, False), (True, True)])
def test_dynamic_quantize_matmul_matches_onnxruntime(kit, rng, b_dtype, per_column, with_zp, with_bias):
    K, N = 24, 10
    a = rng.standard_normal((2, 3, K)).astype(np.float32)
    info = np.iinfo(b_dtype)
    b = _weights(rng, (K, N), b_dtype)
    b_scale = (rng.random(N if per_column else ()) * 0.05 + 0.01).astype(np.float32)
    b_zp = rng.integers(info.min // 4, info.max // 4, N if per_column else ()).astype(b_dtype) if with_zp else None
    bias = rng.standard_normal(N).astype(np.float32) if with_bias else None
    ins = [a, b, np.asarray(b_scale, np.float32), None if b_zp is None else np.asarray(b_zp, b_dtype), bias]
    ref = kit.ort("DynamicQuantizeMatMul", ins, 1)[0]
    got = kit.ours("DynamicQuantizeMatMul", ins, 1)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_dtype,b_dtype", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("out_dtype", [np.float32, np.float16])
def test_matmul_integer_to_float_matches_onnxruntime(kit, rng, a_dtype, b_dtype, per_column, out_dtype):
    K, N = 16, 6
    ia = np.iinfo(a_dtype)
    a = rng.integers(ia.min, ia.max + 1, (4, K)).astype(a_dtype)
    b = _weights(rng, (K, N), b_dtype, a_dtype)
    a_scale = np.asarray(0.02, out_dtype)
    b_scale = (rng.random(N if per_column else ()) * 0.05 + 0.01).astype(out_dtype)
    a_zp = np.asarray(3, a_dtype)
    b_zp = np.asarray(rng.integers(0, 5, N if per_column else ()), b_dtype)
    bias = rng.standard_normal(N).astype(out_dtype)
    ins = [a, b, a_scale, np.asarray(b_scale, out_dtype), a_zp, b_zp, bias]
    ref = kit.ort("MatMulIntegerToFloat", ins, 1)[0]
    got = kit.ours("MatMulIntegerToFloat", ins, 1)[0]
    assert got.dtype == ref.dtype
    tol = 1e-5 if out_dtype == np.float32 else 2e-3
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=tol, atol=tol)


def test_qmatmul_declines(kit):
    F, I8 = TensorProto.FLOAT, TensorProto.INT8
    d = kit.decline_of("MatMulIntegerToFloat", [InputInfo(I8, (2, 4)), InputInfo(I8, (4, 3)), InputInfo(F, (2,)),
                                                InputInfo(F, ())])
    assert d is not None and "a_scale" in d.rejected
    d = kit.decline_of("DynamicQuantizeMatMul", [InputInfo(TensorProto.DOUBLE, (2, 4)), InputInfo(I8, (4, 3)),
                                                 InputInfo(F, ())])
    assert d is not None and "DOUBLE" in d.rejected
