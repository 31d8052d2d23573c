"""GroupQueryAttention without a GPU: claims (accepted and declined with reasons, on unit nodes and on the
real onnxruntime-genai exports), the workspace recipe and its boundaries, and the runtime plumbing on a
recording driver (real cubins loaded, launches checked, host input kept on the host, Level-1 estimate ==
Level-2 declaration == runtime request, no leaked device bytes)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto

from ort_abi import (
    Declined,
    KernelRegistry,
    Supported,
    declare_workspace,
    estimate_workspace,
    workspace_input_shapes,
)
from ort_cuda_ep import (
    EP_NAME,
    CudaExecutionProvider,
    DeviceUnavailableError,
    KernelLaunchError,
    attention_recipe,
    get_profile,
    gqa_fast_decode,
    gqa_head_size,
    gqa_recipe,
    gqa_split_plan,
    gqa_workspace_envelope,
    workspace_bytes,
)
from ort_cuda_ep._launch import ScratchOnly, compute
from ort_cuda_ep._ops import find_spec
from ort_cuda_ep.testing import RecordingRuntime

F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
I32, I64 = TensorProto.INT32, TensorProto.INT64
SPEC = find_spec("GroupQueryAttention", "com.microsoft", 1)
BIG = (1 << 31) - 1


def _no_device(monkeypatch):
    def fail(device_id=0):
        raise DeviceUnavailableError("the CUDA driver library could not be loaded: libcuda.so.1 not found")

    monkeypatch.setattr("ort_cuda_ep._ep.discover", fail)


# -- claims ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    {},                                                            # the genai export: packed QKV, rotary, empty past
    {"seq": 1, "past": 8},                                         # decode
    {"packed": False},
    {"rotary": 0},
    {"attrs": {"do_rotary": 0}},                                   # caches present but unused
    {"attrs": {"rotary_interleaved": 1}},
    {"with_past": False},
    {"dtype": F16},
    {"heads": 8, "kv_heads": 1, "head": 128},
    {"heads": 2, "kv_heads": 1, "head": 256},
    {"half": 4},                                                   # partial rotary
    {"attrs": {"scale": 0.1, "local_window_size": -1, "softcap": 0.0, "smooth_softmax": 0, "causal": 1,
               "qk_output": 0, "sliding_window_cache": 0, "k_quant_type": "NONE", "qk_norm_epsilon": 1e-6}},
    {"batch": "batch", "seq": "seq", "past": "past"},
    {"shapes": {"past_key": [1, 2, 0, "kv_cache_dim"], "past_value": [1, 2, 0, "kv_cache_dim"]}},
    {"shapes": {"total_sequence_length": [1]}},
], ids=["genai", "decode", "separate", "no-rotary", "caches-unused", "interleaved", "no-past", "float16", "mqa-128",
        "head-256", "partial-rotary", "default-attributes", "symbolic", "symbolic-head", "total-1d"])
def test_claims_accept_what_the_kernels_run(monkeypatch, models, kwargs):
    _no_device(monkeypatch)
    node = models.gqa(**kwargs).graph.nodes[0]
    verdict = CudaExecutionProvider(profile="a100").claim(node, 1)
    assert isinstance(verdict, Supported), verdict


@pytest.mark.parametrize("kwargs,aspect,detail", [
    ({"attrs": {"local_window_size": 4}}, "attribute", "local_window_size=4 (sliding-window"),
    ({"attrs": {"softcap": 30.0}}, "attribute", "softcap=30.0"),
    ({"attrs": {"smooth_softmax": 1}}, "attribute", "smooth_softmax=1"),
    ({"attrs": {"causal": 0}}, "attribute", "causal=0 (bidirectional"),
    ({"attrs": {"qk_output": 1}}, "attribute", "qk_output=1"),
    ({"attrs": {"sliding_window_cache": 1}}, "attribute", "sliding_window_cache=1"),
    ({"attrs": {"k_quant_type": "PER_TENSOR"}}, "attribute", "k_quant_type='PER_TENSOR' (a quantized KV cache)"),
    ({"attrs": {"kv_cache_bit_width": 8}}, "attribute", "kv_cache_bit_width=8 (a quantized KV cache)"),
    ({"attrs": {"mystery": 1}}, "attribute", "mystery=1"),
    ({"attrs": {"rotary_interleaved": 2}}, "attribute", "rotary_interleaved=2"),
    ({"heads": 3, "kv_heads": 2}, "attribute", "num_heads=3, kv_num_heads=2"),
    ({"extra_inputs": ("position_ids",)}, "input", "position_ids"),
    ({"extra_inputs": ("attention_bias",)}, "input", "optional inputs at positions [10]"),
    ({"extra_inputs": ("head_sink",)}, "input", "optional inputs at positions [11]"),
    ({"outputs": 4}, "output", "output_qk"),
    ({"outputs": ["output", "", ""]}, "output", "without present_key/present_value"),
    ({"rotary": 0, "attrs": {"do_rotary": 1}}, "input", "do_rotary=1 without cos_cache/sin_cache"),
    ({"dtypes": {"past_key": F16, "past_value": F16}}, "dtype", "mix"),
    ({"dtype": TensorProto.DOUBLE}, "dtype", "DOUBLE"),
    ({"dtypes": {"seqlens_k": I64}}, "dtype", "input 5"),
    ({"dtypes": {"total_sequence_length": F32}}, "dtype", "input 6"),
    ({"shapes": {"query": None}}, "shape", "has shape None"),
    ({"shapes": {"query": [1, 128]}}, "shape", "query (input 0, 'query') has shape (1, 128)"),
    ({"shapes": {"query": [1, 8, "hidden"]}}, "shape", "query hidden size 'hidden'"),
    ({"shapes": {"query": [1, 8, 130]}}, "shape", "query hidden size 130"),
    ({"heads": 2, "kv_heads": 1, "head": 512}, "shape", "query hidden size 2048 with num_heads=2, kv_num_heads=1"),
    ({"half": 16}, "shape", "cos_cache (128, 16), sin_cache (128, 16) for head_size 16"),
    ({"shapes": {"sin_cache": [128, 4]}}, "shape", "sin_cache (128, 4)"),
    ({"shapes": {"past_key": [1, 3, 0, 16]}}, "shape", "past_key (1, 3, 0, 16)"),
    ({"shapes": {"past_value": [1, 2, 5, 16]}}, "shape", "past_value (1, 2, 5, 16)"),
    ({"packed": False, "shapes": {"key": [1, 7, 32]}}, "shape", "with key (1, 7, 32)"),
    ({"packed": False, "shapes": {"value": [1, 8, 48]}}, "shape", "with value (1, 8, 48)"),
    ({"shapes": {"total_sequence_length": [2]}}, "shape", "total_sequence_length"),
    ({"shapes": {"seqlens_k": [2]}}, "shape", "seqlens_k (2,) for batch 1"),
    ({"shapes": {"query": [1, BIG + 1, 128]}}, "shape", "extent 2147483648"),
])
def test_claims_decline_the_rest_with_reasons(monkeypatch, models, kwargs, aspect, detail):
    _no_device(monkeypatch)
    node = models.gqa(**kwargs).graph.nodes[0]
    verdict = CudaExecutionProvider(profile="a100").claim(node, 1)
    assert isinstance(verdict, Declined), verdict
    assert verdict.rejected.startswith(aspect + ":") and detail in verdict.rejected, verdict.rejected
    assert verdict.accepts and verdict.remedy and verdict.node == node.name and verdict.op_type == "GroupQueryAttention"


def test_static_shapes_the_recipe_cannot_size_are_declined(monkeypatch, models):
    """batch x heads x query length past 2**31-1: every extent fits, the kernel grid does not."""
    _no_device(monkeypatch)
    node = models.gqa(batch=65536, seq=65536, past=0, cos_rows=65536).graph.nodes[0]
    verdict = CudaExecutionProvider(profile="a100").claim(node, 1)
    assert isinstance(verdict, Declined) and "out of range for the gqa kernel" in verdict.rejected


def test_total_sequence_length_is_a_host_input(monkeypatch, models):
    _no_device(monkeypatch)
    node = models.gqa().graph.nodes[0]
    assert CudaExecutionProvider(profile="a100").memory_types(node, 1) == ((6,), ())
    assert SPEC.host_inputs == (6,) and SPEC.host_outputs == ()


GENAI = ["genai_fp32_cpu", "genai_int4_cpu", "genai_int8_cpu", "genai_fp16_cuda", "genai_int4_cuda"]


@pytest.mark.parametrize("variant", GENAI)
@pytest.mark.parametrize("batch,seq,past", [(1, 16, 0), (2, 1, 8)], ids=["prefill", "decode"])
def test_real_genai_exports_claim_every_gqa_with_the_recipe_workspace(shared_models, monkeypatch, variant, batch,
                                                                      seq, past):
    from ort_graph import load, resolve_shapes

    _no_device(monkeypatch)
    model = load(shared_models / "llama_l4" / variant / "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolve_shapes(model, dims={"batch_size": batch, "sequence_length": seq, "total_sequence_length": past + seq,
                                    "past_sequence_length": past, "kv_cache_dim": 16})
    ep = CudaExecutionProvider(profile="a100")
    nodes = [n for n in model.graph.nodes if n.op_type == "GroupQueryAttention"]
    assert len(nodes) == 4
    want = gqa_recipe(batch, seq, past, 4, 16, 108, 2).total_bytes  # 4 heads (2 KV heads) of 16, packed QKV
    for node in nodes:
        verdict = ep.claim(node, 1)
        assert isinstance(verdict, Supported), verdict
        assert ep.estimate(node, 1) == want
        assert ep.memory_types(node, 1) == ((6,), ())


def test_the_bfloat16_export_is_claimed(shared_models, monkeypatch):
    from ort_graph import load, resolve_shapes

    _no_device(monkeypatch)
    model = load(shared_models / "llama_l4" / "genai_bf16_cuda" / "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the export's Constant shape annotation (see MODELS.md)
        resolve_shapes(model, dims={"batch_size": 1, "sequence_length": 4, "total_sequence_length": 4,
                                    "past_sequence_length": 0, "kv_cache_dim": 16})
    node = next(n for n in model.graph.nodes if n.op_type == "GroupQueryAttention")
    verdict = CudaExecutionProvider(profile="h100").claim(node, 1)
    assert isinstance(verdict, Supported), verdict


def test_the_unresolved_genai_export_is_claimed_and_estimated_over_ranges(shared_models, monkeypatch):
    """Symbolic batch/sequence/past/head dims: claimed; the estimate needs a range for every symbol."""
    from ort_graph import load, resolve_shapes

    _no_device(monkeypatch)
    model = load(shared_models / "llama_l4" / "genai_fp32_cpu" / "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolve_shapes(model)
    node = next(n for n in model.graph.nodes if n.op_type == "GroupQueryAttention")
    assert isinstance(CudaExecutionProvider(profile="a100").claim(node, 1), Supported)
    assert CudaExecutionProvider(profile="a100").estimate(node, 1) is None  # unavailable, never a guess
    ranges = {"batch_size": (1, 2), "sequence_length": (1, 128), "past_sequence_length": (0, 127),
              "kv_cache_dim": (16, 16)}
    ep = CudaExecutionProvider(profile="a100", dim_ranges=ranges)
    assert ep.estimate(node, 1) == gqa_workspace_envelope((1, 2), (1, 128), (0, 127), 4, 16, 108, 2)


# -- the recipe --------------------------------------------------------------------------------------
@pytest.mark.parametrize("hidden,h,hkv,packed,want", [
    (128, 4, 2, True, 16), (64, 4, 2, False, 16), (130, 4, 2, True, None), (2048, 2, 1, True, None),
    (1024, 2, 1, True, 256), (64, 3, 2, False, None), (64, 0, 1, False, None), (0, 4, 2, True, None),
    (96, 4, 4, True, 8), (True, 1, 1, False, None), ("h", 4, 2, True, None),
])
def test_head_size(hidden, h, hkv, packed, want):
    assert gqa_head_size(hidden, h, hkv, packed) == want


@pytest.mark.parametrize("b,s,p,h,d,sms", [(1, 16, 0, 4, 16, 108), (2, 1, 8, 4, 16, 108), (1, 1, 13823, 2, 64, 108),
                                           (1, 1, 4095, 32, 128, 132), (4, 512, 0, 32, 128, 132), (1, 1, 600, 4, 16, 58)])
def test_recipe_is_the_flash_recipe_for_past_plus_new_keys(b, s, p, h, d, sms):
    assert gqa_recipe(b, s, p, h, d, sms) == attention_recipe(b, s, p + s, h, d, sms)


def test_fast_decode_selects_splits_by_kv_heads_as_the_seeds():
    """The seeds' example: B=1, S=1, 4096 keys, 32 query / 8 KV heads of 128 on 108 SMs."""
    r = gqa_recipe(1, 1, 4095, 32, 128, 108, 8)
    assert r.num_splits == 11 and gqa_recipe(1, 1, 4095, 32, 128, 108).num_splits == 3  # by query heads: 3
    # the accumulators hold every query head: 4*B*H*S | 4*splits*B*H*S | 4*splits*B*H*S*round32(D)
    assert (r.lse_bytes, r.lse_accum_bytes, r.out_accum_bytes) == (4 * 32, 4 * 11 * 32, 4 * 11 * 32 * 128)
    assert r.total_bytes == 256 + 1536 + 4 * 11 * 32 * 128 == 182_016


