"""Every kernel against numpy / onnxruntime's CPU EP / onnx.reference, and workspace declared == used.

Each test runs twice: on the GPU (`gpu` marker; skipped with the discovery reason where there is none)
and on ort_cuda_ep.testing.EmulatingRuntime (`emulated`: each launch executed in numpy as its kernel
does), so the tests' own logic and the launch code they drive are checked in CI as well."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_abi import KernelContext, WorkspaceInputShape, declare_workspace
from ort_cuda_ep import CudaExecutionProvider, attention_recipe, matmul_nbits_recipe
from ort_cuda_ep._kernel import CudaKernel
from ort_cuda_ep._ops import find_spec


@pytest.fixture(scope="module", params=[pytest.param("device", marks=pytest.mark.gpu),
                                        pytest.param("emulated", marks=pytest.mark.emulated)])
def ep(request):
    """The real device; and, everywhere, the same tests on ort_cuda_ep.testing.EmulatingRuntime (each
    launch executed in numpy as its kernel does), so this suite's own logic runs in CI too."""
    if request.param == "emulated":
        import ort_cuda_ep._ep as ep_module
        from ort_cuda_ep.testing import EmulatingRuntime, fake_device

        mp = pytest.MonkeyPatch()
        mp.setattr(ep_module, "discover", lambda device_id=0: fake_device("h200"))
        ep = CudaExecutionProvider()
        ep._runtime = EmulatingRuntime("h200")
        yield ep
        mp.undo()
        return
    ep = CudaExecutionProvider()
    if not ep.can_run:
        pytest.skip(f"no CUDA driver/device: {ep.unavailable_reason}")
    yield ep
    ep.close()


RNG = np.random.default_rng(0)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _close(got, want, tol=1e-4):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)])
@pytest.mark.parametrize("sa,sb", [((4, 8, 16), (16,)), ((2, 1, 5), (1, 3, 5)), ((7,), ()), ((3, 4), (3, 4))])
def test_binary(ep, op, fn, sa, sb):
    a, b = _f(*sa), _f(*sb)
    if op == "Div":
        b = np.abs(b) + 0.5
    (y,), _ = ep.run_op(op, [a, b])
    _close(y, fn(a, b))


def test_pow_square(ep):
    a = _f(3, 64)
    (y,), _ = ep.run_op("Pow", [a, np.array(2.0, np.float32)])
    _close(y, a * a)


@pytest.mark.parametrize("op,fn", [("Relu", lambda x: np.maximum(x, 0)), ("Sigmoid", lambda x: 1 / (1 + np.exp(-x))),
                                   ("Tanh", np.tanh), ("Neg", np.negative), ("Exp", np.exp), ("Abs", np.abs),
                                   ("Sqrt", lambda x: np.sqrt(np.abs(x))), ("Reciprocal", lambda x: 1 / x)])
def test_unary(ep, op, fn):
    x = _f(1000)
    if op == "Sqrt":
        x = np.abs(x)
    (y,), _ = ep.run_op(op, [x])
    _close(y, fn(x), 1e-4 if op != "Reciprocal" else 1e-3)


@pytest.mark.parametrize("shape", [(4, 10), (2, 3, 1000), (1, 4097)])
def test_softmax(ep, shape):
    x = _f(*shape) * 4
    (y,), _ = ep.run_op("Softmax", [x], {"axis": -1})
    e = np.exp(x - x.max(-1, keepdims=True))
    _close(y, e / e.sum(-1, keepdims=True), 1e-5)


def test_rms_norm(ep):
    x, w = _f(3, 5, 64), _f(64)
    (y, inv), _ = ep.run_op("SimplifiedLayerNormalization", [x, w], {"axis": -1, "epsilon": 1e-6}, output_count=2)
    r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    _close(y, x * r * w)
    _close(inv, r)


