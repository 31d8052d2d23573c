"""Control flow through the whole session: If / Loop / Scan models (weights inside their bodies, in the shapes
torch.onnx.export writes) planned statically, budgeted with their bodies' weights and memory, run on the
simulated GPU with those weights uploaded, pre-allocated on the CPU, and compared with onnxruntime; errors
inside a body name the inner node."""

import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
from ort_graph import body_weight_bytes, zoo
from ort_session import InferenceSession, InvalidOptionError, KernelRunError

SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
CPU = ["CPUExecutionProvider"]
BATCH = 2

# model, its control-flow node, input shapes (batch 2), the output shapes inference must give, extra dims
MODELS = {
    "if": (zoo.if_weights_proto, "/If", {"x": (BATCH, 256)}, [(BATCH, 256)], {}),
    "loop": (zoo.loop_proto, "/Loop", {"x": (BATCH, 64)}, [(BATCH, 64), (5, BATCH, 64)], {}),
    "scan": (zoo.scan_proto, "/Scan", {"s0": (BATCH, 32), "xs": (BATCH, 6, 32)}, [(BATCH, 32), (BATCH, 6, 32)],
             {"sequence": 6}),
    "nested": (zoo.nested_proto, "/Loop", {"x": (BATCH, 32)}, [(BATCH, 32), (3, BATCH, 32)], {}),
}


def _feeds(shapes, sign=1.0):
    rng = np.random.default_rng(7)
    return {k: (sign * np.abs(rng.standard_normal(s))).astype(np.float32) for k, s in shapes.items()}


def _session(proto, options, providers):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(proto.SerializeToString(), options, providers=providers)


def _dims(extra):
    return {"free_dimension_overrides": {"batch": BATCH, **extra}}


def _check_outputs(sess, proto, feeds):
    want = onnxruntime.InferenceSession(proto.SerializeToString(), providers=CPU).run(None, feeds)
    got = sess.run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_output_shapes_are_inferred_statically_through_the_bodies(name):
    make, _, shapes, outputs, extra = MODELS[name]
    sess = _session(make(), _dims(extra), CPU)
    graph = sess.model.graph
    assert [graph.values[o].shape for o in graph.outputs] == outputs
    assert sess.memory.static


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_bodies_weights_are_in_the_nodes_cost_and_the_plan(name):
    make, node_name, shapes, _, extra = MODELS[name]
    proto = make()
    sess = _session(proto, _dims(extra), SIM)  # no budget: every node on the simulated GPU
    node = sess.model.graph.node_by_name(node_name)
    inside = body_weight_bytes(node)
    assert inside >= 32 * 32 * 4
    assert sess.placement.result.costs[node].weights >= inside  # the node's own cost
    devices = sess.plan.to_dict()["devices"]
    assert devices["simgpu"]["weights"] >= inside
    _check_outputs(sess, proto, _feeds(shapes))
    used = sess.device_memory()["simgpu"]
    assert used["weights"] >= inside  # uploaded with the node


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_budget_below_the_bodies_weights_never_places_the_node_on_the_device(name):
    make, node_name, shapes, _, extra = MODELS[name]
    proto = make()
    sess = _session(proto, {**_dims(extra), "budgets": "gpu:8KiB"}, SIM)
    node = sess.model.graph.node_by_name(node_name)
    assert node.ep == "CPUExecutionProvider"
    stage = sess.memory.stages.get("simgpu")
    assert stage is None or stage.weights + stage.peak <= 8 * 1024
    _check_outputs(sess, proto, _feeds(shapes))
    assert sess.device_memory().get("simgpu", {"peak": 0})["peak"] <= 8 * 1024


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_budget_of_weights_plus_activations_runs_the_node_on_the_device_within_the_plan(name):
    make, node_name, shapes, _, extra = MODELS[name]
    proto = make()
    unbudgeted = _session(proto, _dims(extra), SIM).memory.stages["simgpu"]
    need = unbudgeted.weights + unbudgeted.peak
    sess = _session(proto, {**_dims(extra), "budgets": f"gpu:{need}"}, SIM)
    assert sess.model.graph.node_by_name(node_name).ep == "SimulatedGPUExecutionProvider"
    stage = sess.memory.stages["simgpu"]
    assert stage.weights + stage.peak <= need
    _check_outputs(sess, proto, _feeds(shapes))
    measured = sess.device_memory()["simgpu"]
    assert measured["peak"] <= stage.weights + stage.peak
    assert measured["weights"] >= body_weight_bytes(sess.model.graph.node_by_name(node_name))


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("options", [{"budgets": "cpu:64MiB"}, {"session.pre_allocate_execution_buffers": "1"}])
def test_cpu_only_plans_and_runs_without_allocations_where_static(name, options):
    make, node_name, shapes, _, extra = MODELS[name]
    proto = make()
    sess = _session(proto, {**_dims(extra), **options, "session.pre_allocate_execution_buffers": "1"}, CPU)
    node = sess.model.graph.node_by_name(node_name)
    assert sess.memory.stages["cpu"].weights >= body_weight_bytes(node)
    feeds = _feeds(shapes)
    _check_outputs(sess, proto, feeds)
    _check_outputs(sess, proto, feeds)
    assert sess.last_run_stats.allocations == 0
    assert sess.last_run_stats.layout == "pre-allocated"


