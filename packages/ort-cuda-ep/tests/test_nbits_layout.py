"""The 4-bit layout matmul_nbits.cu assumes (nibble order, block scales, packed zero points),
checked on the CPU: a numpy port of its dequant4() against onnxruntime's CPU MatMulNBits; and the
tiled path's walk (64x64 output tiles, 16-deep K slices dequantized per tile, zero padding at the
ragged edges) for 4- and 8-bit weights against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper


def dequant4(B, scales, zp, n_dim, k_dim, block_size):
    """Element (k, n) exactly as the kernel computes it."""
    k_blocks = -(-k_dim // block_size)
    row_bytes = k_blocks * (block_size // 2)
    flat = B.reshape(-1)
    W = np.empty((k_dim, n_dim), np.float32)
    for n in range(n_dim):
        for k in range(k_dim):
            byte = int(flat[n * row_bytes + (k >> 1)])
            q = (byte >> 4) if k & 1 else (byte & 0xF)
            kb = k // block_size
            z = 8
            if zp is not None:
                zb = int(zp[n * ((k_blocks + 1) >> 1) + (kb >> 1)])
                z = (zb >> 4) if kb & 1 else (zb & 0xF)
            W[k, n] = np.float32(q - z) * scales[n * k_blocks + kb]
    return W


def _onnxruntime(ort, a, B, scales, zp, n, k, bits, bs):
    """onnxruntime's CPU MatMulNBits on A with the given packed weights."""
    m = a.shape[0]
    names = ["A", "B", "scales"] + (["zp"] if zp is not None else [])
    inits = [helper.make_tensor("B", TensorProto.UINT8, B.shape, B.tobytes(), raw=True),
             helper.make_tensor("scales", TensorProto.FLOAT, scales.shape, scales.tobytes(), raw=True)]
    if zp is not None:
        inits.append(helper.make_tensor("zp", TensorProto.UINT8, zp.shape, zp.tobytes(), raw=True))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=k, N=n, bits=bits, block_size=bs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"A": a})[0]


@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("k,bs", [(64, 16), (96, 32)])
def test_kernel_layout_matches_onnxruntime(zero_points, k, bs):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    n, m, kb = 12, 3, k // bs
    q = rng.integers(0, 16, (n, kb, bs), dtype=np.uint8)
    B = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    scales = (rng.random(n * kb).astype(np.float32) + 0.5) * 0.1
    zp = None
    if zero_points:
        z = rng.integers(0, 16, (n, (kb + 1) // 2 * 2), dtype=np.uint8)
        zp = (z[:, 0::2] | (z[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    want = _onnxruntime(ort, a, B, scales, zp, n, k, 4, bs)
    np.testing.assert_allclose(a @ dequant4(B, scales, zp, n, k, bs), want, rtol=1e-4, atol=1e-4)


def dequant8(B, scales, zp, n_dim, k_dim, block_size):
    """Element (k, n) of 8-bit weights exactly as the kernel's dequant<8> computes it."""
    k_blocks = -(-k_dim // block_size)
    flat = B.reshape(-1)
    W = np.empty((k_dim, n_dim), np.float32)
    for n in range(n_dim):
        for k in range(k_dim):
            kb = k // block_size
            z = int(zp[n * k_blocks + kb]) if zp is not None else 128
            W[k, n] = np.float32(int(flat[n * k_blocks * block_size + k]) - z) * scales[n * k_blocks + kb]
    return W


@pytest.mark.parametrize("zero_points", [False, True])
def test_eight_bit_layout_matches_onnxruntime(zero_points):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(1)
    n, m, k, bs = 12, 3, 64, 32
    kb = k // bs
    B = rng.integers(0, 256, (n, kb, bs), dtype=np.uint8)
    scales = (rng.random(n * kb).astype(np.float32) + 0.5) * 0.01
    zp = rng.integers(0, 256, n * kb, dtype=np.uint8) if zero_points else None
    a = rng.standard_normal((m, k)).astype(np.float32)
    want = _onnxruntime(ort, a, B, scales, zp, n, k, 8, bs)
    np.testing.assert_allclose(a @ dequant8(B, scales, zp, n, k, bs), want, rtol=1e-4, atol=1e-4)


def tiled_walk(a, dequant_slice, n_dim, k_dim, tm=64, tn=64, tk=16):
    """matmul_nbits.cu tiled_impl's loops: per (row tile, column tile), per 16-deep K slice, the A slice
    and that slice of dequantized weights (zeros past M, N, K), float32 accumulation."""
    m_dim = a.shape[0]
    y = np.zeros((m_dim, n_dim), np.float32)
    for row0 in range(0, m_dim, tm):
        for col0 in range(0, n_dim, tn):
            acc = np.zeros((tm, tn), np.float32)
            for k0 in range(0, k_dim, tk):
                a_s = np.zeros((tm, tk), np.float32)
                w_s = np.zeros((tk, tn), np.float32)
                rows, ks, cols = min(tm, m_dim - row0), min(tk, k_dim - k0), min(tn, n_dim - col0)
                a_s[:rows, :ks] = a[row0:row0 + rows, k0:k0 + ks]
                w_s[:ks, :cols] = dequant_slice(k0, ks, col0, cols)
                acc += a_s @ w_s
            y[row0:row0 + tm, col0:col0 + tn] = acc[:min(tm, m_dim - row0), :min(tn, n_dim - col0)]
    return y


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("zero_points", [False, True])
def test_tiled_walk_matches_onnxruntime(bits, zero_points):
    """Ragged in every direction: M = 70 (2 row tiles), N = 80 (2 column tiles), K = 72 (a half
    K slice, and a last quantization block padded past K)."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(2 + bits)
    m, n, k, bs = 70, 80, 72, 16
    kb = -(-k // bs)
    if bits == 4:
        q = rng.integers(0, 16, (n, kb, bs), dtype=np.uint8)
        B = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
        zp = None
        if zero_points:
            z = rng.integers(0, 16, (n, (kb + 1) // 2 * 2), dtype=np.uint8)
            zp = (z[:, 0::2] | (z[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
        W = dequant4(B, scales := (rng.random(n * kb).astype(np.float32) + 0.5) * 0.1, zp, n, k, bs)
    else:
        B = rng.integers(0, 256, (n, kb, bs), dtype=np.uint8)
        scales = (rng.random(n * kb).astype(np.float32) + 0.5) * 0.01
        zp = rng.integers(0, 256, n * kb, dtype=np.uint8) if zero_points else None
        W = dequant8(B, scales, zp, n, k, bs)
    a = rng.standard_normal((m, k)).astype(np.float32)
    want = _onnxruntime(ort, a, B, scales, zp, n, k, bits, bs)
    got = tiled_walk(a, lambda k0, ks, c0, cs: W[k0:k0 + ks, c0:c0 + cs], n, k)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