@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_rms_norm(ep, with_bias):
    x, skip, w, bias = _f(2, 7, 96), _f(2, 7, 96), _f(96), _f(96)
    inputs = [x, skip, w] + ([bias] if with_bias else [])
    (y, _mean, inv, total), _ = ep.run_op("SkipSimplifiedLayerNormalization", inputs, {"epsilon": 1e-6},
                                          domain="com.microsoft", opset=1, output_count=4)
    s = x + skip + (bias if with_bias else 0)
    r = 1 / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-6)
    _close(total, s)
    _close(inv, r)
    _close(y, s * r * w)


@pytest.mark.parametrize("sa,sb", [((1, 64), (64, 48)), ((130, 70), (70, 200)), ((2, 33, 17), (17, 65)),
                                   ((3, 9, 40), (3, 40, 11)), ((64,), (64, 5))])
def test_matmul(ep, sa, sb):
    a, b = _f(*sa), _f(*sb)
    (y,), _ = ep.run_op("MatMul", [a, b])
    _close(y, a @ b, 1e-3)


@pytest.mark.parametrize("ta,tb,cshape", [(0, 0, (50,)), (1, 0, (40, 1)), (0, 1, ()), (1, 1, (40, 50))])
def test_gemm(ep, ta, tb, cshape):
    A, B, C = _f(40, 30), _f(30, 50), _f(*cshape)
    a, b = (A.T.copy() if ta else A), (B.T.copy() if tb else B)
    (y,), _ = ep.run_op("Gemm", [a, b, C], {"transA": ta, "transB": tb, "alpha": 0.5, "beta": 2.0}, opset=13)
    _close(y, 0.5 * A @ B + 2.0 * C, 1e-3)


def _ort_cpu(node, inputs, inits):
    import onnxruntime as ort

    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in inputs.items()]
    g = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def _ort_nbits(a, b, scales, zp, attrs):
    """onnxruntime's CPU MatMulNBits with these packed weights (and zero points when given)."""
    names = ["A", "B", "scales"] + (["zp"] if zp is not None else [])
    inits = [helper.make_tensor("B", TensorProto.UINT8, b.shape, b.tobytes(), raw=True),
             helper.make_tensor("scales", TensorProto.FLOAT, scales.shape, scales.tobytes(), raw=True)]
    if zp is not None:
        inits.append(helper.make_tensor("zp", TensorProto.UINT8, zp.shape, zp.tobytes(), raw=True))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", **attrs)
    return _ort_cpu(node, {"A": a}, inits)


