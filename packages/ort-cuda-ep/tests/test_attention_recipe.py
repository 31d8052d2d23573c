"""The flash split heuristic and the attention workspace recipe, at their boundaries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ort_cuda_ep import (
    attention_recipe,
    attention_workspace_envelope,
    get_num_splits_and_buffer_sizes,
    num_splits_heuristic,
)
from ort_cuda_ep._attention_recipe import attention_block_n


def _reference_splits(batch, seq_q, seq_kv, heads, head_size, sms, max_splits=128):
    """A line-by-line transliteration of onnxruntime's scalar loop (float32 efficiencies, double threshold)."""
    f32 = np.float32
    block_n = 256 if head_size <= 64 else (128 if head_size <= 128 else 64)
    n_blocks = (seq_kv + block_n - 1) // block_n
    bnm = batch * heads * ((seq_q + 63) // 64)
    if f32(bnm) >= f32(0.8) * f32(sms):
        return 1
    max_splits = min(max_splits, sms, n_blocks)

    def ceildiv(a, b):
        return (a + b - 1) // b

    def eligible(s):
        return s == 1 or ceildiv(n_blocks, s) != ceildiv(n_blocks, s - 1)

    effs, best = [], f32(0.0)
    for s in range(1, max_splits + 1):
        if not eligible(s):
            effs.append(f32(0.0))
            continue
        waves = f32(bnm * s) / f32(sms)
        eff = f32(waves / f32(math.ceil(waves)))
        best = max(best, eff)
        effs.append(eff)
    for s in range(1, max_splits + 1):
        if eligible(s) and float(effs[s - 1]) >= 0.85 * float(best):
            return s
    return 1


def test_pinned_non_monotonic_boundary():
    # batch 1, query 1, 2 heads, head size 64, 108 SMs (the and onnxruntime's regression case)
    assert num_splits_heuristic(1, 1, 13824, 2, 64, 108) == 54
    assert num_splits_heuristic(1, 1, 13825, 2, 64, 108) == 28
    lower, upper = attention_recipe(1, 1, 13824, 2, 64, 108), attention_recipe(1, 1, 13825, 2, 64, 108)
    assert upper.total_bytes < lower.total_bytes


def test_double_threshold_boundary():
    # with a float 0.85f threshold the runtime would pick 17 and under-allocate; it picks 20
    assert num_splits_heuristic(1, 1, 24577, 1, 64, 24) == 20


def test_vectorized_heuristic_matches_scalar_loop():
    for batch in (1, 2):
        for seq_q in (1, 65):
            for seq_kv in (1, 128, 129, 255, 256, 257, 4096, 13824, 13825, 24577):
                for heads in (1, 2, 8):
                    for head_size in (64, 72, 136):
                        for sms in (24, 108, 132):
                            args = (batch, seq_q, seq_kv, heads, head_size, sms)
                            assert num_splits_heuristic(*args) == _reference_splits(*args), args


def test_hand_calculated_layouts():
    one = attention_recipe(2, 3, 128, 8, 64, 108)  # one key block: nothing to split
    assert (one.num_splits, one.lse_bytes, one.total_bytes) == (1, 2 * 8 * 3 * 4, 192)
    r = attention_recipe(1, 1, 4096, 2, 64, 108)
    assert r.num_splits == 16
    assert (r.lse_bytes, r.lse_accum_offset, r.lse_accum_bytes) == (8, 256, 128)
    assert (r.out_accum_offset, r.out_accum_bytes, r.total_bytes) == (512, 8192, 8704)


def test_rounded_head_size_sizes_partial_outputs():
    r = attention_recipe(1, 1, 4096, 2, 72, 108)
    assert r.head_size_rounded == 96 and r.num_splits > 1
    assert r.out_accum_bytes == 4 * r.num_splits * 2 * 96


def test_no_split_once_blocks_fill_eighty_percent_of_sms():
    # 0.8 * 108 = 86.4: 86 heads may split, 87 may not
    assert num_splits_heuristic(1, 1, 100_000, 86, 64, 108) > 1
    assert num_splits_heuristic(1, 1, 100_000, 87, 64, 108) == 1
    assert attention_recipe(1, 1, 100_000, 87, 64, 108).total_bytes == 87 * 4


@pytest.mark.parametrize("head_size,block", [(8, 256), (64, 256), (65, 128), (128, 128), (129, 64), (256, 64)])
def test_key_block_size_by_head_size(head_size, block):
    assert attention_block_n(head_size) == block


@pytest.mark.parametrize("args", [
    (-1, 1, 128, 2, 64, 108), (1, 1, 128, 2, 0, 108), (1, 1, 128, 2, 64, 0), (True, 1, 128, 2, 64, 108),
    ("batch", 1, 128, 2, 64, 108), (1, 1, 128, 2, 64.0, 108), (1, 1, 2**31, 2, 64, 108),
    (2**30, 2**30, 128, 2, 64, 108),  # rows overflow the kernel's indexing
])
def test_malformed_or_overflowing_is_unavailable(args):
    assert attention_recipe(*args) is None


def test_empty_output_needs_nothing():
    assert attention_recipe(0, 1, 128, 2, 64, 108).total_bytes == 0
    assert attention_recipe(1, 0, 128, 2, 64, 108).total_bytes == 0


def test_zero_keys_keeps_only_the_lse():
    r = attention_recipe(1, 1, 0, 2, 64, 108)
    assert (r.num_splits, r.total_bytes) == (1, 8)


def _brute_force(bs, qs, ks, h, d, sms):
    return max(attention_recipe(b, q, k, h, d, sms).total_bytes
               for b in range(bs[0], bs[1] + 1) for q in range(qs[0], qs[1] + 1) for k in range(ks[0], ks[1] + 1))


def test_envelope_is_the_largest_need_not_the_value_at_the_maximum():
    ks = (1, 14_000)
    at_max = attention_recipe(1, 1, ks[1], 2, 64, 108).total_bytes
    env = attention_workspace_envelope(1, 1, ks, 2, 64, 108)
    assert env == max(attention_recipe(1, 1, k, 2, 64, 108).total_bytes for k in range(ks[0], ks[1] + 1))
    assert env > at_max


@pytest.mark.parametrize("bs,qs,ks,h,d,sms", [
    ((1, 3), (63, 66), (1, 600), 2, 64, 108),
    ((1, 2), (63, 65), (200, 700), 4, 128, 132),
    ((2, 5), (1, 2), (3000, 3400), 8, 96, 58),
    ((1, 1), (1, 1), (13_500, 13_900), 2, 64, 108),
])
def test_envelope_matches_brute_force(bs, qs, ks, h, d, sms):
    assert attention_workspace_envelope(bs, qs, ks, h, d, sms) == _brute_force(bs, qs, ks, h, d, sms)


def test_envelope_of_one_shape_is_that_shape():
    assert attention_workspace_envelope(1, 1, 4096, 2, 64, 108) == 8704


@pytest.mark.parametrize("args", [
    ((2, 1), 1, 128, 2, 64, 108), ((1, 2, 3), 1, 128, 2, 64, 108), (1, 1, (1, 2**31), 2, 64, 108),
    (1, 1, 128, 2, 64, 0),
])
def test_envelope_malformed_is_unavailable(args):
    assert attention_workspace_envelope(*args) is None


def test_onnxruntime_triple_and_recipe_agree():
    assert get_num_splits_and_buffer_sizes(2, 3, 128, 8, 64, 108) == (0, 0, 0)
    assert get_num_splits_and_buffer_sizes(1, 1, 4096, 2, 64, 108) == (16, 128, 8192)
    for kv in (1, 300, 4096, 13824, 13825, 50_000):
        splits, lse_acc, out_acc = get_num_splits_and_buffer_sizes(1, 1, kv, 2, 72, 108)
        r = attention_recipe(1, 1, kv, 2, 72, 108)
        assert (r.lse_accum_bytes, r.out_accum_bytes) == (lse_acc, out_acc)
        assert r.num_splits == max(splits, 1)
