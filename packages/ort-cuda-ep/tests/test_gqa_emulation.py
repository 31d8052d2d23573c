"""GroupQueryAttention without a GPU: the launch code runs on a recording runtime (every launch checked
against gqa.cu's signatures), each recorded launch is executed by ``ort_cuda_ep.testing.emulate_gqa``
(the kernels' index math, split/chunk structure and float32 arithmetic in numpy), and the outputs are
compared with onnxruntime's CPU GroupQueryAttention on the same inputs.

What this checks: the position rule (query row s of batch b at seqlens_k[b] + 1 - S + s), the causal
range, the head mapping h -> h // (H / Hkv), rotary (half-split, interleaved, partial), past copy and
append into present, packed and separate q/k/v, per-batch lengths, split-K ranges and the LSE merge,
float16 storage. What it cannot check: that the CUDA code does what its emulation does (tests/test_gpu.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from ort_abi import tensor_from_host, tensor_to_host
from ort_cuda_ep import gqa_recipe
from ort_cuda_ep._launch import ScratchOnly, compute
from ort_cuda_ep._ops import find_spec
from ort_cuda_ep._runtime import DeviceArray
from ort_cuda_ep.testing import RecordingRuntime, emulate_gqa

SPEC = find_spec("GroupQueryAttention", "com.microsoft", 1)


class GqaRuntime(RecordingRuntime):
    """Records each launch (checked against the .cu signature and its grid), then does what the kernel does."""

    def launch(self, source, entry, grid, block, args, shared_bytes=0):
        super().launch(source, entry, grid, block, args, shared_bytes)
        v = [a for a, _ in args]
        if entry.startswith("gqa_attn_"):
            B, H, S, splits = v[11], v[12], v[14], v[22]
            assert grid == (B * H * S * splits,) and block == (128,)
        elif entry.startswith("gqa_combine_"):
            assert grid == (v[4] * v[5] * v[6],) and block == (128,)
        else:
            assert block == (256,) and grid[0] >= 1
        emulate_gqa(entry, v, self.array_at)


def run_ours(inputs, attrs, profile="a100"):
    """(outputs as host arrays, runtime): device inputs except total_sequence_length (a host input)."""
    rt = GqaRuntime(profile)
    args = [None if a is None else (np.asarray(a) if i in SPEC.host_inputs else tensor_from_host(rt.allocator, a))
            for i, a in enumerate(inputs)]
    ws = ScratchOnly(rt)
    outs = compute(rt, SPEC, "gqa", args, attrs, ws, 3)
    host = [tensor_to_host(o) for o in outs]
    ws.release()
    for o in outs:
        rt.release(o)
    for a in args:
        if isinstance(a, DeviceArray):
            rt.release(a)
    assert rt.allocator.bytes_in_use == 0
    return host, rt


def check(inputs, attrs, gqa_kit, tol=None, profile="a100"):
    """Ours vs onnxruntime on every row the op defines; ours zero past each batch entry's length."""
    (o, pk, pv), rt = run_ours(inputs, attrs, profile)
    ro, rpk, rpv = gqa_kit.ort(inputs, attrs)
    assert o.shape == ro.shape and pk.shape == rpk.shape and pv.shape == rpv.shape
    assert o.dtype == ro.dtype == inputs[0].dtype
    f16 = inputs[0].dtype == np.float16
    tol = tol or (4e-3 if f16 else 2e-5)
    S = inputs[0].shape[1]
    for b, n in enumerate(np.asarray(inputs[5]) + 1):
        rows = min(S, int(n))  # query rows past the batch entry's tokens are padding (unspecified)
        np.testing.assert_allclose(o[b, :rows].astype(np.float64), ro[b, :rows].astype(np.float64), rtol=tol, atol=tol)
        for ours, ref in ((pk, rpk), (pv, rpv)):
            np.testing.assert_allclose(ours[b, :, :n].astype(np.float64), ref[b, :, :n].astype(np.float64),
                                       rtol=tol, atol=tol)
            assert not ours[b, :, n:].any()  # zeros after the batch entry's tokens
    return rt


def _attrs(heads=4, kv_heads=2, rotary=1, interleaved=0, scale=None):
    a = {"num_heads": heads, "kv_num_heads": kv_heads, "do_rotary": rotary, "rotary_interleaved": interleaved}
    if scale is not None:
        a["scale"] = scale
    return a


RNG = np.random.default_rng(7)


@pytest.mark.parametrize("with_past", [True, False], ids=["empty-past", "no-past"])
def test_prefill_packed_rotary_like_the_genai_export(gqa_kit, with_past):
    inputs = gqa_kit.inputs(RNG, 1, 8, 0, with_past=with_past)
    rt = check(inputs, _attrs(), gqa_kit)
    assert [e for e, *_ in rt.launches] == ["gqa_present_f32", "gqa_attn_f32"]