def _quantized(n, k, bs, zero_points):
    kb = k // bs
    q = RNG.integers(0, 16, (n, kb, bs), dtype=np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    scales = (RNG.random(n * kb).astype(np.float32) + 0.5) * 0.05
    zp = RNG.integers(0, 16, (n, (kb + 1) // 2 * 2), dtype=np.uint8) if zero_points else None
    zp_packed = (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8).reshape(-1) if zero_points else None
    return packed, scales, zp_packed


@pytest.mark.parametrize("m", [1, 8, 9, 40, 130])  # 130: three row tiles, the last ragged
@pytest.mark.parametrize("zero_points", [False, True])
def test_matmul_nbits_vs_onnxruntime_and_workspace(ep, m, zero_points):
    n, k, bs = 96, 256, 32
    a = _f(m, k)
    b, scales, zp = _quantized(n, k, bs, zero_points)
    attrs = {"N": n, "K": k, "bits": 4, "block_size": bs}
    inputs = [a, b, scales] + ([zp] if zero_points else [])
    (y,), ctx = ep.run_op("MatMulNBits", inputs, attrs, domain="com.microsoft", opset=1, node_name="q4")
    _close(y, _ort_nbits(a, b, scales, zp, attrs), 2e-3)
    want = matmul_nbits_recipe(m, n, k, 4, bs).workspace_bytes
    source, used = ep.runtime.counters.last["q4"]
    assert used == want and source == ("scratch" if want else "none")
    kernel = CudaKernel(ep, find_spec("MatMulNBits", "com.microsoft", 1), _info("q4", "MatMulNBits", attrs))
    slots = declare_workspace(kernel, [_declared(t) for t in inputs])
    assert sum(s.size_bytes for s in slots) == used  # Level 2 == runtime


def _declared(t):
    """What a session declares for an input: its shape and element type."""
    return WorkspaceInputShape.shaped(t.shape, helper.np_dtype_to_tensor_dtype(np.asarray(t).dtype))


def _info(name, op, attrs):
    from ort_abi import KernelInfo

    return KernelInfo(name, op, "com.microsoft", attrs)


@pytest.mark.parametrize("b,s,kv,h,d,causal", [(1, 1, 13824, 2, 64, 0), (1, 1, 13825, 2, 64, 0), (2, 5, 300, 4, 32, 0), (1, 300, 300, 4, 32, 1),
                                               (1, 1, 4096, 8, 128, 0), (2, 64, 64, 2, 64, 1)])
def test_attention_vs_onnxruntime_with_planned_workspace(ep, b, s, kv, h, d, causal):
    q, k, v = _f(b, s, h * d), _f(b, kv, h * d), _f(b, kv, h * d)
    attrs = {"num_heads": h, "unidirectional": causal}
    r = attention_recipe(b, s, kv, h, d, ep.profile.sm_count)
    planned = ep.allocator.alloc(r.total_bytes)  # the memory plan's device buffer for slot 0
    try:
        (y,), ctx = ep.run_op("MultiHeadAttention", [q, k, v], attrs, domain="com.microsoft", opset=1,
                              workspace={0: planned}, node_name="mha")
    finally:
        ep.allocator.free(planned)
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft", **attrs)
    _close(y, _ort_cpu(node, {"q": q, "k": k, "v": v}, []), 1e-4)
    assert ep.runtime.counters.last["mha"] == ("planned", r.total_bytes)
    assert ctx.counters.workspace_from_plan == 1 and ctx.counters.scratch_fallbacks == 0


def test_attention_falls_back_to_scratch_when_the_plan_is_too_small(ep):
    q, k, v = _f(1, 1, 128), _f(1, 8192, 128), _f(1, 8192, 128)
    small = ep.allocator.alloc(16)
    try:
        _, ctx = ep.run_op("MultiHeadAttention", [q, k, v], {"num_heads": 2}, domain="com.microsoft", opset=1,
                           workspace={0: small}, node_name="mha_small")
    finally:
        ep.allocator.free(small)
    r = attention_recipe(1, 1, 8192, 2, 64, ep.profile.sm_count)
    assert ep.runtime.counters.last["mha_small"] == ("scratch", r.total_bytes)
    assert ctx.counters.workspace_misses == 1 and ctx.counters.scratch_bytes == r.total_bytes


def test_no_device_memory_leaks(ep):
    before = ep.allocator.bytes_in_use
    ep.run_op("MatMul", [_f(20, 30), _f(30, 40)])
    ep.run_op("MatMulNBits", [_f(16, 64), *(_quantized(32, 64, 32, False)[:2])],
              {"N": 32, "K": 64, "bits": 4, "block_size": 32}, domain="com.microsoft", opset=1)
    assert ep.allocator.bytes_in_use == before


def test_kernel_context_is_the_abi_one(ep):
    assert isinstance(ep.run_op("Relu", [_f(4)])[1], KernelContext)


def _h(*shape):
    return RNG.standard_normal(shape).astype(np.float16)


@pytest.mark.parametrize("half", [np.float16, ml_dtypes.bfloat16])
def test_half_elementwise_softmax_norms_matmul(ep, half):
    a, b, w = (RNG.standard_normal(s).astype(half) for s in ((8, 64), (64,), (64,)))
    f = np.float32
    lo = 1e-3 if half == np.float16 else 1e-2  # bfloat16 keeps 8 significant bits
    (y,), _ = ep.run_op("Mul", [a, b])
    assert y.dtype == np.dtype(half)
    _close(y.astype(f), a.astype(f) * b.astype(f), 1e-2)
    (y,), _ = ep.run_op("Sigmoid", [a])
    _close(y.astype(f), 1 / (1 + np.exp(-a.astype(f))), lo)
    (y,), _ = ep.run_op("Softmax", [a], {"axis": -1})
    e = np.exp(a.astype(f) - a.astype(f).max(-1, keepdims=True))
    _close(y.astype(f), e / e.sum(-1, keepdims=True), lo)
    (y, inv), _ = ep.run_op("SimplifiedLayerNormalization", [a, w], {"epsilon": 1e-6}, output_count=2)
    r = 1 / np.sqrt((a.astype(f) ** 2).mean(-1, keepdims=True) + 1e-6)
    assert inv.dtype == np.float32
    _close(y.astype(f), a.astype(f) * r * w.astype(f), 20 * lo)
    m = RNG.standard_normal((64, 32)).astype(half)
    (y,), _ = ep.run_op("MatMul", [a, m])
    _close(y.astype(f), a.astype(f) @ m.astype(f), 5e-2 if half == np.float16 else 2e-1)


@pytest.mark.parametrize("m", [1, 24])
def test_float16_matmul_nbits(ep, m):
    n, k, bs = 64, 128, 32
    a = _h(m, k)
    b, scales, _ = _quantized(n, k, bs, False)
    attrs = {"N": n, "K": k, "bits": 4, "block_size": bs}
    (y,), _ = ep.run_op("MatMulNBits", [a, b, scales.astype(np.float16)], attrs, domain="com.microsoft", opset=1,
                        node_name="q16")
    inits = [helper.make_tensor("B", TensorProto.UINT8, b.shape, b.tobytes(), raw=True),
             helper.make_tensor("scales", TensorProto.FLOAT, scales.shape,
                                scales.astype(np.float16).astype(np.float32).tobytes(), raw=True)]
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft", **attrs)
    want = _ort_cpu(node, {"A": a.astype(np.float32)}, inits)
    _close(y.astype(np.float32), want, 5e-2)
    assert ep.runtime.counters.last["q16"] == ("none", 0)  # both paths: no workspace


def test_float16_attention(ep):
    q, k, v = _h(1, 1, 256), _h(1, 5000, 256), _h(1, 5000, 256)
    (y,), _ = ep.run_op("MultiHeadAttention", [q, k, v], {"num_heads": 4}, domain="com.microsoft", opset=1)
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft", num_heads=4)
    want = _ort_cpu(node, {"q": q.astype(np.float32), "k": k.astype(np.float32), "v": v.astype(np.float32)}, [])
    _close(y.astype(np.float32), want, 1e-2)


def _reference(op, inputs, attrs, opset):
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), None)
           for n, a in zip(names, inputs) if n]
    model = helper.make_model(helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", 0, None)]),
                              opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {n: np.asarray(a) for n, a in zip(names, inputs) if n})[0]


