"""GroupQueryAttention against onnxruntime: prefill, decode, ragged batches, packed QKV, rotary, local window,
softcap, scale, subsequent prompt chunks, attention bias, head sinks, float16; workspace and declines."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo, find
from ort_cpu_ep.ops.ops_extra_attention import gqa_workspace_bytes


def _inputs(rng, B, S, P, N, NK, H, *, packed=False, rot=False, rotdim=None, seqlens=None, total=None,
            bias=False, sink=False, dt=np.float32):
    q = rng.standard_normal((B, S, N * H)).astype(dt)
    k = rng.standard_normal((B, S, NK * H)).astype(dt)
    v = rng.standard_normal((B, S, NK * H)).astype(dt)
    pk = rng.standard_normal((B, NK, P, H)).astype(dt)
    pv = rng.standard_normal((B, NK, P, H)).astype(dt)
    total = P + S if total is None else total
    seqlens = np.full(B, total - 1, np.int32) if seqlens is None else np.asarray(seqlens, np.int32)
    cos = sin = None
    if rot:
        ang = rng.random((64, (rotdim or H) // 2)) * 3
        cos, sin = np.cos(ang).astype(dt), np.sin(ang).astype(dt)
    ins = ([np.concatenate([q, k, v], -1), None, None] if packed else [q, k, v])
    ins += [pk, pv, seqlens, np.array(total, np.int32), cos, sin]
    if bias or sink:
        ins += [None, rng.standard_normal((B, 1, S, total)).astype(dt) if bias else None,
                rng.standard_normal(N).astype(dt) if sink else None]
    return ins


CASES = {
    "prefill": dict(B=1, S=8, P=0),
    "prefill_batch2": dict(B=2, S=8, P=0),
    "decode": dict(B=1, S=1, P=8),
    "decode_batch2": dict(B=2, S=1, P=8),
    "decode_ragged": dict(B=2, S=1, P=8, seqlens=[8, 5], total=9),
    "prefill_right_padded": dict(B=2, S=6, P=0, seqlens=[5, 3], total=6),
    "packed_prefill": dict(B=2, S=5, P=0, packed=True, NK=1),
    "packed_decode": dict(B=2, S=1, P=6, packed=True, NK=1),
    "rotary_prefill": dict(B=1, S=8, P=0, rot=True),
    "rotary_decode": dict(B=2, S=1, P=7, rot=True),
    "rotary_interleaved": dict(B=1, S=1, P=7, rot=True, inter=True, H=32),
    "rotary_partial": dict(B=1, S=3, P=4, rot=True, rotdim=16, H=32),
    "rotary_packed": dict(B=1, S=4, P=0, rot=True, packed=True),
    "local_window_prefill": dict(B=1, S=8, P=0, lws=3),
    "local_window_decode": dict(B=1, S=1, P=9, lws=3),
    "softcap": dict(B=1, S=8, P=3, softcap=2.0),
    "scale": dict(B=1, S=8, P=0, scale=0.3),
    "subsequent_prompt": dict(B=1, S=4, P=6, rot=True),
    "attention_bias": dict(B=2, S=4, P=0, bias=True),
    "head_sink": dict(B=2, S=4, P=0, sink=True),
    "past_buffer_longer": dict(B=1, S=1, P=10, total=6, seqlens=[5]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gqa_matches_onnxruntime(kit, rng, name):
    c = dict(N=4, NK=2, H=16) | CASES[name]
    ins = _inputs(rng, c["B"], c["S"], c["P"], c["N"], c["NK"], c["H"], packed=c.get("packed", False),
                  rot=c.get("rot", False), rotdim=c.get("rotdim"), seqlens=c.get("seqlens"), total=c.get("total"),
                  bias=c.get("bias", False), sink=c.get("sink", False))
    attrs = dict(num_heads=c["N"], kv_num_heads=c["NK"], do_rotary=int(c.get("rot", False)),
                 rotary_interleaved=int(c.get("inter", False)), local_window_size=c.get("lws", -1),
                 softcap=c.get("softcap", 0.0), scale=c.get("scale", 0.0))
    ref = kit.ort("GroupQueryAttention", ins, 3, **attrs)
    got = kit.ours("GroupQueryAttention", ins, 3, **attrs)
    for r, o in zip(ref, got):
        assert o.shape == r.shape and o.dtype == r.dtype
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("S,P", [(4, 0), (1, 6), (3, 5)])
def test_gqa_rotary_position_ids(kit, rng, S, P):
    ins = _inputs(rng, 1, S, P, 4, 2, 16, rot=True)
    ins.append((np.arange(S)[None, :] + P + 7).astype(np.int64))  # positions not implied by the cache length
    attrs = dict(num_heads=4, kv_num_heads=2, do_rotary=1)
    ref = kit.ort("GroupQueryAttention", ins, 3, **attrs)
    got = kit.ours("GroupQueryAttention", ins, 3, **attrs)
    for r, o in zip(ref, got):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("first", [-1, 62])
def test_gqa_rotary_positions_outside_the_caches_are_refused(kit, rng, first):
    """Positions index the cos/sin caches (64 rows here): one outside is an error naming them, not a wrapped
    row (a negative index) or a clipped one."""
    ins = _inputs(rng, 1, 3, 0, 4, 2, 16, rot=True)
    assert ins[7].shape[0] == 64
    ins.append((np.arange(3)[None, :] + first).astype(np.int64))
    with pytest.raises(ValueError, match=r"rotary positions \[\[" + str(first) + r".*outside the cos/sin caches of 64"):
        kit.ours("GroupQueryAttention", ins, 3, num_heads=4, kv_num_heads=2, do_rotary=1)


@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize("extra", [{}, {"softcap": 2.0, "local_window_size": 3}])
@pytest.mark.parametrize("shape", [(1, 3, 2, None, None), (2, 1, 4, [4, 2], 5)])
def test_gqa_qk_output(kit, rng, mode, extra, shape):
    B, S, P, seqlens, total = shape
    ins = _inputs(rng, B, S, P, 4, 2, 16, seqlens=seqlens, total=total)
    attrs = dict(num_heads=4, kv_num_heads=2, qk_output=mode) | extra
    ref = kit.ort("GroupQueryAttention", ins, 4, **attrs)
    got = kit.ours("GroupQueryAttention", ins, 4, **attrs)
    for r, o in zip(ref, got):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=2e-6)


def test_gqa_float16(kit, rng):
    ins = _inputs(rng, 1, 1, 5, 4, 2, 16, rot=True, dt=np.float16)
    attrs = dict(num_heads=4, kv_num_heads=2, do_rotary=1)
    ref = kit.ort("GroupQueryAttention", ins, 3, **attrs)
    got = kit.ours("GroupQueryAttention", ins, 3, **attrs)
    for r, o in zip(ref, got):
        assert o.dtype == np.float16 and o.shape == r.shape
        np.testing.assert_allclose(o.astype(np.float32), r.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_gqa_workspace_is_one_function_of_shapes(kit):
    node = kit.make_node("GroupQueryAttention", 9, 3, num_heads=4, kv_num_heads=2)
    shapes = [(2, 3, 64), (2, 3, 32), (2, 3, 32), (2, 2, 10, 16), (2, 2, 10, 16), (2,), ()]
    impl = find("GroupQueryAttention", kit.MS, 1)
    # slot 0: float32 scores (B, N, S, P + S); slot 4: the causal mask (B, S, P + S) bool; slot 6: the softmax
    # row maxima and sums (2, B, N, S) float32, then a bool per row
    assert impl.workspace_bytes(node, shapes) == gqa_workspace_bytes(node, shapes) == [
        (0, 4 * 2 * 4 * 3 * 13), (4, 2 * 3 * 13), (6, 4 * 2 * 2 * 4 * 3 + 2 * 4 * 3)]
    assert gqa_workspace_bytes(node, [(1, 8, 64), None, None]) == [(0, 4 * 1 * 4 * 8 * 8), (4, 8 * 8),
                                                                   (6, 4 * 2 * 4 * 8 + 4 * 8)]
    assert gqa_workspace_bytes(node, [None]) == []
    # do_rotary: the rotated Q (B, N, S, H) and K (B, Nkv, S, H), their half-width product and the cos and sin
    # rows at the positions (2, B, S, rot / 2), float32
    rotary = kit.make_node("GroupQueryAttention", 9, 3, num_heads=4, kv_num_heads=2, do_rotary=1)
    cos = (32, 6)
    assert dict(gqa_workspace_bytes(rotary, [*shapes, cos, cos])) == {
        **dict(gqa_workspace_bytes(node, shapes)), 1: 4 * 2 * 4 * 3 * 16, 2: 4 * 2 * 2 * 3 * 16, 3: 4 * 2 * 4 * 3 * 6,
        5: 4 * 2 * 2 * 3 * 6}


def test_gqa_scores_use_the_declared_scratch(kit, rng):
    from ort_cpu_ep.ops._registry import workspace_scope

    ins = _inputs(rng, 1, 2, 3, 4, 2, 16)
    node = kit.make_node("GroupQueryAttention", len(ins), 3, num_heads=4, kv_num_heads=2)
    impl = find("GroupQueryAttention", kit.MS, 1)
    declared = dict(impl.workspace_bytes(node, [None if a is None else a.shape for a in ins]))
    requests: list[tuple[int, int]] = []
    bufs = {slot: np.zeros(nbytes, np.uint8) for slot, nbytes in declared.items()}

    def scratch(slot_id, n):
        requests.append((slot_id, n))
        return bufs[slot_id]

    with workspace_scope(scratch):
        got = impl.compute(node, ins)
    ref = kit.ort("GroupQueryAttention", ins, 3, num_heads=4, kv_num_heads=2)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=2e-6)
    assert sorted(requests) == sorted(declared.items()) and all(b.any() for b in bufs.values())


F, I32 = TensorProto.FLOAT, TensorProto.INT32


@pytest.mark.parametrize("attrs,extra,needle", [
    (dict(num_heads=4, kv_num_heads=3), None, "kv_num_heads=3"),
    (dict(k_quant_type="PER_TENSOR"), None, "k_quant_type"),
    (dict(sliding_window_cache=1), None, "sliding_window_cache"),
    (dict(qk_output=3), None, "qk_output"),
    (dict(causal=0), None, "causal=0"),
    (dict(), "query_seqlens", "query_seqlens"),
    (dict(), "double", "DOUBLE"),
    (dict(do_rotary=1), None, "cos_cache"),
])
def test_gqa_declines(kit, attrs, extra, needle):
    base = dict(num_heads=4, kv_num_heads=2) | attrs
    infos = [InputInfo(F, (1, 8, 64)), InputInfo(F, (1, 8, 32)), InputInfo(F, (1, 8, 32)),
             InputInfo(F, (1, 2, 0, 16)), InputInfo(F, (1, 2, 0, 16)), InputInfo(I32, (1,)), InputInfo(I32, ())]
    if extra == "query_seqlens":
        infos += [InputInfo(0, None, False)] * 9 + [InputInfo(I32, (1,))]
    elif extra == "double":
        infos[0] = InputInfo(TensorProto.DOUBLE, (1, 8, 64))
    d = kit.decline_of("GroupQueryAttention", infos, 3, **base)
    assert d is not None and needle.upper() in d.rejected.upper(), d
    assert d.accepts and d.remedy


@pytest.mark.parametrize("name", ["prefill", "decode", "decode_ragged", "packed_decode", "rotary_decode",
                                  "rotary_packed", "subsequent_prompt", "past_buffer_longer"])
def test_gqa_float16_computes_in_its_declared_slot_and_output_blocks(kit, rng, name):
    """A float16 node (the graph says so) computes in float32 in declared slot 7 and rounds its output and
    present key/value into their blocks: as onnxruntime computes them, with no request beyond the declaration."""
    import types

    from ort_cpu_ep.ops._registry import _OUTPUT, workspace_scope

    c = dict(N=4, NK=2, H=16) | CASES[name]
    ins = _inputs(rng, c["B"], c["S"], c["P"], c["N"], c["NK"], c["H"], packed=c.get("packed", False),
                  rot=c.get("rot", False), seqlens=c.get("seqlens"), total=c.get("total"), dt=np.float16)
    attrs = dict(num_heads=c["N"], kv_num_heads=c["NK"], do_rotary=int(c.get("rot", False)))
    ref = kit.ort("GroupQueryAttention", ins, 3, **attrs)
    impl = find("GroupQueryAttention", kit.MS, 1)
    node = kit.make_node("GroupQueryAttention", len(ins), 3, **attrs)
    node.inputs = ["" if a is None else f"i{i}" for i, a in enumerate(ins)]
    node.graph = types.SimpleNamespace(values={"o0": types.SimpleNamespace(dtype=TensorProto.FLOAT16)},
                                       initializers={})
    declared = dict(impl.workspace_bytes(node, [None if a is None else a.shape for a in ins]))
    assert 7 in declared
    requests, blocks = [], {}

    def scratch(slot_id, n):
        requests.append(slot_id)
        assert n <= declared[slot_id], (slot_id, n, declared)
        return np.zeros(declared[slot_id], np.uint8)

    def output(index, shape, dtype):
        blocks[index] = np.full(shape, np.nan, dtype)
        return blocks[index]

    token = _OUTPUT.set(output)
    try:
        with workspace_scope(scratch):
            got = impl.compute(node, list(ins))
    finally:
        _OUTPUT.reset(token)
    assert 7 in requests and sorted(blocks) == [0, 1, 2]
    for i, (r, o) in enumerate(zip(ref, got)):
        assert o is blocks[i] and o.dtype == np.float16 and o.shape == r.shape
        np.testing.assert_allclose(o.astype(np.float32), r.astype(np.float32), rtol=1e-2, atol=1e-2)
