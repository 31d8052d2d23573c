import threading

import numpy as np
import onnxruntime as ort
import pytest

import ort_graph
from ort_graph import zoo
from ort_session import (
    InferenceSession,
    InvalidInputError,
    InvalidOptionError,
    KernelRunError,
    SessionOptions,
)

CFG = zoo.DecoderConfig(layers=2)
DIMS = {"batch": 1, "sequence": 6, "past_sequence": 2}


def _ref(cfg, feeds):
    return ort.InferenceSession(zoo.decoder_proto(cfg).SerializeToString()).run(None, feeds)


def _close(a, b, tol=1e-4):
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


@pytest.mark.parametrize("fusions", [True, False])
def test_cpu_run_matches_onnxruntime(fusions):
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "enable_fusions": fusions})
    feeds = zoo.decoder_inputs(CFG, 1, 6, 2)
    _close(sess.run(None, feeds), _ref(CFG, feeds))
    assert sess.run(["logits"], feeds)[0].shape == (1, 6, CFG.vocab)


def test_preallocated_runs_make_zero_allocations_and_reuse_buffers():
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS,
                                                "session.pre_allocate_execution_buffers": "1"})
    feeds = zoo.decoder_inputs(CFG, 1, 6, 2)
    first = sess.run(None, feeds)
    assert sess.last_run_stats.allocations == 0
    assert sess.last_run_stats.layout == "pre-allocated"
    second = sess.run(None, zoo.decoder_inputs(CFG, 1, 6, 2, seed=1))
    assert sess.last_run_stats.allocations == 0
    _close(first, _ref(CFG, feeds))  # the second run did not overwrite what the first returned
    assert not np.allclose(first[0], second[0])


def test_concurrent_run_on_preallocated_buffers_is_refused():
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS,
                                                "session.pre_allocate_execution_buffers": "1"})
    feeds = zoo.decoder_inputs(CFG, 1, 6, 2)
    started, release = threading.Event(), threading.Event()
    kernel = sess.kernels[sess.order[5].index]
    inner = kernel.compute

    def slow_compute(ctx):
        started.set()
        release.wait(10)
        return inner(ctx)

    kernel.compute = slow_compute
    errors = []
    t = threading.Thread(target=lambda: sess.run(None, feeds))
    t.start()
    started.wait(10)
    try:
        with pytest.raises(Exception, match="already using the pre-allocated"):
            sess.run(None, feeds)
    finally:
        release.set()
        t.join()
    kernel.compute = inner
    sess.run(None, feeds)  # free again after the first run ended
    assert not errors


def test_preallocation_needs_static_shapes():
    with pytest.raises(InvalidOptionError, match="static shapes.*free_dimension_overrides"):
        InferenceSession(zoo.decoder(CFG), {"session.pre_allocate_execution_buffers": "1"})


def test_preallocated_session_refuses_other_shapes():
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS,
                                                "session.pre_allocate_execution_buffers": "1"})
    with pytest.raises(InvalidInputError, match=r"'input_ids' has shape \(1, 7\), larger than the planned maximum "
                                                 r"\(1, 6\); this session pre-allocated"):
        sess.run(None, zoo.decoder_inputs(CFG, 1, 7, 2))  # larger than planned (smaller ones fit the plan)


def test_dynamic_model_traces_first_run_then_reuses_the_pattern():
    sess = InferenceSession(zoo.decoder(CFG))
    feeds = zoo.decoder_inputs(CFG, 1, 5, 3)
    out1 = sess.run(None, feeds)
    assert sess.last_run_stats.layout == "tracing"
    out2 = sess.run(None, feeds)
    assert sess.last_run_stats.layout == "cached pattern"
    # one buffer for the run, every value planned in it: the traced run allocated it for this one and left it
    # with the retaining host allocator (enable_cpu_mem_arena), so the second run allocates nothing
    assert sess.last_run_stats.allocations == 0
    _close(out1, out2, 0)
    sess.run(None, zoo.decoder_inputs(CFG, 2, 3, 0))  # a new shape key traces again
    assert sess.last_run_stats.layout == "tracing"
    _close(out2, _ref(CFG, feeds))