_X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
_I = np.int64


@pytest.mark.parametrize("op,inputs,attrs,opset", [
    ("Reshape", [_X, np.array([4, -1], _I)], {}, 17),
    ("Unsqueeze", [_X, np.array([0, -1], _I)], {}, 13),
    ("Squeeze", [_X[:, :1], np.array([1], _I)], {}, 13),
    ("Flatten", [_X], {"axis": 2}, 13),
    ("Transpose", [_X], {"perm": [2, 0, 1]}, 17),
    ("Transpose", [_X.astype(np.float16)], {"perm": [0, 2, 1]}, 17),
    ("Slice", [_X, np.array([-1], _I), np.array([-4], _I), np.array([2], _I), np.array([-1], _I)], {}, 13),
    ("Slice", [_X, np.array([0, 1], _I), np.array([2, 9], _I), np.array([0, 1], _I), None], {}, 13),
    ("Expand", [_X[:, :1], np.array([2, 5, 4], _I)], {}, 13),
    ("Concat", [_X, _X * 2, _X[:, :0]], {"axis": 1}, 13),
    ("Gather", [_X, np.array([[1, -1]], _I)], {"axis": 1}, 13),
    ("Gather", [RNG.standard_normal((50, 8)).astype(np.float16), np.array([3, 49, 0], np.int32)], {}, 13),
    ("Cast", [_X * 100], {"to": TensorProto.FLOAT16}, 21),
    ("Cast", [_X * 100], {"to": TensorProto.INT32}, 21),
    ("Cast", [np.arange(-3, 9, dtype=_I)], {"to": TensorProto.FLOAT}, 21),
    ("Shape", [_X], {"start": 1}, 21),
])
def test_data_movement_vs_onnx_reference(ep, op, inputs, attrs, opset):
    (y,), _ = ep.run_op(op, inputs, attrs, opset=opset)
    want = _reference(op, inputs, attrs, opset)
    assert y.shape == want.shape and y.dtype == want.dtype
    np.testing.assert_array_equal(y, want)


