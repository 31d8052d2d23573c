"""The C GroupQueryAttention and (Skip)SimplifiedLayerNormalization (csrc/gqa_kernel.c, csrc/norm_kernel.c)
against the numpy kernels (the reference) and onnxruntime, one node at a time through the CPU provider."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import one_node_model as _model
from ort_cpu_ep.testing import run_one_node as _run

MS = "com.microsoft"
F, I32 = TensorProto.FLOAT, TensorProto.INT32
EP = "CPUExecutionProvider"




def _onnxruntime(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=[EP])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _compare_all(model, feeds, tol, onnxruntime=True):
    """C vs numpy on every output, and vs onnxruntime unless it refuses the case (its GroupQueryAttention takes
    head sizes that are multiples of 16 only)."""
    c, numpy_ref = _run(model, feeds, "C"), _run(model, feeds, "numpy")
    assert c.keys() == numpy_ref.keys()
    for name, want in numpy_ref.items():
        assert c[name].shape == want.shape, name
        np.testing.assert_allclose(c[name], want, rtol=tol, atol=tol, err_msg=f"C vs numpy: {name}")
    if onnxruntime:
        for name, want in _onnxruntime(model, feeds).items():
            np.testing.assert_allclose(c[name], want, rtol=tol, atol=tol, err_msg=f"C vs onnxruntime: {name}")
    return c


# ---- GroupQueryAttention ----

def _gqa(B, S, P, N, NKV, H, *, rotary=True, interleaved=0, packed=True, total=None, seqlens=None, seed=0,
         rot_half=None, scale=None):
    rng = np.random.default_rng(seed)
    total = P + S if total is None else total
    seqlens = np.full(B, total - 1, np.int32) if seqlens is None else np.asarray(seqlens, np.int32)
    max_pos, half = 64, rot_half or H // 2
    inits = [numpy_helper.from_array(np.cos(rng.standard_normal((max_pos, half))).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(rng.standard_normal((max_pos, half))).astype(np.float32), "sin")]
    width = (N + 2 * NKV) * H if packed else N * H
    inputs = [helper.make_tensor_value_info("q", F, [B, S, width])]
    feeds = {"q": rng.standard_normal((B, S, width)).astype(np.float32)}
    names = ["q", "", ""]
    if not packed:
        for n in ("k", "v"):
            inputs.append(helper.make_tensor_value_info(n, F, [B, S, NKV * H]))
            feeds[n] = rng.standard_normal((B, S, NKV * H)).astype(np.float32)
        names = ["q", "k", "v"]
    for n in ("pk", "pv"):
        inputs.append(helper.make_tensor_value_info(n, F, [B, NKV, P, H]))
        feeds[n] = rng.standard_normal((B, NKV, P, H)).astype(np.float32)
    inputs += [helper.make_tensor_value_info("sl", I32, [B]), helper.make_tensor_value_info("tot", I32, [])]
    feeds |= {"sl": seqlens, "tot": np.array(total, np.int32)}
    names += ["pk", "pv", "sl", "tot"] + (["cos", "sin"] if rotary else [])
    present = max(total, P)
    outputs = [helper.make_tensor_value_info("o", F, [B, S, N * H]), helper.make_tensor_value_info("k_out", F, [B, NKV, present, H]),
               helper.make_tensor_value_info("v_out", F, [B, NKV, present, H])]
    extra = {"scale": scale} if scale is not None else {}
    node = helper.make_node("GroupQueryAttention", names, ["o", "k_out", "v_out"], domain=MS, num_heads=N,
                            kv_num_heads=NKV, do_rotary=int(rotary), rotary_interleaved=interleaved, **extra)
    return _model(node, inputs, outputs, inits if rotary else ()), feeds


_HEADS = [(4, 2, 16), (6, 2, 80), (2, 2, 8), (8, 1, 12), (3, 1, 5)]
_ROTARY = [(True, 0), (True, 1), (False, 0)]


@pytest.mark.parametrize("B,S,P", [(1, 1, 0), (1, 1, 9), (2, 1, 5), (1, 6, 0), (2, 5, 0), (1, 3, 4)])
@pytest.mark.parametrize("N,NKV,H,rotary,interleaved", [  # rotary rotates pairs: only even head sizes have it
    (*heads, *rot) for heads in _HEADS for rot in _ROTARY if not (rot[0] and heads[2] % 2)])
def test_gqa_c_matches_numpy_and_onnxruntime(library, B, S, P, N, NKV, H, rotary, interleaved):
    model, feeds = _gqa(B, S, P, N, NKV, H, rotary=rotary, interleaved=interleaved, seed=B * 100 + S * 10 + P + H)
    _compare_all(model, feeds, 2e-5, onnxruntime=H % 16 == 0)


@pytest.mark.parametrize("packed", [True, False])
def test_gqa_c_separate_key_value_partial_rotary_and_scale(library, packed):
    model, feeds = _gqa(1, 3, 4, 4, 2, 32, packed=packed, rot_half=8, scale=0.3)  # rotary_dim 16 of 32
    _compare_all(model, feeds, 2e-5)


def test_gqa_c_padded_batch_entries_match_numpy(library):
    """Batched first prompt with a shorter entry (seqlens_k below total - 1): its padded rows and keys masked
    as the numpy kernel masks them (onnxruntime agrees on the rows it defines; compared against numpy only)."""
    model, feeds = _gqa(2, 5, 0, 4, 2, 16, seqlens=[4, 2])
    c, ref = _run(model, feeds, "C"), _run(model, feeds, "numpy")
    for name in ref:
        np.testing.assert_allclose(c[name], ref[name], rtol=2e-5, atol=2e-5, err_msg=name)


def test_gqa_c_refuses_inconsistent_seqlens(library):
    model, feeds = _gqa(1, 1, 4, 4, 2, 16)
    feeds["sl"] = np.array([9], np.int32)  # past 9 > past length 4
    with pytest.raises(ort_abi.KernelError, match=r"seqlens_k\[0\] = 9 does not fit past length 4"):
        _run(model, feeds, "C")


def test_gqa_c_refuses_positions_beyond_the_cos_cache(library):
    model, feeds = _gqa(1, 1, 70, 4, 2, 16)  # position 70 >= the 64 cache rows
    with pytest.raises(ort_abi.KernelError, match="beyond cos_cache's 64 rows"):
        _run(model, feeds, "C")


@pytest.mark.parametrize("attr,value", [("local_window_size", 4), ("softcap", 2.0), ("qk_output", 1), ("smooth_softmax", 1)])
def test_gqa_attributes_outside_the_c_set_go_to_numpy(library, attr, value):
    model, _ = _gqa(1, 1, 3, 4, 2, 16)
    node = model.graph.node[0]
    node.attribute.append(helper.make_attribute(attr, value))
    if attr == "qk_output":
        node.output.append("qk")
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    assert c_kernels.kernel_language(ep.entry(m.graph.nodes[0])) == "numpy"


def test_gqa_estimate_and_declaration_agree(library):
    model, _ = _gqa(1, 4, 8, 4, 2, 16)
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    kernel = ep.entry(node).create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    shapes = [ort_abi.WorkspaceInputShape.shaped((1, 4, 128), F), ort_abi.WorkspaceInputShape.missing(),
              ort_abi.WorkspaceInputShape.missing(), ort_abi.WorkspaceInputShape.shaped((1, 2, 8, 16), F),
              ort_abi.WorkspaceInputShape.shaped((1, 2, 8, 16), F)]
    slots = ort_abi.declare_workspace(kernel, shapes)
    kernel.release()
    threads = ctypes.CDLL(str(c_kernels.library_path())).ort_cpu_ep_threads()
    per_thread = (16 + 12 + 15) // 16 * 16 * 4  # the rotated query row and a row of scores, 16-float rounded
    assert [(s.slot_id, s.size_bytes) for s in slots] == [(0, threads * per_thread)]
    assert ep.estimate(node) == threads * per_thread


# ---- (Skip)SimplifiedLayerNormalization ----

def _skip_norm(shape, skip_shape, *, bias=False, outputs=("y", "", "", "s"), seed=0):
    rng = np.random.default_rng(seed)
    hid = shape[-1]
    inputs = [helper.make_tensor_value_info("x", F, list(shape)), helper.make_tensor_value_info("skip", F, list(skip_shape))]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "skip": rng.standard_normal(skip_shape).astype(np.float32)}
    inits = [numpy_helper.from_array(rng.standard_normal(hid).astype(np.float32), "gamma")]
    names = ["x", "skip", "gamma"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(hid).astype(np.float32), "bias"))
        names.append("bias")
    outs = [helper.make_tensor_value_info(o, F, list(shape)) for o in outputs if o]
    node = helper.make_node("SkipSimplifiedLayerNormalization", names, list(outputs), domain=MS, epsilon=1e-6)
    return _model(node, inputs, outs, inits), feeds


@pytest.mark.parametrize("shape,skip_shape", [((1, 1, 64), (1, 1, 64)), ((2, 5, 80), (2, 5, 80)), ((7, 33), (7, 33)),
                                              ((2, 3, 16), (3, 16))])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("outputs", [("y", "", "", "s"), ("y",)])
def test_skip_simplified_norm_c_matches_numpy_and_onnxruntime(library, shape, skip_shape, bias, outputs):
    model, feeds = _skip_norm(shape, skip_shape, bias=bias, outputs=outputs, seed=len(shape) + shape[-1])
    _compare_all(model, feeds, 1e-5)


@pytest.mark.parametrize("shape", [(1, 1, 64), (2, 7, 80), (5, 3), (4, 2, 3, 24)])
def test_simplified_norm_c_matches_numpy_and_onnxruntime(library, shape):
    rng = np.random.default_rng(shape[-1])
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], epsilon=1e-6, axis=-1, stash_type=1)
    model = _model(node, [helper.make_tensor_value_info("x", F, list(shape))],
                   [helper.make_tensor_value_info("y", F, list(shape))],
                   [numpy_helper.from_array(rng.standard_normal(shape[-1]).astype(np.float32), "w")])
    _compare_all(model, {"x": rng.standard_normal(shape).astype(np.float32)}, 1e-5)


def test_norm_statistics_outputs_go_to_numpy(library):
    model, _ = _skip_norm((1, 2, 16), (1, 2, 16), outputs=("y", "", "inv", "s"))
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    assert c_kernels.kernel_language(ep.entry(m.graph.nodes[0])) == "numpy"


def test_skip_norm_c_refuses_a_skip_that_does_not_tile_the_input(library):
    model, feeds = _skip_norm((2, 3, 16), (2, 3, 16))
    feeds["skip"] = np.ones((5, 16), np.float32)  # 5 rows do not tile the input's 6
    with pytest.raises(ort_abi.KernelError, match="skip must hold whole rows"):
        _run(model, feeds, "C")


# ---- QuickGelu (the SiLU of the MLPs) ----

@pytest.mark.parametrize("shape", [(1, 1, 7), (2, 5, 96), (3, 1000), (1, 16)])
@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_quick_gelu_c_matches_numpy_and_onnxruntime(library, shape, alpha):
    rng = np.random.default_rng(shape[-1])
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    x.reshape(-1)[:4] = [0.0, -200.0, 200.0, 80.0][: x.size]  # exp overflowing and underflowing
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=alpha)
    model = _model(node, [helper.make_tensor_value_info("x", F, list(shape))], [helper.make_tensor_value_info("y", F, list(shape))])
    _compare_all(model, {"x": x}, 2e-6)


def test_quick_gelu_exp_is_within_a_few_ulp_over_the_float_range(library, isa_cap):
    x = np.concatenate([np.linspace(-100, 100, 200001), [np.nan, np.inf, -np.inf]]).astype(np.float32)
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.0)
    model = _model(node, [helper.make_tensor_value_info("x", F, [x.size])], [helper.make_tensor_value_info("y", F, [x.size])])
    got = _run(model, {"x": x}, "C")["y"]
    with np.errstate(over="ignore", invalid="ignore"):  # the infinities: compared separately below
        ref = (x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64))))
    finite = np.isfinite(x)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=4e-7, atol=1e-30)
    assert np.isnan(got[-3]) and got[-2] == np.inf and np.isnan(got[-1])  # nan; inf / (1 + 0); -inf / inf
    low = finite & (x < -89)
    assert np.signbit(got[low]).all() and (got[low] == 0).all()  # x / inf: -0 as numpy gives


def test_quick_gelu_with_a_bias_goes_to_numpy(library):
    node = helper.make_node("QuickGelu", ["x", "b"], ["y"], domain=MS)
    model = _model(node, [helper.make_tensor_value_info("x", F, [2, 4]), helper.make_tensor_value_info("b", F, [4])],
                   [helper.make_tensor_value_info("y", F, [2, 4])])
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    assert c_kernels.kernel_language(ep.entry(m.graph.nodes[0])) == "numpy"


@pytest.mark.parametrize("S,P,rotary", [(1, 200, False), (24, 0, True)])
def test_gqa_c_threads_give_the_same_result(library, S, P, rotary):
    """Output rows split across threads (enough work here for 3: rows x keys x head size >= 3 x 2^16): each
    row's arithmetic is the same whatever thread runs it."""
    from ort_cpu_ep import intra_op_thread_scope

    lib = ctypes.CDLL(str(c_kernels.library_path()))
    model, feeds = _gqa(1, S, P, 16, 2, 64, rotary=rotary)
    results = []
    for n in (1, 3):
        with intra_op_thread_scope(n):
            assert lib.ort_cpu_ep_threads() == n
            results.append(_run(model, feeds, "C", threads=n))
    for name in results[0]:
        np.testing.assert_array_equal(results[0][name], results[1][name], err_msg=name)


