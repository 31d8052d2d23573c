"""com.microsoft SparseAttention (ops_extra_sparse) against onnxruntime, whose CPU kernel needs past and present
in one buffer: the reference runs through IOBinding with the same OrtValue bound as past and present."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_cpu_ep.ops import InputInfo

F = np.float32
NAMES = ["q", "k", "v", "pk", "pv", "rows", "cols", "tot", "ktot", "cos", "sin"]


def _onnxruntime(ins, attrs):
    import onnxruntime as ort

    vis, node_in = [], []
    for n, a in zip(NAMES, ins):
        node_in.append("" if a is None else n)
        if a is not None:
            vis.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    shape = ins[3].shape
    node = helper.make_node("SparseAttention", node_in, ["o", "pko", "pvo"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("o", TensorProto.FLOAT, None),
                                                 helper.make_tensor_value_info("pko", TensorProto.FLOAT, shape),
                                                 helper.make_tensor_value_info("pvo", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    k_buf, v_buf = ins[3].copy(), ins[4].copy()  # kept alive: the OrtValues borrow them
    kv = ort.OrtValue.ortvalue_from_numpy(k_buf), ort.OrtValue.ortvalue_from_numpy(v_buf)
    for n, a in zip(NAMES, ins):
        if a is not None and n not in ("pk", "pv"):
            io.bind_cpu_input(n, a)
    io.bind_ortvalue_input("pk", kv[0])
    io.bind_ortvalue_input("pv", kv[1])
    io.bind_output("o", "cpu")
    io.bind_ortvalue_output("pko", kv[0])
    io.bind_ortvalue_output("pvo", kv[1])
    sess.run_with_iobinding(io)
    return [io.get_outputs()[0].numpy(), kv[0].numpy().copy(), kv[1].numpy().copy()]


def _case(rng, B, S, totals, layouts, rot=False, packed=False, N=4, NK=2, H=16, M=64, bs=16):
    nb = M // bs
    masks = []
    for lay in range(layouts):
        mk = np.tril(np.ones((nb, nb), np.int32))
        if lay == 1:
            mk[np.arange(nb)[:, None] - np.arange(nb)[None, :] > 1] = 0  # local band
        masks.append(mk)
    rows = np.stack([np.concatenate([[0], np.cumsum(mk.sum(1))]) for mk in masks]).astype(np.int32)
    cols = np.full((layouts, max(int(mk.sum()) for mk in masks)), -1, np.int32)
    for lay, mk in enumerate(masks):
        c = np.concatenate([np.nonzero(mk[i])[0] for i in range(nb)])
        cols[lay, : len(c)] = c
    q = rng.standard_normal((B, S, N * H)).astype(F)
    k = rng.standard_normal((B, S, NK * H)).astype(F)
    v = rng.standard_normal((B, S, NK * H)).astype(F)
    pk, pv = (rng.standard_normal((B, NK, M, H)).astype(F) for _ in range(2))
    t = np.array(totals, np.int32)
    cos = sin = None
    if rot:
        ang = rng.random((M, H // 2)).astype(F)
        cos, sin = np.cos(ang), np.sin(ang)
    ins = ([np.concatenate([q, k, v], -1), None, None] if packed else [q, k, v])
    ins += [pk, pv, rows, cols, np.array(int(t.max()), np.int32), t, cos, sin]
    return ins, dict(num_heads=N, kv_num_heads=NK, sparse_block_size=bs, do_rotary=int(rot))


CASES = {
    "prompt": dict(B=1, S=40, totals=[40], layouts=1),
    "prompt_two_layouts": dict(B=1, S=48, totals=[48], layouts=2),
    "decode": dict(B=1, S=1, totals=[37], layouts=2),
    "decode_first_block": dict(B=1, S=1, totals=[5], layouts=1),
    "chunk": dict(B=1, S=3, totals=[30], layouts=1),
    "decode_batch_equal": dict(B=2, S=1, totals=[50, 50], layouts=1),
    "rotary_decode": dict(B=1, S=1, totals=[44], layouts=2, rot=True),
    "rotary_packed_prompt": dict(B=1, S=20, totals=[20], layouts=1, rot=True, packed=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sparse_attention_matches_onnxruntime(kit, rng, name):
    ins, attrs = _case(rng, **CASES[name])
    ref = _onnxruntime(ins, attrs)
    got = kit.ours("SparseAttention", ins, 3, **attrs)
    for r, o in zip(ref, got):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)


def test_sparse_attention_declines(kit):
    FL = TensorProto.FLOAT
    infos = [InputInfo(FL, (1, 1, 64))] * 5
    d = kit.decline_of("SparseAttention", infos, 3, num_heads=4, kv_num_heads=2, sparse_block_size=8)
    assert d is not None and "sparse_block_size" in d.rejected
    d = kit.decline_of("SparseAttention", infos, 3, num_heads=4, kv_num_heads=3, sparse_block_size=16)
    assert d is not None and "kv_num_heads" in d.rejected