@pytest.mark.parametrize("b,s,p,fast", [(1, 1, 0, True), (1, 1, 4095, True), (1, 4, 100, True), (2, 4, 0, False),
                                        (1, 300, 0, False), (0, 1, 8, True)])
def test_route_is_fast_decode_unless_a_first_prompt(b, s, p, fast):
    assert gqa_fast_decode(s, p) is fast
    want = attention_recipe(b, s, p + s, 32, 128, 108, 8 if fast else 32)
    assert gqa_recipe(b, s, p, 32, 128, 108, 8) == want


def test_grouped_envelope_covers_both_routes():
    h, hkv, d, sms = 8, 2, 64, 108
    brute = max(gqa_recipe(b, s, p, h, d, sms, hkv).total_bytes for b in (1, 2) for s in (1, 2, 3)
                for p in range(0, 1500))
    assert gqa_workspace_envelope((1, 2), (1, 3), (0, 1499), h, d, sms, hkv) >= brute
    exact = max(gqa_recipe(b, 1, p, h, d, sms, hkv).total_bytes for b in (1, 2) for p in range(0, 1500))
    assert gqa_workspace_envelope((1, 2), 1, (0, 1499), h, d, sms, hkv) == exact  # decode only: tight
    first = max(gqa_recipe(b, 3, 0, h, d, sms, hkv).total_bytes for b in (1, 2))
    assert gqa_workspace_envelope((1, 2), 3, 0, h, d, sms, hkv) == first  # first prompt only: by query heads