def _reshape_chain():
    """x [n, 6] -> Relu -> Reshape [-1, 3] -> Add x' (x read again: not in place) -> Mul; symbolic n: traced."""
    from onnx import TensorProto as T
    from onnx import helper
    from onnx import numpy_helper as nh

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "s"], ["v"]),
         helper.make_node("Reshape", ["x", "s"], ["xv"]), helper.make_node("Add", ["v", "xv"], ["a"]),
         helper.make_node("Mul", ["a", "c"], ["y"])], "chain",
        [helper.make_tensor_value_info("x", T.FLOAT, ["n", 6])], [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [nh.from_array(np.array([-1, 3], np.int64), "s"), nh.from_array(np.full([1, 3], 2.0, np.float32), "c")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto.SerializeToString()


def test_a_traced_pattern_writes_outputs_over_inputs_that_die_at_their_node():
    """The static plan's in-place pairs without sizes (`ort_memplan.inplace_candidates`), taken where the input's
    traced block holds the output: Relu's block holds the Reshape of it, then the Add; the feed x (a graph input)
    and the graph output never share. Runs on the pattern match numpy."""
    sess = InferenceSession(_reshape_chain(), {"intra_op_num_threads": 1})
    ids = []
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((4, 6)).astype(np.float32)
        want = (np.maximum(x, 0).reshape(-1, 3) + x.reshape(-1, 3)) * 2.0
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-6)
        ids.append(sess.last_run_stats.layout)
    assert ids == ["tracing", "cached pattern", "cached pattern"]
    pattern = next(iter(sess.memory._traced.values()))
    block = pattern.ids
    assert block["r"] == block["v"] == block["a"]  # in place through Reshape and Add
    assert len({block["x"], block["xv"], block["y"]} | {block["r"]}) == 4  # the feed, its Reshape (x read after), y
    assert sess.memory.inplace_candidates["a"] == ("v", "xv")


def test_without_the_arena_each_cached_run_allocates_its_one_buffer():
    sess = InferenceSession(zoo.decoder(CFG), {"enable_cpu_mem_arena": False})
    feeds = zoo.decoder_inputs(CFG, 1, 5, 3)
    counts = []
    for _ in range(3):
        sess.run(None, feeds)
        counts.append(sess.last_run_stats.allocations)
    assert counts[1:] == [1, 1]


@pytest.mark.parametrize("feeds, match", [
    ({"nope": np.zeros(1)}, "unknown input name"),
    ({}, "missing input"),
])
def test_input_names_are_validated(feeds, match):
    sess = InferenceSession(zoo.decoder(zoo.DecoderConfig(layers=1, kv_cache=False)))
    with pytest.raises(InvalidInputError, match=match):
        sess.run(None, feeds)


def test_input_dtype_rank_and_symbol_consistency_are_validated():
    cfg = zoo.DecoderConfig(layers=1)
    sess = InferenceSession(zoo.decoder(cfg))
    feeds = zoo.decoder_inputs(cfg, 1, 4, 2)
    bad = dict(feeds, input_ids=feeds["input_ids"].astype(np.int32))
    with pytest.raises(InvalidInputError, match=r"dtype int32.*INT64.*astype"):
        sess.run(None, bad)
    bad = dict(feeds, input_ids=feeds["input_ids"][0])
    with pytest.raises(InvalidInputError, match="rank 1"):
        sess.run(None, bad)
    bad = dict(feeds, **{"past_key_values.0.key": np.zeros((2, 2, 2, 16), np.float32)})
    with pytest.raises(InvalidInputError, match="'batch'"):
        sess.run(None, bad)
    with pytest.raises(InvalidInputError, match="unknown output"):
        sess.run(["nothing"], feeds)


def test_unknown_options_are_clear_errors():
    with pytest.raises(InvalidOptionError, match="unknown session option 'budget'"):
        SessionOptions.from_mapping({"budget": "cuda:1GiB"})
    with pytest.raises(InvalidOptionError, match="not a boolean"):
        InferenceSession(zoo.decoder(CFG), {"session.pre_allocate_execution_buffers": "maybe"})
    # an unknown provider is skipped with a warning, as onnxruntime does (test_ort_habits.py), unless the CPU
    # fallback is disabled: then it is an error
    with pytest.raises(InvalidOptionError, match="unknown execution provider 'TPUExecutionProvider'"):
        InferenceSession(zoo.decoder(CFG), {"session.disable_cpu_ep_fallback": "1"}, providers=["TPUExecutionProvider"])


def test_both_rule_options_is_an_error_naming_both_keys():
    with pytest.raises(Exception, match="session.layer_assignment_settings.*session.name_based_layer_assignment|"
                                        "session.name_based_layer_assignment.*session.layer_assignment_settings"):
        InferenceSession(zoo.decoder(CFG), {"session.layer_assignment_settings": "cpu(layers.0)",
                                            "session.name_based_layer_assignment": "cpu(layers.0)"})


def test_kernel_failure_names_the_node():
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS})
    node = sess.order[10]

    def boom(ctx):
        raise ValueError("synthetic failure")

    sess.kernels[node.index].compute = boom
    with pytest.raises(KernelRunError, match=f"{node.name}.*synthetic failure"):
        sess.run(None, zoo.decoder_inputs(CFG, 1, 6, 2))


