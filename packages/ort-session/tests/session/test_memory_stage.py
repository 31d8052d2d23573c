"""The session's memory as one stage per device; traced patterns that cover workspace; feeds larger than
planned refused before any kernel runs while the session holds its memory promise."""

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_memplan
from ort_session import InferenceSession
from ort_session._errors import FeedExceedsPlanError, InvalidInputError, InvalidOptionError

CPU = ["CPUExecutionProvider"]
SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]


def conv_model():
    """A symbolic-batch Conv (im2col workspace declared per shape) followed by an Abs (an activation no pass fuses
    into the Conv: its output Y stays a block of its own)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    nodes = [helper.make_node("Conv", ["X", "W"], ["Y"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Abs", ["Y"], ["Z"], name="relu")]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 4, 8, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _session(options=None, providers=CPU):
    options = dict(options or {})
    if providers == SIM:  # both nodes on the simulated GPU
        options["session.name_based_layer_assignment"] = "gpu(conv, relu)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(conv_model(), options, providers=providers)


def _x(batch):
    return np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)


@pytest.mark.parametrize("providers", [CPU, SIM], ids=["cpu", "simgpu"])
def test_second_run_of_a_shape_key_takes_its_workspace_from_the_traced_pattern(providers):
    sess = _session(providers=providers)
    reference = _session().run(None, {"X": _x(2)})[0]
    first = sess.run(None, {"X": _x(2)})[0]
    stats = sess.last_run_stats
    assert (stats.layout, stats.scratch_fallbacks, stats.workspace_from_plan) == ("tracing", 1, 0)
    assert stats.scratch_bytes > 0
    second = sess.run(None, {"X": _x(2)})[0]
    stats = sess.last_run_stats
    assert (stats.layout, stats.scratch_fallbacks, stats.scratch_bytes, stats.workspace_from_plan) == \
        ("cached pattern", 0, 0, 1)
    np.testing.assert_allclose(first, reference, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, reference, rtol=1e-5, atol=1e-5)
    sess.run(None, {"X": _x(3)})  # a new key traces again, with its own workspace size
    assert sess.last_run_stats.layout == "tracing" and sess.last_run_stats.scratch_fallbacks == 1
    sess.run(None, {"X": _x(3)})
    assert sess.last_run_stats.scratch_fallbacks == 0 and sess.last_run_stats.workspace_from_plan == 1


def test_traced_workspace_shares_memory_with_activations():
    sess = _session({"intra_op_num_threads": 1})  # the C Conv declares one im2col buffer per thread it gets
    sess.run(None, {"X": _x(2)})
    pattern = next(iter(sess.memory._traced.values()))
    (slot, name), = pattern.workspace[0].items()
    workspace = next(r for r in pattern.requests if r.id == pattern.ids[name])
    x = next(r for r in pattern.requests if r.id == pattern.ids["X"])
    from ort_cpu_ep import c_kernels

    # im2col, float32: the C Conv builds it one image and at most 512 output pixels at a time (C * k*k * H*W
    # here), the numpy kernel for the whole batch (N * C * k*k * H*W)
    im2col = 3 * 9 * 64 * 4 if c_kernels.c_registry() is not None else 2 * 3 * 9 * 64 * 4
    assert slot == 0 and workspace.nbytes == im2col
    assert workspace.first >= x.first and workspace.last < max(r.last for r in pattern.requests)


def test_the_session_builds_one_memory_stage_per_device():
    sess = _session({"budgets": "gpu:1MiB", "free_dimension_overrides": {"N": 2}}, providers=SIM)
    stage = sess.memory.stages["simgpu"]
    assert stage.budget == 1 << 20 and stage.weights == 4 * 3 * 3 * 3 * 4
    assert stage.allocator is sess.memory.allocators["simgpu"] and stage.allocator.capacity == 1 << 20
    assert stage.peak == sess.memory.gplan.plan.peak["simgpu"] > 0
    assert sess.memory.device_budgets == {"simgpu": (1 << 20) - stage.weights}
    assert sess.memory.stages["cpu"].allocator is None and sess.memory.stages["cpu"].budget is None
    assert sess.device_memory()["simgpu"]["weights"] == stage.weights


PROMISES = {
    "budget": ({"budgets": "gpu:1MiB", "free_dimension_overrides": {"N": 2}}, SIM),
    "pre-allocated": ({"session.pre_allocate_execution_buffers": "1", "free_dimension_overrides": {"N": 2}}, CPU),
}


@pytest.mark.parametrize("promise", sorted(PROMISES))
def test_a_feed_larger_than_planned_is_refused_before_any_kernel_runs(promise):
    options, providers = PROMISES[promise]
    sess = _session(options, providers)
    done = []
    with pytest.raises(FeedExceedsPlanError, match=r"input 'X' has shape \(3, 3, 8, 8\), larger than the planned "
                                                   r"maximum \(2, 3, 8, 8\).*--dim") as info:
        sess.run(None, {"X": _x(3)}, progress=lambda k, n: done.append(k))
    assert done == [] and (info.value.input_name, info.value.shape, info.value.planned) == \
        ("X", (3, 3, 8, 8), (2, 3, 8, 8))
    with pytest.raises(InvalidInputError, match=r"rank 5"):  # another rank: refused by the feed checks already
        sess.run(None, {"X": np.zeros((1, 1, 3, 8, 8), np.float32)})
    for batch in (2, 1):  # the planned shape and smaller ones run from the same plan
        np.testing.assert_allclose(sess.run(None, {"X": _x(batch)})[0], _session().run(None, {"X": _x(batch)})[0],
                                   rtol=1e-5, atol=1e-5)
        assert sess.last_run_stats.layout in ("static plan", "pre-allocated")


def test_without_a_promise_a_larger_feed_traces_a_new_pattern():
    sess = _session({"free_dimension_overrides": {"N": 2}})
    sess.run(None, {"X": _x(3)})
    assert sess.last_run_stats.layout == "tracing"


def test_the_red_zones_environment_variable_turns_guards_on(monkeypatch):
    monkeypatch.setenv("ORT_LOWMEM_RED_ZONES", "64")
    sess = _session({"free_dimension_overrides": {"N": 2}, "session.pre_allocate_execution_buffers": "1"})
    assert sess.memory.gplan.plan.red_zone == 64
    sess.run(None, {"X": _x(2)})  # guards intact in a clean run
    conv = next(n for n in sess.order if n.op_type == "Conv")
    kernel = sess.kernels[conv.index]
    inner = kernel.compute

    def overflowing(ctx):  # one byte past its output block
        inner(ctx)
        device, offset, nbytes = sess.memory.gplan.value_block(conv.outputs[0])
        sess.memory.buffers.buffers[device][offset + nbytes] ^= 0xFF

    kernel.compute = overflowing
    with pytest.raises(ort_memplan.RedZoneViolation, match=r"node 'conv' \(step 0\) wrote 1 byte past the end of 'Y'"):
        sess.run(None, {"X": _x(2)})


@pytest.mark.parametrize("raw", ["lots", "-8"])
def test_a_bad_red_zones_environment_variable_is_refused_at_initialization(monkeypatch, raw):
    monkeypatch.setenv("ORT_LOWMEM_RED_ZONES", raw)
    with pytest.raises(InvalidOptionError, match=f"ORT_LOWMEM_RED_ZONES='{raw}'"):
        _session({"free_dimension_overrides": {"N": 2}})


@pytest.mark.parametrize("arena", [True, False])
def test_the_host_buffer_of_a_run_is_kept_for_the_next_one_unless_the_cpu_arena_is_off(arena):
    """enable_cpu_mem_arena (default True): the second run takes the buffer the first one left (no allocation),
    as onnxruntime's CPU arena keeps its memory; False: every run allocates its buffer and frees it at its end."""
    sess = _session({"free_dimension_overrides": {"N": 2}, "enable_cpu_mem_arena": arena})
    x = _x(2)
    first = sess.run(None, {"X": x})[0]
    assert sess.last_run_stats.allocations == 1 and sess.last_run_stats.layout == "static plan"
    second = sess.run(None, {"X": x})[0]
    np.testing.assert_array_equal(first, second)
    assert sess.last_run_stats.allocations == (0 if arena else 1)
    kept = sess.memory.stages["cpu"].arena()
    assert getattr(kept, "kept_bytes", 0) == (sess.memory.gplan.plan.peak["cpu"] if arena else 0)
    sess.close()
    assert getattr(kept, "kept_bytes", 0) == 0  # closing the session drops it