@pytest.mark.parametrize("args", [(1, 1, BIG, 4, 16, 108), (1 << 16, 1 << 16, 0, 1, 16, 108), (1, 1, 0, 4, 257, 108),
                                  (1, 1, 0, 4, 0, 108), (-1, 1, 0, 4, 16, 108), (1, 1, -1, 4, 16, 108),
                                  (1, 1, 0, 4, 16, 0), (1, "s", 0, 4, 16, 108), (1, 1, True, 4, 16, 108)])
def test_recipe_refuses_malformed_or_overflowing_shapes(args):
    assert gqa_recipe(*args) is None


def test_recipe_boundaries():
    assert gqa_recipe(1, 1, BIG - 1, 4, 16, 108) is not None  # P + S == 2**31-1
    assert gqa_recipe(1, 1, 0, 4, 256, 108) is not None
    assert gqa_recipe(0, 1, 0, 4, 16, 108).total_bytes == 0  # empty batch: no launch
    # no split once batch x heads x query blocks reach 0.8 x SMs (86.4 on 108): only the LSEs remain
    split, whole = gqa_recipe(1, 1, 4096, 86, 64, 108), gqa_recipe(1, 1, 4096, 87, 64, 108)
    assert split.num_splits > 1 and whole.num_splits == 1 and whole.total_bytes == 4 * 87
    # one 256-key block (head size <= 64) never splits; two may
    assert gqa_recipe(1, 1, 255, 4, 64, 108).num_splits == 1 and gqa_recipe(1, 1, 256, 4, 64, 108).num_splits == 2