def test_plan_is_known_before_any_run():
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS})
    d = sess.plan.to_dict()
    assert {n["ep"] for n in d["nodes"]} == {"CPUExecutionProvider"}
    assert d["devices"]["cpu"]["weights"] == sum(t.nbytes for t in sess.model.graph.initializers.values()
                                                  if any(t.name in n.inputs for n in sess.model.graph.nodes))
    assert d["devices"]["cpu"]["peak_activations"] >= d["devices"]["cpu"]["lower_bound"] > 0
    assert "layer 1" in sess.plan.to_table()


def test_backend_runs_a_model():
    import ort_session.backend as backend

    proto = zoo.decoder_proto(zoo.DecoderConfig(layers=1, kv_cache=False))
    ids = np.array([[1, 2, 3]], np.int64)
    (logits,) = backend.run_model(proto, [ids])
    ref = ort.InferenceSession(proto.SerializeToString()).run(None, {"input_ids": ids})[0]
    np.testing.assert_allclose(logits, ref, rtol=1e-4, atol=1e-4)
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")


def test_backend_prepare_raises_with_decline_reasons():
    from onnx import TensorProto, helper

    import ort_session.backend as backend

    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="weird", domain="example.custom")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)])
    with pytest.raises(Exception, match="weird.*NoSuchOp"):
        backend.prepare(m)


def test_model_loaded_from_path_with_external_data(tmp_path):
    path = zoo.write_decoder(tmp_path / "m.onnx", CFG)
    sess = InferenceSession(str(path), {"free_dimension_overrides": DIMS})
    feeds = zoo.decoder_inputs(CFG, 1, 6, 2)
    _close(sess.run(None, feeds), _ref(CFG, feeds))
    assert ort_graph.load(path).graph.initializers["lm_head.weight"].is_external


def test_red_zones_name_the_node_that_wrote_past_its_output():
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "red_zones": 64,
                                                "session.pre_allocate_execution_buffers": "1"})
    feeds = zoo.decoder_inputs(CFG, 1, 6, 2)
    sess.run(None, feeds)  # guards intact in a clean run
    victim = next(n for n in sess.order if n.op_type == "MatMul")
    kernel = sess.kernels[victim.index]
    inner = kernel.compute

    def overflowing(ctx):
        inner(ctx)
        device, offset, nbytes = sess.memory.gplan.value_block(victim.outputs[0])
        sess.memory.buffers.buffers[device][offset + nbytes] ^= 0xFF  # one byte past the output

    kernel.compute = overflowing
    with pytest.raises(Exception, match=victim.name):
        sess.run(None, feeds)


def test_max_shapes_plan_serves_every_smaller_run_from_the_preallocated_buffers():
    cfg = zoo.DecoderConfig(layers=2)
    maxes = {"input_ids": [1, 8], **{f"past_key_values.{i}.{k}": [1, 2, 24, 16] for i in range(2) for k in ("key", "value")}}
    sess = InferenceSession(zoo.decoder(cfg), {"max_shapes": maxes, "session.pre_allocate_execution_buffers": "1"})
    for seq, past in [(8, 0), (1, 8), (1, 23), (5, 3)]:  # prefill, then decode steps with a growing cache
        feeds = zoo.decoder_inputs(cfg, 1, seq, past)
        _close(sess.run(None, feeds), _ref(cfg, feeds))
        assert sess.last_run_stats.layout == "pre-allocated"
        assert sess.last_run_stats.allocations == 0
    with pytest.raises(InvalidInputError, match="larger than the planned maximum"):
        sess.run(None, zoo.decoder_inputs(cfg, 1, 9, 0))


def test_a_config_key_that_has_no_effect_is_flagged_with_the_closest_known_one():
    from ort_session import SessionOptions, UnknownConfigKeyWarning

    with pytest.warns(UnknownConfigKeyWarning, match="did you mean 'session.pre_allocate_execution_buffers'"):
        opts = SessionOptions.from_mapping({"session.pre_allocate_executon_buffers": "1"})
    assert not opts.pre_allocate  # the typo is kept as given, and has no effect
    with pytest.warns(UnknownConfigKeyWarning, match="the keys it reads are"):
        SessionOptions.from_mapping({"session.intra_op.allow_spinning": "0"})  # an ONNX Runtime key: accepted