# -- com.microsoft GroupQueryAttention ---------------------------------------------------------------
GQA_CASES = [  # (batch, seq, past, heads, kv_heads, head, packed, interleaved, rotary, dtype, seqlens)
    (1, 16, 0, 4, 2, 16, True, 0, 1, np.float32, None),               # the genai export's prefill
    (2, 1, 8, 4, 2, 16, True, 0, 1, np.float32, [8, 5]),               # ragged decode
    (1, 1, 4095, 32, 8, 128, True, 0, 1, np.float16, None),            # split-K decode, Llama-3-8B heads
    (2, 1, 3000, 8, 1, 64, False, 1, 1, np.float32, [3000, 1200]),     # MQA, interleaved, ragged splits
    (1, 3, 200, 8, 2, 256, False, 0, 0, np.float16, None),             # prompt chunk, head 256, no rotary
    (1, 300, 0, 4, 4, 32, True, 0, 1, np.float32, None),               # causal prefill over 3 key chunks
]


@pytest.mark.parametrize("b,s,p,h,hkv,d,packed,inter,rotary,dtype,seqlens", GQA_CASES)
def test_group_query_attention_vs_onnxruntime_with_planned_workspace(ep, gqa_kit, b, s, p, h, hkv, d, packed, inter,
                                                                      rotary, dtype, seqlens):
    inputs = gqa_kit.inputs(RNG, b, s, p, heads=h, kv_heads=hkv, head=d, packed=packed, dtype=dtype, seqlens=seqlens,
                            cos_rows=p + s)
    attrs = {"num_heads": h, "kv_num_heads": hkv, "do_rotary": rotary, "rotary_interleaved": inter}
    from ort_cuda_ep import gqa_recipe

    want = gqa_recipe(b, s, p, h, d, ep.profile.sm_count, hkv).total_bytes  # decode: splits by KV heads
    kernel = CudaKernel(ep, find_spec("GroupQueryAttention", "com.microsoft", 1),
                        _info("gqa", "GroupQueryAttention", attrs))
    slots = declare_workspace(kernel, [_declared(t) if t is not None else WorkspaceInputShape.missing()
                                       for t in inputs])
    assert sum(sl.size_bytes for sl in slots) == want  # Level 2 == recipe
    planned = ep.allocator.alloc(max(want, 1))
    try:
        (o, pk, pv), ctx = ep.run_op("GroupQueryAttention", inputs, attrs, domain="com.microsoft", opset=1,
                                     output_count=3, workspace={0: planned}, node_name="gqa")
    finally:
        ep.allocator.free(planned)
    assert ep.runtime.counters.last["gqa"] == ("planned" if want else "none", want)
    ro, rpk, rpv = gqa_kit.ort(inputs, attrs)
    tol = 5e-3 if dtype == np.float16 else 1e-4
    for bi, n in enumerate(np.asarray(inputs[5]) + 1):
        rows = min(s, int(n))
        _close(o[bi, :rows].astype(np.float32), ro[bi, :rows].astype(np.float32), tol)
        _close(pk[bi, :, :n].astype(np.float32), rpk[bi, :, :n].astype(np.float32), tol)
        _close(pv[bi, :, :n].astype(np.float32), rpv[bi, :, :n].astype(np.float32), tol)
        assert not pk[bi, :, n:].any() and not pv[bi, :, n:].any()


def test_group_query_attention_leaves_no_device_bytes(ep, gqa_kit):
    before = ep.allocator.bytes_in_use
    inputs = gqa_kit.inputs(RNG, 1, 1, 600, cos_rows=601)
    ep.run_op("GroupQueryAttention", inputs, {"num_heads": 4, "kv_num_heads": 2, "do_rotary": 1},
              domain="com.microsoft", opset=1, output_count=3)
    assert ep.allocator.bytes_in_use == before


