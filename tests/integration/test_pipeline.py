"""The whole pipeline on zoo decoders: load -> shapes -> L1 fusions -> layer rules -> placement under a
budget -> Level-2 re-check -> memory plan -> runs, against onnxruntime on the same model.

The budgeted device is SimulatedGPUExecutionProvider (a device whose memory the host cannot read, with its
own device "simgpu", budget, plan and allocator held to the budget), so every device path runs without a GPU.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnxruntime as ort
import pytest

import ort_graph
import ort_memplan
from ort_graph import zoo
from ort_session import CpuExecutionProvider, InferenceSession, validate_feeds

SIMGPU = "SimulatedGPUExecutionProvider"
CPU = "CPUExecutionProvider"
MEMCPY = ("MemcpyFromHost", "MemcpyToHost", "MemcpyDeviceToDevice")
STATIC = dict(batch=1, sequence=8, past_sequence=0)


def _rules(k: int) -> str:
    return f"gpu(layers.[0-{k}]/)" if k else "gpu(layers.0/)"


def _layer(name: str) -> int | None:
    m = re.search(r"/layers\.(\d+)/", name)
    return int(m.group(1)) if m else None


def _reference(proto_or_path, feeds) -> list[np.ndarray]:
    src = proto_or_path.SerializeToString() if hasattr(proto_or_path, "SerializeToString") else str(proto_or_path)
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)


def _assert_close(got, want, tol=1e-4):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"output {i} differs from onnxruntime")


def _assert_layers_on_device(sess: InferenceSession, on_device: set[int]) -> None:
    """Every computing node of layers in `on_device` runs on the simulated GPU, every other one on CPU
    (boundary copies belong to the device that reads the value and are checked by the plan instead)."""
    wrong = []
    for node in sess.model.graph.nodes:
        if node.op_type in MEMCPY:
            continue
        want = SIMGPU if _layer(node.name) in on_device else CPU
        if node.ep != want:
            wrong.append((node.name, node.ep, want))
    assert not wrong, f"{len(wrong)} node(s) placed against the rules, e.g. {wrong[:5]!r}"


def _without_repeat_kv(model, options) -> InferenceSession:
    """The session `InferenceSession(model(), options, providers=[SIMGPU])` without the providers' RepeatKVFusion."""
    passes = CpuExecutionProvider.graph_passes
    CpuExecutionProvider.graph_passes = lambda self: [p for p in passes(self) if p.name != "RepeatKVFusion"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return InferenceSession(model(), options, providers=[SIMGPU])
    finally:
        CpuExecutionProvider.graph_passes = passes


def _assert_memory_consistent(sess: InferenceSession, budget: int | None, model, options) -> None:
    """Weights counted once per device, the joint plan valid, the Level-2 re-check within budget."""
    gplan = sess.memory.gplan
    ort_memplan.validate(gplan.plan, gplan.requests)
    graph = sess.model.graph
    read_on: dict[str, set[str]] = {}
    for node in graph.nodes:
        for name in node.inputs:
            if name in graph.initializers:
                read_on.setdefault(name, set()).add(node.ep)
    devices = sess.plan.to_dict()["devices"]
    for dev, info in devices.items():
        unique = sum(graph.initializers[n].nbytes for n, eps in read_on.items() if info["ep"] in eps)
        unique += info.get("prepacked_weights", 0)  # weights the host's C kernels packed at initialization
        unique -= info.get("released_weights", 0)  # ... and the initializers read from those copies alone
        released = sum(graph.initializers[n].nbytes for n in sess.memory.dropped if info["ep"] in read_on[n])
        assert info.get("released_weights", 0) == released
        assert info["weights"] == unique, f"{dev}: weights {info['weights']} != unique initializer (+ packed) bytes {unique}"
        assert info["total"] == info["weights"] + info["peak_activations"]
        assert info["peak_activations"] >= info["lower_bound"]
    # the placement report counts the nodes placement saw; the providers' RepeatKVFusion then swaps the KV repeats'
    # shape constants for its own (a few bytes): the same session without it holds report == plan, and its
    # placement is the same one
    plain = _without_repeat_kv(model, options)
    report = {d.ep: d for d in sess.plan.report.devices}
    plain_report = {d.ep: d for d in plain.plan.report.devices}
    assert plain_report[SIMGPU].weight_bytes == plain.plan.to_dict()["devices"]["simgpu"]["weights"], \
        "the placement report counted a weight twice"
    assert report[SIMGPU] == plain_report[SIMGPU]
    recheck = sess.plan.to_dict()["recheck"]  # precise Level 2: weights + planned peak (declared workspace)
    assert recheck["ok"] and not recheck["planned_overruns"], f"Level-2 re-check overran: {recheck!r}"
    if budget is not None:
        assert devices["simgpu"]["total"] <= budget
        assert devices["simgpu"]["budget"] == budget


@pytest.mark.parametrize("k", [0, 2])
def test_name_rules_place_layers_under_a_budget_and_match_onnxruntime(k):
    cfg = zoo.DecoderConfig(layers=4, **STATIC)
    budget = 1 << 20
    options = {"session.name_based_layer_assignment": _rules(k), "budgets": "gpu:1MiB"}
    sess = InferenceSession(zoo.decoder(cfg), options, providers=[SIMGPU])
    assert sess.placement.mode == "rules"
    _assert_layers_on_device(sess, set(range(k + 1)))
    _assert_memory_consistent(sess, budget, lambda: zoo.decoder(cfg), options)
    assert sess.recheck.ok, sess.recheck  # with room to spare, even the per-node cost sum fits after copies
    feeds = zoo.decoder_inputs(cfg, 1, 8, 0)
    _assert_close(sess.run(None, feeds), _reference(zoo.decoder_proto(cfg), feeds))
    assert sess.last_run_stats.nodes_run == len(sess.model.graph.nodes)


def test_budget_stops_rule_placement_where_it_would_overrun():
    cfg = zoo.DecoderConfig(layers=4, **STATIC)
    free = InferenceSession(zoo.decoder(cfg), {"session.name_based_layer_assignment": _rules(3), "budgets": "gpu:1GiB"},
                            providers=[SIMGPU])
    needed = free.placement.result.consumed[SIMGPU]
    budget = needed // 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = {"session.name_based_layer_assignment": _rules(3), "budgets": f"gpu:{budget}"}
        sess = InferenceSession(zoo.decoder(cfg), options, providers=[SIMGPU])
    placed = [n for n in sess.model.graph.nodes if n.ep == SIMGPU and n.op_type not in MEMCPY]
    assert placed and len(placed) < len([n for n in free.model.graph.nodes if n.ep == SIMGPU and n.op_type not in MEMCPY])
    assert sess.placement.result.consumed[SIMGPU] <= budget
    assert SIMGPU in sess.placement.result.stops
    _assert_memory_consistent(sess, budget, lambda: zoo.decoder(cfg), options)
    feeds = zoo.decoder_inputs(cfg, 1, 8, 0)
    _assert_close(sess.run(None, feeds), _reference(zoo.decoder_proto(cfg), feeds))


def _placements(cfg, options):
    sess = InferenceSession(zoo.decoder(cfg), options, providers=[SIMGPU])
    return sess, {n.name: n.ep for n in sess.model.graph.nodes}


ANNOTATED = zoo.DecoderConfig(layers=3, layer_annotations=True, **STATIC)


def test_annotation_mode_places_like_the_equivalent_name_rules():
    _, by_ann = _placements(ANNOTATED, {"session.layer_assignment_settings": "gpu(layers.0, layers.1)"})
    _, by_name = _placements(ANNOTATED, {"session.name_based_layer_assignment": "gpu(layers.0/, layers.1/)"})
    differ = sorted(k for k in by_ann.keys() | by_name.keys() if by_ann.get(k) != by_name.get(k))
    assert not differ, f"annotation and name rules place {len(differ)} node(s) differently: {differ[:6]!r}"


def test_annotation_mode_places_every_annotated_node_like_its_name_rule():
    ann_sess, by_ann = _placements(ANNOTATED, {"session.layer_assignment_settings": "gpu(layers.0, layers.1)"})
    _, by_name = _placements(ANNOTATED, {"session.name_based_layer_assignment": "gpu(layers.0/, layers.1/)"})
    annotated = [n for n in ann_sess.model.graph.nodes if n.layer_ann is not None]
    assert len(annotated) > 100
    for node in annotated:
        assert by_ann[node.name] == by_name[node.name] == (SIMGPU if node.layer_ann in ("layers.0", "layers.1") else CPU)
    # nodes outside any layer (embeddings, rotary tables, masks, lm_head) stay on CPU in both modes
    for node in ann_sess.model.graph.nodes:
        if node.layer_ann is None and _layer(node.name) is None and node.op_type not in MEMCPY:
            assert by_ann[node.name] == by_name[node.name] == CPU


def test_rules_still_match_after_l1_fusions_rename_nodes():
    cfg = zoo.DecoderConfig(layers=3, bias=True, norm="layernorm", **STATIC)
    options = {"session.name_based_layer_assignment": _rules(1), "budgets": "gpu:2MiB"}
    sess = InferenceSession(zoo.decoder(cfg), options, providers=[SIMGPU])
    created = {name for rec in sess.fusions for name in rec.created}
    kinds = {rec.fusion for rec in sess.fusions}
    assert {"MatMulAddFusion", "LayerNormFusion"} <= kinds, kinds
    original = {n.name for n in zoo.decoder(cfg).graph.nodes}
    renamed = [n for n in sess.model.graph.nodes if n.name in created and n.name not in original]
    assert renamed, "the L1 fusions created no new node names"
    for node in renamed:
        want = SIMGPU if _layer(node.name) in (0, 1) else CPU
        assert node.ep == want, f"fused node {node.name!r} is on {node.ep}, its rule says {want}"
    _assert_layers_on_device(sess, {0, 1})
    _assert_memory_consistent(sess, 2 << 20, lambda: zoo.decoder(cfg), options)
    feeds = zoo.decoder_inputs(cfg, 1, 8, 0)
    _assert_close(sess.run(None, feeds), _reference(zoo.decoder_proto(cfg), feeds))


def test_dynamic_model_budgets_by_max_shapes_serves_smaller_runs_from_the_static_plan():
    cfg = zoo.DecoderConfig(layers=3)  # symbolic batch / sequence / past_sequence
    max_seq, max_past = 32, 64
    options = {
        "free_dimension_overrides": {"batch": 1},
        "max_shapes": {"input_ids": [1, max_seq], "past_key_values.0.key": [1, cfg.kv_heads, max_past, cfg.hidden // cfg.heads]},
        "session.name_based_layer_assignment": _rules(1), "budgets": "gpu:4MiB"}
    sess = InferenceSession(zoo.decoder(cfg), options, providers=[SIMGPU])
    # the budget was charged with the maximum shapes (Level-1 estimates), not a guess
    costs = {node.name: cost for node, cost in sess.placement.result.costs.items()}
    q_proj = costs["/model/layers.0/self_attn/q_proj/MatMul"]
    assert q_proj.activations == 1 * max_seq * cfg.hidden * 4
    assert q_proj.workspace_source == "estimate" and q_proj.unknown_outputs == 0
    _assert_layers_on_device(sess, {0, 1})
    _assert_memory_consistent(sess, 4 << 20, lambda: zoo.decoder(cfg), options)
    proto = zoo.decoder_proto(cfg)
    layouts = []
    for batch, seq, past in [(1, 5, 3), (1, 5, 3), (1, 7, 2), (1, 5, 3)]:
        feeds = zoo.decoder_inputs(cfg, batch, seq, past)
        _assert_close(sess.run(None, feeds), _reference(proto, feeds))
        stats = sess.last_run_stats
        layouts.append(stats.layout)
        assert stats.scratch_fallbacks == 0
    # the max shape of past_key_values.0.key bounds 'past_sequence' for every past input: the plan is static,
    # and runs no larger than the max shapes are served from it (no tracing, nothing outside the budget)
    assert sess.memory.static
    assert layouts == ["static plan"] * 4


def test_preallocated_runs_make_zero_allocations_on_both_devices():
    cfg = zoo.DecoderConfig(layers=3, **STATIC)
    sess = InferenceSession(zoo.decoder(cfg), {"session.name_based_layer_assignment": _rules(1), "budgets": "gpu:2MiB",
                                               "session.pre_allocate_execution_buffers": "1"}, providers=[SIMGPU])
    assert set(sess.memory.gplan.plan.peak) == {"cpu", "simgpu"}
    proto = zoo.decoder_proto(cfg)
    for seed in (0, 1):
        feeds = zoo.decoder_inputs(cfg, 1, 8, 0, seed=seed)
        _assert_close(sess.run(None, feeds), _reference(proto, feeds))
        stats = sess.last_run_stats
        assert (stats.layout, stats.allocations, stats.scratch_fallbacks) == ("pre-allocated", 0, 0)
        assert stats.planned_values == stats.nodes_run


# -- real exports ---------------------------------------------------------------------------------
EXPORTS = ["genai_fp32_cpu/model.onnx", "genai_int8_cpu/model.onnx", "genai_int4_cpu/model.onnx",
           "torch/torchscript_kv_dynamic.onnx", "torch/dynamo_kv_dynamic.onnx"]


def _feeds_for(path, batch=1, seq=5, past=3) -> dict[str, np.ndarray]:
    model = ort_graph.load(path)
    rng = np.random.default_rng(0)
    feeds = {}
    for name in model.graph.inputs:
        if name in model.graph.initializers:
            continue
        v = model.graph.values[name]
        shape = []
        for d in v.shape:
            if isinstance(d, int):
                shape.append(d)
            elif "past" in d:
                shape.append(past)
            elif "total" in d:
                shape.append(past + seq)
            elif "batch" in d:
                shape.append(batch)
            elif "kv_cache_dim" in d:
                shape.append(16)
            else:
                shape.append(seq)
        if name == "input_ids":
            feeds[name] = rng.integers(0, 256, shape).astype(np.int64)
        elif name == "attention_mask":
            feeds[name] = np.ones(shape, np.int64)
        else:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _derived_layer(node) -> int | None:
    import ort_partition

    return _layer(ort_partition.name_match_target(node))


@pytest.mark.parametrize("export", EXPORTS)
def test_real_export_runs_placed_and_matches_onnxruntime(shared_models, export):
    path = shared_models / "llama_l4" / export
    feeds = _feeds_for(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exporters' stale shape annotations are reported, not fatal
        _, dims = validate_feeds(ort_graph.load(path).graph, feeds)  # a budget plans the shapes the run feeds
        options = {"session.name_based_layer_assignment": "gpu(layers.0/, layers.1/)", "budgets": "gpu:64MiB",
                   "free_dimension_overrides": dims}
        sess = InferenceSession(str(path), options, providers=[SIMGPU])
    wrong = [(n.name, n.ep) for n in sess.model.graph.nodes if n.op_type not in MEMCPY
             and (n.ep == SIMGPU) != (_derived_layer(n) in (0, 1))]
    assert not wrong, f"{len(wrong)} node(s) placed against the rules, e.g. {wrong[:5]!r}"
    assert sum(n.ep == SIMGPU for n in sess.model.graph.nodes) > 10
    _assert_memory_consistent(sess, 64 << 20, lambda: str(path), options)
    ops = {n.op_type for n in sess.model.graph.nodes}
    if export.startswith("genai"):
        assert "GroupQueryAttention" in ops
        assert ("MatMulNBits" in ops) == ("int" in export)
    _assert_close(sess.run(None, feeds), _reference(path, feeds), tol=2e-4)


# -- a C kernel library in a session --------------------------------------------------------------
def _c_model(m: int = 16, k: int = 64, n: int = 32, bs: int = 16):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    b = rng.integers(0, 256, (n, k // bs, bs // 2), dtype=np.uint8)
    scales = (rng.random(n * (k // bs), dtype=np.float32) * 0.1 + 0.01).astype(np.float32)
    nodes = [helper.make_node("MatMulNBits", ["x", "B", "scales"], ["h"], name="/c/MatMulNBits", domain="com.microsoft",
                              K=k, N=n, bits=4, block_size=bs),
             helper.make_node("Softmax", ["h"], ["y"], name="/c/Softmax", axis=-1)]
    graph = helper.make_graph(nodes, "c_kernels", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, n])],
                              [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return model, b, scales


@pytest.mark.parametrize("preallocate", ["0", "1"])
def test_c_kernel_library_takes_nodes_and_matches_numpy(parity_lib, preallocate):
    m, k, n, bs = 16, 64, 32, 16
    model, b, scales = _c_model(m, k, n, bs)
    sess = InferenceSession(model, {"kernel_libraries": [str(parity_lib)],
                                    "session.pre_allocate_execution_buffers": preallocate}, providers=[CPU])
    cpu = sess.providers[-1]
    for node in sess.model.graph.nodes:
        entry = cpu.entry(node)
        assert entry.language == "c" and str(entry.library) == str(parity_lib), (node.name, entry)
    mnb = next(nd for nd in sess.model.graph.nodes if nd.op_type == "MatMulNBits")
    # Level 1 and Level 2 of the C kernel, through the session: M = 16 > 8 takes the tiled path, which
    # (as ort-cuda-ep's) needs no workspace; planned workspace through a C library is the parity
    # matrix's MultiHeadAttention rows (test_abi_parity.py)
    assert cpu.estimate(mnb) == 0
    assert sess.memory.slots == {}
    x = np.random.default_rng(4).standard_normal((1, m, k)).astype(np.float32)
    w = _dequantize(b, scales, n, k, bs)
    h = x.reshape(m, k).astype(np.float64) @ w
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    want = (e / e.sum(axis=-1, keepdims=True)).reshape(1, m, n)
    _assert_close([want.astype(np.float32)], _reference(model, {"x": x}), tol=1e-5)  # numpy reads ORT's layout
    for _ in range(2):
        (got,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        stats = sess.last_run_stats
        assert (stats.workspace_from_plan, stats.scratch_fallbacks) == (0, 0)
        if preallocate == "1":
            assert (stats.layout, stats.allocations) == ("pre-allocated", 0)


def _dequantize(b, scales, n, k, bs) -> np.ndarray:
    """ONNX Runtime's 4-bit layout, zero point 8: [K, N] float64."""
    q = np.stack([b & 0xF, b >> 4], axis=-1).reshape(n, k).astype(np.float64)
    return ((q - 8.0) * np.repeat(scales.reshape(n, k // bs), bs, axis=1)).T