@pytest.mark.parametrize("recipe", [gqa_recipe(1, 1, 13823, 2, 64, 108), gqa_recipe(1, 1, 600, 4, 16, 108),
                                    gqa_recipe(2, 1, 3000, 8, 128, 132), gqa_recipe(1, 3, 4000, 4, 256, 108)])
def test_split_plan_covers_every_key_within_the_declared_splits(recipe):
    assert recipe.num_splits > 1
    for t in range(1, 20000, 7):
        splits, per = gqa_split_plan(recipe, t)
        assert 1 <= splits <= recipe.num_splits and per % recipe.block_n == 0
        assert per * (splits - 1) < t <= per * splits  # no empty split, all keys covered
    assert gqa_split_plan(recipe, 0) == (1, 1)


def test_envelope_against_brute_force():
    for sms, h, d in ((108, 2, 64), (24, 4, 16), (132, 8, 128)):
        brute = max(gqa_recipe(b, s, p, h, d, sms).total_bytes for b in (1, 2) for s in (1, 2, 3)
                    for p in range(0, 1500))
        env = gqa_workspace_envelope((1, 2), (1, 3), (0, 1499), h, d, sms)
        assert env >= brute  # S and P + S are ranged independently: an upper bound
        for s in (1, 3):  # one query length: P + S spans exactly the keys of the range, so the bound is tight
            exact = max(gqa_recipe(b, s, p, h, d, sms).total_bytes for b in (1, 2) for p in range(0, 1500))
            assert gqa_workspace_envelope((1, 2), s, (0, 1499), h, d, sms) == exact
    assert gqa_workspace_envelope((1, 2), (1, 3), (0, BIG), 4, 16, 108) is None
    assert gqa_workspace_envelope(1, 1, (5, 4), 4, 16, 108) is None


