"""Host launch code against the .cu signatures, without a GPU: a recording runtime over ort-abi's
NullDeviceAllocator checks that every launch passes exactly the parameters the kernel declares,
that grids cover the outputs, and that workspace requests equal the recipes."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from ort_cuda_ep import KERNEL_SOURCES, attention_recipe, matmul_nbits_recipe
from ort_cuda_ep._launch import ScratchOnly, compute
from ort_cuda_ep._ops import find_spec
from ort_cuda_ep.testing import SIGNATURES, RecordingRuntime


def _arr(rt, shape, dtype=np.float32):
    return rt.empty(shape, dtype)


def test_signatures_are_parsed_for_every_entry_point():
    assert set(SIGNATURES) == {e for s in KERNEL_SOURCES.values() for e in s.entry_points}
    assert SIGNATURES["attn_split_f32"][:7] == [ctypes.c_void_p] * 7


@pytest.mark.parametrize("op,shapes", [("Add", [(2, 3, 4), (4,)]), ("Mul", [(1, 8, 64), (1,)]), ("Pow", [(5, 1), (1, 7)])])
def test_binary_broadcast_strides(op, shapes):
    rt = RecordingRuntime()
    a, b = (_arr(rt, s) for s in shapes)
    (out,) = compute(rt, find_spec(op, "", 17), "n", [a, b], {}, ScratchOnly(rt))
    assert out.shape == np.broadcast_shapes(*shapes)
    entry, grid, block, values = rt.launches[0]
    n, dims, sa, sb = values[3], values[5:11], values[11:17], values[17:23]
    assert n == out.size and int(np.prod(dims)) == n and grid[0] * block[0] >= min(n, 256)
    # the strides reproduce numpy's broadcast element offsets
    for arr, strides in ((shapes[0], sa), (shapes[1], sb)):
        src = np.arange(int(np.prod(arr))).reshape(arr)
        want = np.broadcast_to(src, out.shape).reshape(-1)
        idx = np.indices(dims).reshape(6, -1)
        got = (idx * np.array(strides)[:, None]).sum(axis=0)
        assert np.array_equal(src.reshape(-1)[got], want)


@pytest.mark.parametrize("sa,sb,out", [((8, 64), (64, 32), (8, 32)), ((2, 8, 64), (64, 32), (2, 8, 32)),
                                       ((2, 8, 64), (2, 64, 32), (2, 8, 32)), ((64,), (64, 32), (32,)),
                                       ((8, 64), (64,), (8,))])
def test_matmul_shapes_and_grid(sa, sb, out):
    rt = RecordingRuntime()
    (y,) = compute(rt, find_spec("MatMul", "", 17), "n", [_arr(rt, sa), _arr(rt, sb)], {}, ScratchOnly(rt))
    assert y.shape == out
    _, grid, _, values = rt.launches[0]
    M, N = values[4], values[5]
    assert grid[0] * 64 >= N and grid[1] * 64 >= M and grid[2] * M * N == int(np.prod(out))


def test_gemm_trans_and_bias_strides():
    rt = RecordingRuntime()
    a, b, c = _arr(rt, (32, 16)), _arr(rt, (8, 32)), _arr(rt, (8,))
    (y,) = compute(rt, find_spec("Gemm", "", 13), "n", [a, b, c], {"transA": 1, "transB": 1}, ScratchOnly(rt))
    assert y.shape == (16, 8)
    v = rt.launches[0][3]
    assert v[4:7] == [16, 8, 32] and v[7:11] == [1, 16, 1, 32] and v[14:16] == [0, 1]


@pytest.mark.parametrize("m,path", [(1, "gemv"), (8, "gemv"), (9, "tiled"), (64, "tiled")])
def test_matmul_nbits_requests_the_recipe_workspace(m, path):
    rt = RecordingRuntime()
    n, k, bs = 96, 128, 32
    inputs = [_arr(rt, (m, k)), _arr(rt, (n, k // bs, bs // 2), np.uint8), _arr(rt, (n * k // bs,))]
    ws = ScratchOnly(rt)
    (y,) = compute(rt, find_spec("MatMulNBits", "com.microsoft", 1), "q", inputs, {"N": n, "K": k, "bits": 4, "block_size": bs}, ws)
    want = matmul_nbits_recipe(m, n, k, 4, bs)
    assert y.shape == (m, n) and want.path == path
    assert rt.counters.last["q"] == (("scratch", want.workspace_bytes) if want.workspace_bytes else ("none", 0))
    entries = [e for e, *_ in rt.launches]
    assert entries == (["mnb4_gemv_f32"] if path == "gemv" else ["mnb4_tiled_f32"])
    if path == "tiled":  # one block per 64x64 output tile: (column tiles, row tiles)
        assert rt.launches[0][1][:2] == (math.ceil(n / 64), math.ceil(m / 64))
    ws.release()
    assert rt.allocator.bytes_in_use == sum(a.nbytes for a in inputs) + y.nbytes


class _Planned:
    def __init__(self, rt, nbytes):
        self.buf = rt.allocator.alloc(nbytes)

    def preallocated(self, slot_id, nbytes):
        return self.buf.ptr if nbytes <= self.buf.nbytes else None

    def scratch(self, nbytes):
        raise AssertionError("planned workspace was large enough")


@pytest.mark.parametrize("b,s,kv,h,d", [(1, 1, 13824, 2, 64), (1, 1, 13825, 2, 64), (2, 3, 128, 8, 64), (1, 1, 4096, 2, 72)])
def test_attention_uses_the_recipe_layout(b, s, kv, h, d):
    rt = RecordingRuntime("a100")
    q, k, v = _arr(rt, (b, s, h * d)), _arr(rt, (b, kv, h * d)), _arr(rt, (b, kv, h * d))
    r = attention_recipe(b, s, kv, h, d, 108)
    planned = _Planned(rt, r.total_bytes)
    (o,) = compute(rt, find_spec("MultiHeadAttention", "com.microsoft", 1), "att", [q, k, v], {"num_heads": h}, planned)
    assert o.shape == q.shape and rt.counters.last["att"] == ("planned", r.total_bytes)
    split = rt.launches[0]
    assert split[1] == (b * h * s * r.num_splits,)
    values = split[3]
    base = planned.buf.ptr
    assert values[4] == base + r.lse_offset
    if r.num_splits > 1:
        assert values[5:7] == [base + r.lse_accum_offset, base + r.out_accum_offset]
        kps = values[-1]
        assert kps * r.num_splits >= kv and kps * (r.num_splits - 1) < kv  # every split has keys, all keys covered
        assert [e for e, *_ in rt.launches] == ["attn_split_f32", "attn_combine_f32"]
    else:
        assert values[5:7] == [0, 0] and len(rt.launches) == 1


@pytest.mark.parametrize("n_out", [1, 3, 4])
def test_skip_rms_norm_outputs(n_out):
    rt = RecordingRuntime()
    x, skip, g = _arr(rt, (2, 5, 64)), _arr(rt, (2, 5, 64)), _arr(rt, (64,))
    outs = compute(rt, find_spec("SkipSimplifiedLayerNormalization", "com.microsoft", 1), "n", [x, skip, g], {},
                   ScratchOnly(rt), n_out)
    assert len(outs) == n_out and outs[0].shape == (2, 5, 64)
    values = rt.launches[0][3]
    assert values[2] == 0 and values[7:9] == [10, 64]  # no bias; rows, cols
    assert (values[5] != 0) == (n_out > 2) and (values[6] != 0) == (n_out > 3)
    if n_out == 4:
        assert outs[1] is None and outs[2].shape == (2, 5, 1) and outs[3].shape == (2, 5, 64)


def test_gemm_is_cut_at_the_grid_limits(monkeypatch):
    import ort_cuda_ep._launch as L

    monkeypatch.setattr(L, "_MAX_ROWS", 128)
    monkeypatch.setattr(L, "_MAX_BATCH", 2)
    rt = RecordingRuntime()
    a, b = _arr(rt, (5, 300, 16)), _arr(rt, (5, 16, 8))
    (y,) = compute(rt, find_spec("MatMul", "", 17), "n", [a, b], {}, ScratchOnly(rt))
    launches = [v for _, _, _, v in rt.launches]
    assert len(launches) == 3 * 3  # batches (2, 2, 1) x rows (128, 128, 44)
    covered = set()
    for v in launches:
        z_count = next(g for e, g, _, vv in rt.launches if vv is v)[2]
        row0 = (v[2] - y.ptr) // 4 % (300 * 8) // 8
        z0 = (v[2] - y.ptr) // 4 // (300 * 8)
        assert v[0] == a.ptr + 4 * (z0 * 300 * 16 + row0 * 16) and v[1] == b.ptr + 4 * z0 * 16 * 8
        covered |= {(z, r) for z in range(z0, z0 + z_count) for r in range(row0, row0 + v[4])}
    assert covered == {(z, r) for z in range(5) for r in range(300)}


@pytest.mark.parametrize("dtype,sfx", [(np.float32, "f32"), (np.float16, "f16")])
def test_float16_uses_the_f16_entry_points(dtype, sfx):
    rt = RecordingRuntime()
    x, w = _arr(rt, (4, 64), dtype), _arr(rt, (64, 32), dtype)
    outs = [compute(rt, find_spec("Add", "", 17), "a", [x, x], {}, ScratchOnly(rt))[0],
            compute(rt, find_spec("Sigmoid", "", 17), "s", [x], {}, ScratchOnly(rt))[0],
            compute(rt, find_spec("Softmax", "", 17), "m", [x], {}, ScratchOnly(rt))[0],
            compute(rt, find_spec("MatMul", "", 17), "g", [x, w], {}, ScratchOnly(rt))[0]]
    assert all(o.dtype == np.dtype(dtype) for o in outs)
    q = _arr(rt, (1, 1, 128), dtype)
    k = _arr(rt, (1, 4096, 128), dtype)
    (o,) = compute(rt, find_spec("MultiHeadAttention", "com.microsoft", 1), "att", [q, k, k], {"num_heads": 2},
                   ScratchOnly(rt))
    assert o.dtype == np.dtype(dtype)
    entries = [e for e, *_ in rt.launches]
    assert entries == [f"binary_{sfx}", f"unary_{sfx}", f"softmax_{sfx}", f"matmul_{sfx}", f"attn_split_{sfx}",
                       f"attn_combine_{sfx}"]


def test_float16_matmul_nbits_workspace_and_offsets(monkeypatch):
    import ort_cuda_ep._launch as L

    rt = RecordingRuntime()
    m, n, k, bs = 16, 64, 128, 32
    inputs = [_arr(rt, (m, k), np.float16), _arr(rt, (n, k // bs, bs // 2), np.uint8), _arr(rt, (n * k // bs,), np.float16)]
    (y,) = compute(rt, find_spec("MatMulNBits", "com.microsoft", 1), "q", inputs,
                   {"N": n, "K": k, "bits": 4, "block_size": bs}, ScratchOnly(rt))
    assert y.dtype == np.float16 and rt.counters.last["q"] == ("none", 0)
    assert [e for e, *_ in rt.launches] == ["mnb4_tiled_f16"]
    # row chunks advance by float16 elements (2 bytes): A by rows of K, Y by rows of N
    monkeypatch.setattr(L, "_MAX_ROWS", 64)
    rt1 = RecordingRuntime()
    a1 = _arr(rt1, (100, k), np.float16)
    w = [_arr(rt1, (n, k // bs, bs // 2), np.uint8), _arr(rt1, (n * k // bs,), np.float16)]
    (y1,) = compute(rt1, find_spec("MatMulNBits", "com.microsoft", 1), "q", [a1, *w],
                    {"N": n, "K": k, "bits": 4, "block_size": bs}, ScratchOnly(rt1))
    (_, g0, _, v0), (_, g1, _, v1) = (launch[:4] for launch in rt1.launches)
    assert (v0[6], v1[6]) == (64, 36) and g0[1] == 1 and g1[1] == 1
    assert v1[0] == a1.ptr + 2 * 64 * k and v1[5] == y1.ptr + 2 * 64 * n
    rt2 = RecordingRuntime()
    a, b = _arr(rt2, (100, 8), np.float16), _arr(rt2, (8, 4), np.float16)
    (out,) = compute(rt2, find_spec("MatMul", "", 17), "g", [a, b], {}, ScratchOnly(rt2))
    second = rt2.launches[1][3]
    assert second[0] == a.ptr + 2 * 64 * 8 and second[2] == out.ptr + 2 * 64 * 4


def test_mixed_types_are_refused_at_launch():
    rt = RecordingRuntime()
    with pytest.raises(Exception, match="float32/float16"):
        compute(rt, find_spec("Add", "", 17), "a", [_arr(rt, (4,), np.float16), _arr(rt, (4,))], {}, ScratchOnly(rt))


@pytest.mark.parametrize("op,shapes", [("MatMul", [(4, 8), (8, 16)]), ("Softmax", [(3, 10)]), ("Add", [(2, 3), (3,)])])
def test_bfloat16_launches_the_bf16_entry_points(op, shapes):
    import ml_dtypes

    rt = RecordingRuntime()
    arrays = [rt.empty(s, ml_dtypes.bfloat16) for s in shapes]
    (out,) = compute(rt, find_spec(op, "", 17), "n", arrays, {}, ScratchOnly(rt))
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    assert all(entry.endswith("_bf16") for entry, *_ in rt.launches) and rt.launches


@pytest.mark.parametrize("m,entries", [(1, ["mnb8_gemv_f32"]), (16, ["mnb8_tiled_f32"])])
def test_eight_bit_matmul_nbits_launches(m, entries):
    rt = RecordingRuntime()
    n, k, bs = 64, 128, 32
    a, b, s = rt.empty((m, k)), rt.empty((n, k // bs, bs), np.uint8), rt.empty((n * k // bs,))
    (out,) = compute(rt, find_spec("MatMulNBits", "com.microsoft", 1), "q8", [a, b, s],
                     {"N": n, "K": k, "bits": 8, "block_size": bs}, ScratchOnly(rt))
    assert out.shape == (m, n) and [e for e, *_ in rt.launches] == entries
    assert rt.counters.last["q8"] == ("none", 0)


def test_tiled_matmul_nbits_row_chunks_compute_every_row_on_the_emulator(monkeypatch):
    """Row chunks (forced to one 64-row tile per launch) cover Y exactly; a grid short of the output is
    caught by the emulation instead of leaving rows unwritten."""
    import ort_cuda_ep._launch as L
    from ort_cuda_ep.testing import EmulatingRuntime

    monkeypatch.setattr(L, "_MAX_ROWS", 64)
    rt = EmulatingRuntime()
    rng = np.random.default_rng(5)
    m, n, k, bs = 130, 80, 64, 16
    a = rng.standard_normal((m, k)).astype(np.float32)
    q = rng.integers(0, 16, (n, k // bs, bs), dtype=np.uint8)
    b = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    s = (rng.random(n * k // bs).astype(np.float32) + 0.5) * 0.1
    attrs = {"N": n, "K": k, "bits": 4, "block_size": bs}
    (y,) = compute(rt, find_spec("MatMulNBits", "com.microsoft", 1), "q", [rt.to_device(t) for t in (a, b, s)], attrs,
                   ScratchOnly(rt))
    assert [launch[1] for launch in rt.launches] == [(2, 1), (2, 1), (2, 1)]
    w = ((q.reshape(n, k).astype(np.float32) - 8) * np.repeat(s.reshape(n, k // bs), bs, axis=1)).T
    np.testing.assert_allclose(rt.to_host(y), a @ w, rtol=1e-5, atol=1e-5)
    entry, _grid, block, values = rt.launches[0]
    args = [(v, t) for v, t in zip(values, SIGNATURES[entry])]
    with pytest.raises(AssertionError, match="does not cover"):
        rt.launch("matmul_nbits", entry, (1, 1), block, args)  # 64 columns of 80