def test_the_bodys_workspace_is_declared_in_the_plan():
    proto = zoo.loop_proto()
    sess = _session(proto, _dims({}), SIM)
    declared = sess.memory.device_totals()["simgpu"]["largest_workspace"]
    scans = 5 * BATCH * 64 * 4
    assert declared >= 2 * scans  # the per-iteration scan outputs and their stacked copy, at least
    assert sess.memory.stages["simgpu"].peak >= declared  # inside the device's planned peak


def test_the_bodies_read_the_weights_uploaded_to_the_device():
    proto = zoo.if_weights_proto()
    sess = _session(proto, _dims({}), SIM)
    feeds = _feeds({"x": (BATCH, 256)})
    before = sess.run(None, feeds)[0]
    assert np.abs(before).sum() > 0
    uploaded = sess.memory.device_weights.tensors["simgpu"]
    key = next(k for k in uploaded if k.startswith("/If/then_branch/"))
    t = uploaded[key]
    ort_abi.copy_host_to_device(np.zeros(t.shape, t.dtype), t.buffer.view(0, t.nbytes))
    after = sess.run(None, feeds)[0]  # x > 0: the then branch runs with its (now zero) device weight
    np.testing.assert_array_equal(after, np.zeros_like(before))


def _nested_gather():
    """Loop -> If -> Gather of a branch table at outer-scope indices: bad indices fail two bodies deep."""
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    branch = helper.make_graph([helper.make_node("Gather", ["table", "idx"], ["g"], name="/Loop/body/If/Gather")],
                               "then", [], [helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 3])],
                               initializer=[table])
    other = helper.make_graph([helper.make_node("Identity", ["h_in"], ["e"], name="/Loop/body/If/Identity")],
                              "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    body = helper.make_graph(
        [helper.make_node("If", ["cond_in"], ["h_out"], then_branch=branch, else_branch=other, name="/Loop/body/If"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="/Loop/body/Identity")],
        "loop_body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                      helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                      helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [2, 3])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["h"], body=body, name="/Loop")], "nested_gather",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.array(2, np.int64), "M")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("providers", [CPU, SIM])
def test_an_error_inside_a_nested_body_names_the_inner_node_and_op(providers):
    proto = _nested_gather()
    sess = _session(proto, {}, providers)
    x = np.ones((2, 3), np.float32)
    _check_outputs(sess, proto, {"x": x, "idx": np.array([0, 3])})
    with pytest.raises(KernelRunError, match=r"node '/Loop' \(Loop\).*node '/Loop/body/If/Gather' \(Gather\) "
                                             r"inside subgraph 'then' of node '/Loop/body/If' \(If\) inside subgraph "
                                             r"'loop_body' of node '/Loop' \(Loop\) failed.*index 7") as info:
        sess.run(None, {"x": x, "idx": np.array([0, 7])})
    inner = info.value.__cause__
    assert type(inner).__name__ == "SubgraphNodeError"
    assert (inner.node, inner.op_type) == ("/Loop/body/If/Gather", "Gather")


@pytest.mark.parametrize("options", [{"budgets": "gpu:1MiB"}, {"session.pre_allocate_execution_buffers": "1"}])
def test_a_data_dependent_trip_count_is_refused_at_initialization_naming_the_loop_and_the_fix(options):
    with pytest.raises(InvalidOptionError, match=r"(?s)node '/Loop' \(Loop\) has a data-dependent trip count.*"
                                                 r"constant trip count M.*session.allow_unplanned_shapes=1"):
        _session(zoo.early_exit_loop_proto(), {**_dims({}), **options}, SIM)


def test_a_data_dependent_trip_count_still_runs_without_a_budget():
    proto = zoo.early_exit_loop_proto()
    sess = _session(proto, {}, SIM)
    _check_outputs(sess, proto, {"x": np.zeros((2, 8), np.float32)})
