import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_partition import (
    NodeAllocationStats,
    ResourceAccountant,
    apply_workspace_heuristic,
    node_cost_breakdown,
    node_cost_for_budget,
)

W_BYTES = 8 * 8 * 4
OUT_BYTES = 4 * 8 * 4


def shared_weight_graph():
    """x[4,8] -> a = x@W -> b = a@W (same W) -> c = b@V ; all float32."""
    f = TensorProto.FLOAT
    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "W")
    v = numpy_helper.from_array(np.ones((8, 8), np.float32), "V")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["a"], name="mm_a"),
         helper.make_node("MatMul", ["a", "W"], ["b"], name="mm_b"),
         helper.make_node("MatMul", ["b", "V"], ["c"], name="mm_c")],
        "g", [helper.make_tensor_value_info("x", f, [4, 8])], [helper.make_tensor_value_info("c", f, [4, 8])], [w, v],
        value_info=[helper.make_tensor_value_info(n, f, [4, 8]) for n in ("a", "b")])
    return ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).graph


def nodes(g):
    return {n.name: n for n in g.nodes}


def test_base_cost_counts_outputs_and_initializers():
    g = shared_weight_graph()
    acc = ResourceAccountant()
    assert acc.compute_resource_count(nodes(g)["mm_a"]) == OUT_BYTES + W_BYTES


def test_shared_weights_are_counted_once():
    g = shared_weight_graph()
    n = nodes(g)
    acc = ResourceAccountant()
    costs = []
    for name in ("mm_a", "mm_b", "mm_c"):
        costs.append(node_cost_for_budget(acc, n[name], 0))
        acc.account_for_node(n[name])
    assert costs == [OUT_BYTES + W_BYTES, OUT_BYTES, OUT_BYTES + W_BYTES]
    assert acc.consumed == 3 * OUT_BYTES + 2 * W_BYTES
    assert acc.committed == {"W", "V"}


def test_pending_weights_then_reset_per_pass():
    g = shared_weight_graph()
    n = nodes(g)
    acc = ResourceAccountant()
    assert acc.compute_resource_count(n["mm_a"]) == OUT_BYTES + W_BYTES  # W pending for mm_a
    assert acc.compute_resource_count(n["mm_b"]) == OUT_BYTES  # pending elsewhere: not charged twice
    assert acc.compute_resource_count(n["mm_a"]) == OUT_BYTES + W_BYTES  # asking again is idempotent
    assert acc.pending == {"W"} and not acc.committed
    acc.reset_for_new_pass()  # nothing committed: the next pass charges W again
    assert acc.compute_resource_count(n["mm_b"]) == OUT_BYTES + W_BYTES
    acc.account_for_node(n["mm_b"])
    acc.reset_for_new_pass()
    assert acc.compute_resource_count(n["mm_a"]) == OUT_BYTES  # committed survives the reset


def test_heuristic_is_one_and_a_half_times_base():
    g = shared_weight_graph()
    acc = ResourceAccountant()
    base = OUT_BYTES + W_BYTES
    cost = node_cost_breakdown(acc, nodes(g)["mm_a"], None)
    assert cost.total == apply_workspace_heuristic(base) == base * 3 // 2 == 576
    assert cost.workspace == base // 2 and cost.workspace_source == "heuristic"
    assert apply_workspace_heuristic(3) == 4  # rounded down


@pytest.mark.parametrize("estimate", [0, 1, 1000])
def test_estimate_is_added_without_multiplier(estimate):
    g = shared_weight_graph()
    cost = node_cost_breakdown(ResourceAccountant(), nodes(g)["mm_a"], estimate)
    assert cost.total == OUT_BYTES + W_BYTES + estimate
    assert cost.workspace == estimate and cost.workspace_source == "estimate"


def test_negative_estimate_is_refused():
    g = shared_weight_graph()
    with pytest.raises(ValueError, match="negative"):
        node_cost_for_budget(ResourceAccountant(), nodes(g)["mm_a"], -1)