def test_workspace_bytes_follow_the_query_past_and_heads_not_the_float_type():
    f32_shapes = [(1, 1, 128), None, None, (1, 2, 600, 16), (1, 2, 600, 16), (1,), (), (1024, 8), (1024, 8)]
    attrs = {"num_heads": 4, "kv_num_heads": 2}
    prof = get_profile("a100")
    want = gqa_recipe(1, 1, 600, 4, 16, 108, 2).total_bytes
    assert workspace_bytes("gqa", f32_shapes, [F32] * 9, attrs, prof) == want
    assert workspace_bytes("gqa", f32_shapes, [F16] * 9, attrs, prof) == want
    separate = [(1, 1, 64), (1, 1, 32), (1, 1, 32), None, None, (1,), (), None, None]
    assert workspace_bytes("gqa", separate, [F32] * 9, attrs, prof) == gqa_recipe(1, 1, 0, 4, 16, 108, 2).total_bytes
    assert workspace_bytes("gqa", [(1, 1, 130), *f32_shapes[1:]], [F32] * 9, attrs, prof) is None


def test_maxima_give_the_envelope(monkeypatch, models):
    _no_device(monkeypatch)
    node = models.gqa(batch=2, seq=3, past=1500).graph.nodes[0]
    ep = CudaExecutionProvider(profile="a100", shapes_are_maxima=True)
    assert ep.estimate(node, 1) == gqa_workspace_envelope((1, 2), (1, 3), (1, 1500), 4, 16, 108, 2)
    assert ep.estimate(node, 1) >= CudaExecutionProvider(profile="a100").estimate(node, 1)


# -- runtime plumbing on the recording driver --------------------------------------------------------
@pytest.fixture
def ep(recording_ep):
    return recording_ep  # tests/conftest.py