@pytest.mark.parametrize("packed,interleaved,rotary", [(True, 0, 1), (False, 1, 1), (False, 0, 0), (True, 1, 1)])
def test_decode_with_past(gqa_kit, packed, interleaved, rotary):
    inputs = gqa_kit.inputs(RNG, 1, 1, 8, packed=packed)
    check(inputs, _attrs(rotary=rotary, interleaved=interleaved), gqa_kit)


def test_decode_batch_of_two_with_different_lengths(gqa_kit):
    """seqlens_k [8, 5]: entry 1 has 5 cached tokens of the 8-long past buffer; its new token goes to row 5."""
    inputs = gqa_kit.inputs(RNG, 2, 1, 8, seqlens=[8, 5], total=9)
    check(inputs, _attrs(), gqa_kit)


def test_prefill_batch_of_two_right_padded(gqa_kit):
    """seqlens_k [5, 3] with 6 query rows: entry 1 has 4 tokens; its rows 4..5 are padding."""
    inputs = gqa_kit.inputs(RNG, 2, 6, 0, seqlens=[5, 3], total=6)
    check(inputs, _attrs(), gqa_kit)


def test_subsequent_prompt_chunk(gqa_kit):
    """3 new tokens after 5 cached ones: query rows at positions 5, 6, 7."""
    inputs = gqa_kit.inputs(RNG, 1, 3, 5)
    check(inputs, _attrs(), gqa_kit)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_partial_rotary(gqa_kit, interleaved):
    """rotary over the first 16 of 32 head dims; the rest are copied."""
    inputs = gqa_kit.inputs(RNG, 1, 2, 6, head=32, half=8)
    check(inputs, _attrs(interleaved=interleaved), gqa_kit)


def test_custom_scale_and_equal_head_counts(gqa_kit):
    inputs = gqa_kit.inputs(RNG, 1, 4, 0, heads=4, kv_heads=4)
    check(inputs, _attrs(kv_heads=4, scale=0.3), gqa_kit)


def test_multi_query_one_kv_head_head_size_128(gqa_kit):
    inputs = gqa_kit.inputs(RNG, 1, 2, 30, heads=8, kv_heads=1, head=128, packed=False)
    check(inputs, _attrs(heads=8, kv_heads=1, interleaved=1), gqa_kit)


@pytest.mark.parametrize("case", ["chunk", "decode2"])
def test_float16(gqa_kit, case):
    if case == "chunk":
        inputs = gqa_kit.inputs(RNG, 1, 3, 5, heads=8, kv_heads=2, head=32, packed=False, dtype=np.float16)
        attrs = _attrs(heads=8, interleaved=1)
    else:
        inputs = gqa_kit.inputs(RNG, 2, 1, 8, seqlens=[8, 5], total=9, dtype=np.float16)
        attrs = _attrs()
    rt = check(inputs, attrs, gqa_kit)
    assert all(e.endswith("_f16") for e, *_ in rt.launches)


@pytest.mark.parametrize("past,head,heads,kv_heads,dtype", [
    (600, 16, 4, 2, np.float32),     # 256-key blocks: 601 keys in 3 blocks
    (700, 128, 8, 1, np.float16),    # 128-key blocks: 6 blocks
    (1000, 64, 2, 2, np.float32),    # 4 blocks, 4 heads of rows
])
def test_decode_over_a_long_past_splits_the_keys(gqa_kit, past, head, heads, kv_heads, dtype):
    inputs = gqa_kit.inputs(RNG, 1, 1, past, heads=heads, kv_heads=kv_heads, head=head, dtype=dtype, cos_rows=past + 1)
    rt = check(inputs, _attrs(heads=heads, kv_heads=kv_heads), gqa_kit)
    entries = [e for e, *_ in rt.launches]
    sfx = "f16" if dtype == np.float16 else "f32"
    assert entries == [f"gqa_present_{sfx}", f"gqa_attn_{sfx}", f"gqa_combine_{sfx}"]
    splits, per_split = rt.launches[1][3][22:24]
    r = gqa_recipe(1, 1, past, heads, head, 108, kv_heads)
    assert 1 < splits <= r.num_splits and per_split % r.block_n == 0
    assert per_split * (splits - 1) < past + 1 <= per_split * splits  # every split has keys, all keys covered
    assert rt.counters.last["gqa"] == ("scratch", r.total_bytes)