@pytest.mark.parametrize(
    ("row", "estimate", "total", "source"),
    [
        # measured = input + dynamic + temp + deduplicated weights (measured initializer bytes ignored)
        (NodeAllocationStats(128, 9999, 128, 1000), 0, 128 + 128 + 1000 + W_BYTES, "measured"),  # larger than L1
        (NodeAllocationStats(0, 0, 0, 0), 500, OUT_BYTES + W_BYTES + 500, "estimate"),  # L1 larger: never the sum
        (NodeAllocationStats(10, 0, 10, 10), None, OUT_BYTES + W_BYTES, "measured"),  # never below base
        (NodeAllocationStats(1000, 0, 0, 0), None, 1000 + W_BYTES, "measured"),  # replaces the heuristic
    ],
)
def test_measured_profile_against_estimate(row, estimate, total, source):
    g = shared_weight_graph()
    acc = ResourceAccountant(stats={"mm_a": row})
    cost = node_cost_breakdown(acc, nodes(g)["mm_a"], estimate)
    assert (cost.total, cost.workspace_source) == (total, source)


def test_budget_threshold_and_copy():
    g = shared_weight_graph()
    n = nodes(g)
    acc = ResourceAccountant(threshold=OUT_BYTES + W_BYTES)
    cost = node_cost_for_budget(acc, n["mm_a"], 0)
    assert not acc.would_exceed(cost)
    acc.account_for_node(n["mm_a"])
    trial = acc.copy()
    trial_cost = node_cost_for_budget(trial, n["mm_b"], 0)
    assert trial.would_exceed(trial_cost)
    trial.account_for_node(n["mm_b"])
    assert acc.consumed == OUT_BYTES + W_BYTES and trial.consumed == 2 * OUT_BYTES + W_BYTES
    assert acc.cost_of(n["mm_b"]) is None


def test_unknown_output_sizes_count_zero_and_are_reported():
    f = TensorProto.FLOAT
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", f, ["n"])], [helper.make_tensor_value_info("y", f, ["n"])])
    graph = ort_graph.from_proto(helper.make_model(g)).graph
    cost = node_cost_breakdown(ResourceAccountant(), graph.nodes[0], None)
    assert cost.total == 0 and cost.unknown_outputs == 1


def test_failing_estimator_falls_back_to_the_heuristic_with_a_warning():
    from ort_partition import CPU_EP, WorkspaceEstimateWarning, place

    class Broken:
        def estimate(self, node, ep_name):
            raise RuntimeError("no device properties")

    g = shared_weight_graph()
    with pytest.warns(WorkspaceEstimateWarning) as record:
        p = place(g, [CPU_EP], estimator=Broken())
    assert len(record) == 3
    assert "'mm_a'" in str(record[0].message) and "no device properties" in str(record[0].message)
    assert p.costs[nodes(g)["mm_a"]].workspace_source == "heuristic"


@pytest.mark.parametrize("dims, unknown", [([0, "n", 8], 0), ([0, None, 8], 0), (["n", 4, 8], 1), ([2, "n", 0], 0)])
def test_known_zero_partial_output_shapes_are_empty_not_unknown(dims, unknown):
    f = TensorProto.FLOAT
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", f, dims)], [helper.make_tensor_value_info("y", f, dims)])
    graph = ort_graph.from_proto(helper.make_model(g)).graph
    cost = node_cost_breakdown(ResourceAccountant(), graph.nodes[0], None)
    assert (cost.activations, cost.unknown_outputs) == (0, unknown)


def test_weights_inside_subgraphs_are_the_nodes_weights_charged_once():
    from ort_graph import zoo

    m = ort_graph.from_proto(zoo.if_weights_proto(hidden=16))
    ort_graph.resolve_shapes(m, {"batch": 2})
    node = m.graph.node_by_name("/If")
    acc = ResourceAccountant()
    cost = node_cost_breakdown(acc, node, None)
    assert cost.weights == 2 * 16 * 16 * 4  # the then branch's Constant and the else branch's initializer
    assert cost.activations == 2 * 16 * 4
    acc.account_for_node(node)
    assert node_cost_breakdown(acc, node, 0).weights == 0  # committed: not charged again
