"""Device-resident execution on the simulated GPU (a device whose memory the host cannot read):
weights uploaded once, values in the device arena, explicit copies at the boundaries, the budget
held by the device's allocator at run time, and nothing left behind by runs, failures or close()."""

import warnings

import numpy as np
import pytest

import ort_abi
from ort_cpu_ep import StagedKernel
from ort_graph import zoo
from ort_session import InferenceSession, InvalidOptionError, KernelRunError, SessionError
from ort_session._errors import UnplannedShapesWarning

CFG = zoo.DecoderConfig(layers=4, hidden=64, vocab=256)
DIMS = {"batch": 1, "sequence": 16, "past_sequence": 0}
SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
RULES = "gpu(layers.0/, layers.1/)"


def _session(options=None, dims=DIMS, providers=SIM):
    opts = {"session.name_based_layer_assignment": RULES, **(options or {})}
    if dims is not None:
        opts["free_dimension_overrides"] = dims
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(zoo.decoder(CFG), opts, providers=providers)


def _feeds(seq=16):
    return zoo.decoder_inputs(CFG, 1, seq, 0)


@pytest.fixture(scope="module")
def reference():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS})
    return cpu.run(None, _feeds())


def _allocator(sess):
    return sess.memory.allocators["simgpu"]


def test_device_nodes_see_device_tensors_and_outputs_match_the_cpu_run(reference, monkeypatch):
    seen = set()
    real = StagedKernel.compute

    def spy(self, ctx):
        seen.update(type(a).__name__ for a in ctx.inputs if a is not None)
        return real(self, ctx)

    monkeypatch.setattr(StagedKernel, "compute", spy)
    sess = _session({"session.pre_allocate_execution_buffers": "1"})
    for got, want in zip(sess.run(None, _feeds()), reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert seen == {"DeviceTensor"}  # weights and activations: every input of a device node is on the device


def test_weights_are_uploaded_once_and_the_arena_is_the_plan(reference):
    sess = _session({"session.pre_allocate_execution_buffers": "1", "budgets": "gpu:64MiB"})
    alloc = _allocator(sess)
    use = sess.device_memory()["simgpu"]
    weights = sess.memory.weights["simgpu"]
    arena = sess.memory.gplan.plan.peak["simgpu"]
    assert use["weights"] == weights and use["in_use"] == weights + arena
    assert use["capacity"] == 64 << 20 and use["peak"] <= use["capacity"]
    count = alloc.alloc_count
    for _ in range(3):
        sess.run(None, _feeds())
    assert alloc.alloc_count == count  # no upload, no device allocation during runs
    assert sess.last_run_stats.allocations == 0 and alloc.bytes_in_use == weights + arena


def test_graph_inputs_are_planned_on_the_host_where_feeds_arrive():
    sess = _session()
    acts = sess.memory.gplan.activations
    for name in sess.input_names:
        assert sess.memory.gplan.by_id[acts.value_ids[name]].device == "cpu"


def test_per_run_buffers_and_unplanned_values_are_freed_after_each_run(reference):
    static = _session()  # a static plan without pre-allocation: the arena is allocated per run
    weights = static.memory.weights["simgpu"]
    static.run(None, _feeds())
    assert _allocator(static).bytes_in_use == weights
    dynamic = _session(dims=None)  # symbolic dims: traced, then the cached pattern
    for layout in ("tracing", "cached pattern"):
        for got, want in zip(dynamic.run(None, _feeds()), reference):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert dynamic.last_run_stats.layout == layout
        assert _allocator(dynamic).bytes_in_use == dynamic.memory.weights["simgpu"]


def test_a_budget_with_symbolic_dims_left_open_is_refused_at_initialization_naming_them():
    with pytest.raises(InvalidOptionError, match=r"(?s)budget cannot be planned.*simgpu.*dynamic input dimensions: "
                                                 r"input 'input_ids' \['batch', 'sequence'\].*free_dimension_overrides"
                                                 r".*allow_unplanned_shapes"):
        _session({"budgets": "gpu:4MiB"}, dims=None)


def test_the_budget_is_held_at_run_time_and_a_refused_run_leaks_nothing():
    # accepted knowingly (symbolic dims left open): a warning at initialization, the allocator holds the budget
    with pytest.warns(UnplannedShapesWarning, match="cannot be guaranteed by the plan"):
        sess = InferenceSession(zoo.decoder(CFG), {"session.name_based_layer_assignment": RULES, "budgets": "gpu:4MiB",
                                                   "session.allow_unplanned_shapes": "1"}, providers=SIM)
    alloc = _allocator(sess)
    assert alloc.capacity == 4 << 20
    before = alloc.bytes_in_use
    long = zoo.decoder_inputs(CFG, 8, 512, 0)  # values far larger than the budget left after the weights
    with pytest.raises(KernelRunError, match="cannot allocate .* capacity 4194304"):
        sess.run(None, long)
    assert alloc.bytes_in_use == before  # every device buffer of the failed run was freed
    sess.run(None, _feeds())  # and the session still works


def test_close_frees_all_device_memory_and_refuses_later_runs():
    with _session({"session.pre_allocate_execution_buffers": "1"}) as sess:
        sess.run(None, _feeds())
        alloc = _allocator(sess)
    assert alloc.bytes_in_use == 0 and alloc.live_buffers == 0
    sess.close()  # idempotent
    with pytest.raises(SessionError, match="closed"):
        sess.run(None, _feeds())


def test_red_zones_in_the_device_arena_name_the_node_that_wrote_past_its_output(reference):
    sess = _session({"red_zones": 64, "session.pre_allocate_execution_buffers": "1"})
    for got, want in zip(sess.run(None, _feeds()), reference):  # guards intact in a clean run
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    victim = next(n for n in sess.order if n.op_type == "MatMul" and n.ep == SIM[0])
    kernel = sess.kernels[victim.index]
    inner = kernel.compute

    def overflowing(ctx):
        inner(ctx)
        device, offset, nbytes = sess.memory.gplan.value_block(victim.outputs[0])
        assert device == "simgpu"
        arena = sess.memory.buffers.buffers[device]  # a DeviceBuffer: written only by explicit copies
        ort_abi.copy_host_to_device(np.array([0x5A], np.uint8), arena.view(offset + nbytes, 1))

    kernel.compute = overflowing
    with pytest.raises(Exception, match=victim.name):
        sess.run(None, _feeds())


def test_a_cpu_subgraph_reading_a_device_value_reads_its_host_copy():
    """An If on the CPU whose branches read a value made on the device: the boundary copy is what the
    branches read (they never see a DeviceTensor)."""
    from onnx import TensorProto, helper

    then_g = helper.make_graph([helper.make_node("Identity", ["r"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["r"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="/model/layers.0/Relu"),
                           helper.make_node("If", ["c"], ["y"], name="/model/If", then_branch=then_g, else_branch=else_g)],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = InferenceSession(model, {"session.name_based_layer_assignment": "gpu(layers.0/)"}, providers=SIM)
    assert [n.ep for n in sess.model.graph.nodes if n.op_type in ("Relu", "If")] == [SIM[0], SIM[1]]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    for cond, want in ((True, np.maximum(x, 0)), (False, -np.maximum(x, 0))):
        (y,) = sess.run(None, {"x": x, "c": np.array(cond)})
        np.testing.assert_array_equal(y, want)


def test_the_simulated_gpu_offers_a_mapped_backing():
    import ort_abi
    from ort_session import SimulatedGpuExecutionProvider

    ep = SimulatedGpuExecutionProvider(None, {})
    mapped = ep.mapped_allocator
    assert mapped is ep.mapped_allocator and mapped.mapped and not ep.allocator.mapped
    buf = mapped.alloc(8)
    buf.numpy()[:] = 7
    out = np.zeros(8, np.uint8)
    ort_abi.copy_device_to_host(buf, out)
    assert out.tolist() == [7] * 8
    mapped.free(buf)