def test_prefill_longer_than_one_key_chunk(gqa_kit):
    """130 query rows: late rows see more than 128 keys, so the online softmax runs two chunks."""
    inputs = gqa_kit.inputs(RNG, 1, 130, 0, heads=2, kv_heads=1, head=64, cos_rows=130)
    rt = check(inputs, _attrs(heads=2, kv_heads=1), gqa_kit)
    # 130 keys are one 256-key block: no split, the workspace holds the softmax LSEs only
    r = gqa_recipe(1, 130, 0, 2, 64, 108)
    assert r.num_splits == 1 and r.total_bytes == 4 * 2 * 130
    assert [e for e, *_ in rt.launches] == ["gqa_present_f32", "gqa_attn_f32"] and rt.launches[1][3][22] == 1
    assert rt.counters.last["gqa"] == ("scratch", r.total_bytes)


def test_the_split_merge_of_a_batch_with_different_lengths(gqa_kit):
    """A split launch where entry 1's keys end inside the first split (its later splits hold no keys)."""
    inputs = gqa_kit.inputs(RNG, 2, 1, 700, seqlens=[700, 40], total=701, cos_rows=701)
    rt = check(inputs, _attrs(), gqa_kit)
    assert rt.launches[1][3][22] > 1 and rt.launches[-1][0] == "gqa_combine_f32"


class _Kept:
    """A planned workspace that outlives the call, so the softmax LSEs can be read back."""

    def __init__(self, rt, nbytes):
        self.rt, self.buf = rt, rt.allocator.alloc(nbytes)

    def preallocated(self, slot_id, nbytes):
        assert nbytes <= self.buf.nbytes
        return self.buf.ptr

    def scratch(self, nbytes):
        raise AssertionError("the planned workspace is large enough")


@pytest.mark.parametrize("past", [100, 1000])  # one split / four splits merged by gqa_combine
def test_softmax_lse_is_the_log_sum_exp_of_the_visible_scores(gqa_kit, past):
    heads, kv_heads, head = 4, 2, 16
    inputs = gqa_kit.inputs(RNG, 2, 1, past, seqlens=[past, past // 2], total=past + 1, cos_rows=past + 1)
    r = gqa_recipe(2, 1, past, heads, head, 108, kv_heads)
    rt = GqaRuntime()
    ws = _Kept(rt, r.total_bytes)
    args = [None if a is None else (np.asarray(a) if i == 6 else tensor_from_host(rt.allocator, a))
            for i, a in enumerate(inputs)]
    _, present_k, _ = compute(rt, SPEC, "gqa", args, _attrs(), ws, 3)
    assert (rt.launches[1][3][22] > 1) == (past == 1000)
    lse = rt.array_at(ws.buf.ptr + r.lse_offset, np.float32)[: 2 * heads]
    pk = tensor_to_host(present_k).astype(np.float64)
    cos, sin = inputs[7].astype(np.float64), inputs[8].astype(np.float64)
    q = inputs[0].astype(np.float64).reshape(2, heads + 2 * kv_heads, head)[:, :heads]
    for b, n in enumerate((past + 1, past // 2 + 1)):
        c, s = cos[n - 1], sin[n - 1]
        x1, x2 = q[b, :, :8], q[b, :, 8:]
        rotated = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1) / np.sqrt(head)
        for h in range(heads):
            scores = pk[b, h // 2, :n] @ rotated[h]
            want = scores.max() + np.log(np.exp(scores - scores.max()).sum())
            np.testing.assert_allclose(lse[b * heads + h], want, rtol=1e-5)


@pytest.mark.parametrize("case", ["chunk", "decode2"])
def test_bfloat16_against_onnxruntime_on_the_same_values_in_float32(gqa_kit, case):
    """onnxruntime's CPU GQA has no bfloat16: it runs on the bf16 inputs widened to float32."""
    import ml_dtypes

    if case == "chunk":
        inputs = gqa_kit.inputs(RNG, 1, 3, 5, heads=8, kv_heads=2, head=32, packed=False)
        attrs = _attrs(heads=8, interleaved=1)
    else:
        inputs = gqa_kit.inputs(RNG, 2, 1, 8, seqlens=[8, 5], total=9)
        attrs = _attrs()

    def half(a):
        return a.astype(ml_dtypes.bfloat16) if a is not None and a.dtype == np.float32 else a

    bf = [half(a) for a in inputs]
    (o, pk, pv), rt = run_ours(bf, attrs)
    assert o.dtype == np.dtype(ml_dtypes.bfloat16) and all(e.endswith("_bf16") for e, *_ in rt.launches)
    widened = [a.astype(np.float32) if a is not None and a.dtype == np.dtype(ml_dtypes.bfloat16) else a for a in bf]
    ro, rpk, rpv = gqa_kit.ort(widened, attrs)
    for b, n in enumerate(np.asarray(inputs[5]) + 1):
        rows = min(inputs[0].shape[1], int(n))
        np.testing.assert_allclose(o[b, :rows].astype(np.float32), ro[b, :rows], rtol=3e-2, atol=3e-2)
        np.testing.assert_allclose(pk[b, :, :n].astype(np.float32), rpk[b, :, :n], rtol=1e-2, atol=1e-2)