def test_group_query_attention_bfloat16_vs_onnxruntime_in_float32(ep, gqa_kit):
    inputs = gqa_kit.inputs(RNG, 2, 1, 40, heads=8, kv_heads=2, head=64, seqlens=[40, 17], total=41, cos_rows=64)
    bf = [a.astype(ml_dtypes.bfloat16) if a is not None and a.dtype == np.float32 else a for a in inputs]
    attrs = {"num_heads": 8, "kv_num_heads": 2, "do_rotary": 1}
    (o, pk, _pv), _ = ep.run_op("GroupQueryAttention", bf, attrs, domain="com.microsoft", opset=1, output_count=3)
    widened = [a.astype(np.float32) if a is not None and a.dtype == np.dtype(ml_dtypes.bfloat16) else a for a in bf]
    ro, rpk, _ = gqa_kit.ort(widened, attrs)
    for b, n in enumerate(np.asarray(inputs[5]) + 1):
        np.testing.assert_allclose(o[b, :1].astype(np.float32), ro[b, :1], rtol=3e-2, atol=3e-2)
        np.testing.assert_allclose(pk[b, :, :n].astype(np.float32), rpk[b, :, :n], rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op,inputs,attrs,opset", [
    ("Where", [RNG.random((2, 1, 4)) > 0.5, _X[:, :1], _X], {}, 17),
    ("IsNaN", [np.array([1.0, np.nan, -np.inf], np.float32)], {}, 20),
    ("ReduceMean", [_X], {"axes": [-1], "keepdims": 1}, 17),
    ("ReduceSum", [_X, np.array([1, 2], _I)], {"keepdims": 0}, 13),
    ("Sin", [_X * 10], {}, 17),
    ("Cos", [_X.astype(ml_dtypes.bfloat16)], {}, 17),
])
def test_where_reduce_and_trigonometry_vs_onnx_reference(ep, op, inputs, attrs, opset):
    (y,), _ = ep.run_op(op, inputs, attrs, opset=opset)
    want = _reference(op, inputs, attrs, opset)
    assert y.shape == want.shape and y.dtype == want.dtype
    np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=1e-2 if y.dtype.itemsize == 2 else 1e-5,
                               atol=1e-2 if y.dtype.itemsize == 2 else 1e-5)


@pytest.mark.parametrize("m", [1, 24, 130])
@pytest.mark.parametrize("zero_points", [False, True])
def test_eight_bit_matmul_nbits_vs_onnxruntime(ep, m, zero_points):
    n, k, bs = 96, 256, 32
    kb = k // bs
    a = _f(m, k)
    b = RNG.integers(0, 256, (n, kb, bs), dtype=np.uint8)
    scales = (RNG.random(n * kb).astype(np.float32) + 0.5) * 0.01
    zp = RNG.integers(0, 256, n * kb, dtype=np.uint8) if zero_points else None
    attrs = {"N": n, "K": k, "bits": 8, "block_size": bs}
    (y,), _ = ep.run_op("MatMulNBits", [a, b, scales] + ([zp] if zero_points else []), attrs, domain="com.microsoft",
                        opset=1, node_name="q8")
    _close(y, _ort_nbits(a, b, scales, zp, attrs), 2e-3)
    assert ep.runtime.counters.last["q8"] == ("none", 0)  # both paths: no workspace