def _feeds(gqa_kit, batch=1, seq=16, past=0, **kw):
    return gqa_kit.inputs(np.random.default_rng(0), batch, seq, past, **kw)


def _run(ep, inputs, attrs, **kw):
    return ep.run_op("GroupQueryAttention", inputs, attrs, domain="com.microsoft", opset=1, output_count=3,
                     node_name="gqa", **kw)


ATTRS = {"num_heads": 4, "kv_num_heads": 2, "do_rotary": 1}


def test_host_input_stays_on_the_host_and_nothing_leaks(ep, gqa_kit):
    inputs = _feeds(gqa_kit, 1, 1, 600, cos_rows=601)
    (o, pk, pv), _ = _run(ep, inputs, ATTRS)
    assert o.shape == (1, 1, 64) and pk.shape == pv.shape == (1, 2, 601, 16)
    calls = ep.runtime._driver.calls
    copied = [c[1] for c in calls if c[0] == "HtoD"]
    assert copied == [a.nbytes for i, a in enumerate(inputs) if a is not None and i != 6]  # not total_sequence_length
    assert [c[1] for c in calls if c[0] == "launch"] == ["gqa_present_f32", "gqa_attn_f32", "gqa_combine_f32"]
    assert sum(1 for c in calls if c[0] == "DtoH") == 3
    assert ep.runtime.counters.last["gqa"] == ("scratch", gqa_recipe(1, 1, 600, 4, 16, 108, 2).total_bytes)
    assert ep.allocator.bytes_in_use == 0 and ep.runtime._driver.memory == {}


def test_planned_workspace_is_used_without_scratch(ep, gqa_kit):
    want = gqa_recipe(1, 1, 600, 4, 16, 108, 2).total_bytes
    planned = ep.allocator.alloc(want)
    _, ctx = _run(ep, _feeds(gqa_kit, 1, 1, 600, cos_rows=601), ATTRS, workspace={0: planned})
    assert ep.runtime.counters.last["gqa"] == ("planned", want)
    assert (ctx.counters.workspace_from_plan, ctx.counters.scratch_fallbacks) == (1, 0)
    ep.allocator.free(planned)
    assert ep.allocator.bytes_in_use == 0


@pytest.mark.parametrize("batch,seq,past,kw", [(1, 16, 0, {}), (2, 1, 8, {}), (1, 1, 600, {"cos_rows": 601}),
                                               (1, 4, 300, {"dtype": np.float16, "cos_rows": 304}),
                                               (2, 1, 2000, {"packed": False, "heads": 8, "kv_heads": 1, "head": 128,
                                                             "cos_rows": 2001})])
def test_level1_equals_level2_equals_runtime(ep, gqa_kit, models, batch, seq, past, kw):
    dtype = F16 if kw.get("dtype") == np.float16 else F32
    shape_kw = {k: kw[k] for k in ("packed", "heads", "kv_heads", "head", "cos_rows") if k in kw}
    node = models.gqa(batch=batch, seq=seq, past=past, dtype=dtype, **shape_kw).graph.nodes[0]
    level1 = ep.estimate(node, 1)
    registry = KernelRegistry()
    ep.register(registry)
    entry = registry.find("GroupQueryAttention", "com.microsoft", 1, EP_NAME)
    assert estimate_workspace(entry, node, ep) == level1  # the host's Level-1 path through the registry
    kernel = ep.create_kernel(node, 1)
    level2 = sum(s.size_bytes for s in declare_workspace(kernel, workspace_input_shapes(node), node=node.name))
    attrs = {k: a.value for k, a in node.attributes.items()}
    ep.run_op("GroupQueryAttention", _feeds(gqa_kit, batch, seq, past, **kw), attrs, domain="com.microsoft",
              opset=1, output_count=3, node_name=node.name)
    runtime = ep.runtime.counters.last[node.name][1]
    assert level1 == level2 == runtime > 0