@pytest.mark.parametrize("xs,ws,attrs", [
    ((2, 8, 20, 20), (70, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # several 64x64 tiles, ragged
    ((1, 16, 15, 15), (16, 1, 3, 3), {"group": 16, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),  # depthwise
    ((2, 4, 9, 7), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((1, 6, 33), (5, 6, 3), {"auto_pad": "SAME_LOWER", "strides": [2]}),  # 1-D
])
def test_conv_vs_onnxruntime_no_workspace(ep, xs, ws, attrs):
    x, w, b = _f(*xs), _f(*ws), _f(ws[0])
    (y,), ctx = ep.run_op("Conv", [x, w, b], attrs, opset=17, node_name="conv")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    _close(y, _ort_cpu(node, {"x": x, "w": w, "b": b}, []), 1e-4)
    assert ep.runtime.counters.last["conv"] == ("none", 0)
    kernel = CudaKernel(ep, find_spec("Conv", "", 17), _info("conv", "Conv", attrs))
    assert declare_workspace(kernel, [_declared(t) for t in (x, w, b)]) == []  # Level 2 == runtime: none


@pytest.mark.parametrize("half", [np.float16, ml_dtypes.bfloat16])
def test_half_conv(ep, half):
    x, w = _f(1, 8, 12, 12), _f(12, 4, 3, 3)
    attrs = {"group": 2, "pads": [1, 1, 1, 1]}
    (y,), _ = ep.run_op("Conv", [x.astype(half), w.astype(half)], attrs, opset=17)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    want = _ort_cpu(node, {"x": x.astype(half).astype(np.float32), "w": w.astype(half).astype(np.float32)}, [])
    _close(np.asarray(y).astype(np.float32), want, 3e-2 if half == np.float16 else 1e-1)


@pytest.mark.parametrize("seqlens,S,H,D", [([1, 2, 4], 4, 2, 64), ([100, 37, 128], 128, 4, 32), ([300], 300, 1, 128)])
def test_packed_attention_vs_the_spec_with_planned_workspace(ep, packed_kit, seqlens, S, H, D):
    from ort_cuda_ep._packed_recipe import packed_attention_recipe

    off, cum = packed_kit.layout(seqlens, S)
    T, Din, total = int(cum[-1]), 48, 3 * H * D
    x, w, bias = _f(T, Din) * 0.3, _f(Din, total) * 0.3, _f(total) * 0.3
    ab = _f(len(seqlens), H, S, S)
    attrs = {"num_heads": H}
    r = packed_attention_recipe(T, H * D, H * D, H, 4)
    planned = ep.allocator.alloc(r.total_bytes)
    try:
        (y,), ctx = ep.run_op("PackedAttention", [x, w, bias, off, cum, ab], attrs, domain="com.microsoft", opset=1,
                              workspace={0: planned}, node_name="pa")
    finally:
        ep.allocator.free(planned)
    qkv = x.astype(np.float64) @ w + bias
    q, k, v = (qkv[:, i * H * D:(i + 1) * H * D].reshape(T, H, D) for i in range(3))
    _close(y, packed_kit.reference(q, k, v, off, cum, ab.astype(np.float64), 1 / np.sqrt(D)), 2e-4)
    assert ep.runtime.counters.last["pa"] == ("planned", r.total_bytes)
    kernel = CudaKernel(ep, find_spec("PackedAttention", "com.microsoft", 1), _info("pa", "PackedAttention", attrs))
    slots = declare_workspace(kernel, [_declared(t) for t in (x, w, bias, off, cum, ab)])
    assert [s.size_bytes for s in slots] == [r.total_bytes]  # Level 2 == runtime


@pytest.mark.parametrize("seqlens,S,H,D", [([3, 1, 4], 4, 2, 64), ([129, 7], 160, 3, 96)])
def test_packed_multihead_attention_vs_the_spec(ep, packed_kit, seqlens, S, H, D):
    off, cum = packed_kit.layout(seqlens, S)
    T = int(cum[-1])
    q, k, v = _f(T, H * D), _f(T, H * D), _f(T, H * D)
    bias = _f(3 * H * D)
    (y,), _ = ep.run_op("PackedMultiHeadAttention", [q, k, v, bias, off, cum], {"num_heads": H},
                        domain="com.microsoft", opset=1, node_name="pmha")
    split = [(a + bias[i * H * D:(i + 1) * H * D]).reshape(T, H, D).astype(np.float64) for i, a in enumerate((q, k, v))]
    _close(y, packed_kit.reference(*split, off, cum, None, 1 / np.sqrt(D)), 2e-4)
    assert ep.runtime.counters.last["pmha"] == ("none", 0)