def test_real_export_node_level1_equals_level2_equals_runtime(ep, gqa_kit, shared_models):
    from ort_graph import load, resolve_shapes

    model = load(shared_models / "llama_l4" / "genai_fp16_cuda" / "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolve_shapes(model, dims={"batch_size": 2, "sequence_length": 1, "total_sequence_length": 9,
                                    "past_sequence_length": 8, "kv_cache_dim": 16})
    node = next(n for n in model.graph.nodes if n.op_type == "GroupQueryAttention")
    level1 = ep.estimate(node, 1)
    kernel = ep.create_kernel(node, 1)
    level2 = sum(s.size_bytes for s in declare_workspace(kernel, workspace_input_shapes(node), node=node.name))
    feeds = _feeds(gqa_kit, 2, 1, 8, dtype=np.float16, seqlens=[8, 5], total=9)
    feeds[7], feeds[8] = model.graph.initializers["cos_cache"].numpy(), model.graph.initializers["sin_cache"].numpy()
    attrs = {k: a.value for k, a in node.attributes.items()}
    (o, pk, _), _ = ep.run_op("GroupQueryAttention", feeds, attrs, domain="com.microsoft", opset=1, output_count=3,
                              node_name=node.name)
    assert o.dtype == np.float16 and pk.shape == (2, 2, 9, 16)
    assert level1 == level2 == ep.runtime.counters.last[node.name][1] == gqa_recipe(2, 1, 8, 4, 16, 108, 2).total_bytes


def test_caches_shorter_than_the_total_length_fail_as_in_onnxruntime(ep, gqa_kit):
    inputs = _feeds(gqa_kit, 1, 1, 600, cos_rows=600)  # positions 0..600 need 601 rows
    with pytest.raises(KernelLaunchError, match="cos_cache/sin_cache have 600 rows but total_sequence_length is 601"):
        _run(ep, inputs, ATTRS)
    assert ep.allocator.bytes_in_use == 0
    (o, _, _), _ = _run(ep, inputs, {**ATTRS, "do_rotary": 0})  # without rotary the caches are not read
    assert o.shape == (1, 1, 64)


def test_a_device_total_sequence_length_is_read_back(gqa_kit):
    """Outside a session the host input may arrive on the device: it is copied back, explicitly."""
    rt = RecordingRuntime()
    inputs = _feeds(gqa_kit, 1, 1, 8)
    args = [None if a is None else rt.to_device(a) for a in inputs]
    outs = compute(rt, SPEC, "gqa", args, ATTRS, ScratchOnly(rt), 3)
    assert outs[1].shape == (1, 2, 9, 16)
    assert [e for e, *_ in rt.launches] == ["gqa_present_f32", "gqa_attn_f32"]


def test_present_sharing_memory_with_past_is_refused():
    """Past/present buffer sharing is not supported: an output over an input is refused before any launch."""
    from ort_abi import DeviceTensor

    rt = RecordingRuntime()
    inputs = _feeds_static(1, 1, 8)
    inputs[6] = np.array(8, np.int32)  # present length max(8, P=8): present_key could be past_key's memory
    args = [None if a is None else (a if i == 6 else rt.to_device(a)) for i, a in enumerate(inputs)]
    past = args[3]

    def new(i, shape, dtype):  # the memory planner never does this for GroupQueryAttention; a caller could
        if i == 1:
            return DeviceTensor(past.buffer.view(0, past.nbytes), shape, dtype)
        return rt.empty(shape, dtype)

    with pytest.raises(KernelLaunchError, match="share memory with an input"):
        compute(rt, SPEC, "gqa", args, ATTRS, ScratchOnly(rt), 3, out=new)
    assert rt.launches == []


def _feeds_static(batch, seq, past):
    rng = np.random.default_rng(1)
    hidden = 8 * 16
    half = 8
    ang = np.arange(64)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None, :]
    return [rng.standard_normal((batch, seq, hidden)).astype(np.float32), None, None,
            rng.standard_normal((batch, 2, past, 16)).astype(np.float32),
            rng.standard_normal((batch, 2, past, 16)).astype(np.float32), np.array([past + seq - 1] * batch, np.int32),
            np.array(past + seq, np.int32), np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)]
