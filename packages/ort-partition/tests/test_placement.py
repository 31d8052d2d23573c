import attrs
import pytest

from ort_partition import (
    CPU_EP,
    CUDA_EP,
    Declined,
    OpSetProvider,
    PlacementError,
    PluginAdapter,
    ResourceAccountant,
    Supported,
    assign_layers,
    host_loop,
    in_tree_loop,
    node_cost_for_budget,
    place,
)

GPU_OPS = {"MatMul", "Add", "Mul", "Softmax", "Transpose", "Reshape", "Pow", "ReduceMean", "Sqrt", "Div", "Sigmoid",
           "Concat", "Slice", "Neg", "Identity", "Expand", "Unsqueeze", "Gather"}


def no_big_softmax(node):
    if node.op_type == "Softmax" and "layers.1/" in node.name:
        return ("attribute axis=-1 on a [1,4,32,32] input", "softmax over <= 16 columns",
                "keep the node on CPU or shorten the sequence")
    return None


def cuda_ep(**kw):
    return OpSetProvider(CUDA_EP, ops=GPU_OPS, reject=no_big_softmax, estimates={"Softmax": 4096, "MatMul": 0},
                         opsets={"": 17}, **kw)


class CountingEstimator:
    """A Level-1 estimator through the protocol: Concat gets 100 bytes, others unknown."""

    def __init__(self):
        self.calls = 0

    def estimate(self, node, ep_name):
        self.calls += 1
        return 100 if node.op_type == "Concat" else None


def test_claims_are_duck_typed_with_reasons():
    ok = Supported(12)
    assert ok.supported and ok.reason == "" and ok.workspace_estimate == 12
    d = Declined(ep=CUDA_EP, node="/n", op="GroupQueryAttention", domain="com.microsoft", opset=1,
                 rejected="dtype bfloat16 for input 0", accepts="float16, float32", remedy="convert to fp16")
    assert not d.supported
    assert d.reason == ("CUDAExecutionProvider declines node '/n' (com.microsoft::GroupQueryAttention, opset 1): "
                        "rejected dtype bfloat16 for input 0; accepts float16, float32; remedy: convert to fp16")
    assert d.to_dict()["reason"] == d.reason


@pytest.mark.parametrize("budget", [None, 0, 50_000, 400_000, 1_000_000, 2_500_000])
def test_in_tree_and_host_loops_agree(static_decoder, budget):
    g = static_decoder(layers=2).graph
    order = list(g.nodes)
    a = ResourceAccountant(budget, ep_name=CUDA_EP)
    b = ResourceAccountant(budget, ep_name=CUDA_EP)
    ep = cuda_ep()
    r1 = in_tree_loop(ep, order, a, CountingEstimator())
    r2 = host_loop(CUDA_EP, PluginAdapter(ep).propose(order), order, b, CountingEstimator())
    assert [n.name for n in r1.accepted] == [n.name for n in r2.accepted]
    assert [d.reason for d in r1.declined] == [d.reason for d in r2.declined]
    assert [n.name for n in r1.over_budget] == [n.name for n in r2.over_budget]
    assert r1.stop == r2.stop
    assert a.consumed == b.consumed and (budget is None or a.consumed <= budget)
    assert (r1.loop, r2.loop) == ("in-tree", "host")
    # both loops went through node_cost_for_budget: recomputing it on a fresh accountant in the same
    # order reproduces every recorded cost
    fresh = ResourceAccountant()
    for node in r1.accepted:
        claim = ep.claim(node)
        est = claim.workspace_estimate if claim.workspace_estimate is not None else (100 if node.op_type == "Concat" else None)
        assert node_cost_for_budget(fresh, node, est) == a.cost_of(node).total == b.cost_of(node).total
        fresh.account_for_node(node)


@pytest.mark.parametrize("budget", [None, "cuda:300KiB", "cuda:1MiB"])
def test_place_gives_same_result_for_in_tree_and_plugin_providers(static_decoder, budget):
    g = static_decoder(layers=3).graph
    p1 = place(g, [cuda_ep(), CPU_EP], budgets=budget, estimator=CountingEstimator())
    p2 = place(g, [PluginAdapter(cuda_ep()), CPU_EP], budgets=budget, estimator=CountingEstimator())
    assert p1.by_name() == p2.by_name()
    assert p1.consumed == p2.consumed
    assert p1.loops[CUDA_EP] == "in-tree" and p2.loops[CUDA_EP] == "host"


def test_budget_stop_is_a_cut_off(static_decoder):
    g = static_decoder(layers=2).graph
    p = place(g, [cuda_ep(), CPU_EP], budgets="cuda:300KiB")
    stop = p.stops[CUDA_EP]
    assert p.consumed[CUDA_EP] <= 300 * 1024 < p.consumed[CUDA_EP] + stop.cost
    on_cuda = p.nodes_on(CUDA_EP)
    stop_pos = [n.name for n in p.order].index(stop.node)
    assert all([n.name for n in p.order].index(n.name) < stop_pos for n in on_cuda)  # nothing after the stop
    assert p.by_name()[stop.node] == CPU_EP
    assert "budget stop" in stop.reason and stop.node in stop.reason


def test_declines_go_to_the_fallback_with_reasons(static_decoder):
    g = static_decoder(layers=2).graph
    p = place(g, [cuda_ep(), CPU_EP])
    softmax = g.node_by_name("/model/layers.1/self_attn/Softmax")
    assert p.ep_of(softmax) == CPU_EP
    assert p.ep_of(g.node_by_name("/model/layers.0/self_attn/Softmax")) == CUDA_EP
    reasons = {d.node: d for d in p.declines}
    d = reasons[softmax.name]
    assert d.rejected.startswith("attribute axis") and d.accepts and d.remedy and d.opset == 17
    shape_nodes = [n for n in g.nodes if n.op_type in ("Shape", "Range", "Greater", "Where")]
    assert shape_nodes and all(p.ep_of(n) == CPU_EP for n in shape_nodes)
    assert "op type 'Shape'" in reasons[shape_nodes[0].name].reason or shape_nodes[0].op_type != "Shape"


def test_layer_rules_restrict_providers(static_decoder):
    g = static_decoder(layers=3).graph
    index = assign_layers(g, name_rules="cuda(layers.1/); cpu(layers.0/)", available_eps=[CUDA_EP, CPU_EP])
    p = place(g, [cuda_ep(), CPU_EP], layering=index)
    for node, ep in p.assignments.items():
        if "/layers.1/" in node.name and node.op_type in GPU_OPS and node.op_type != "Softmax":
            assert ep == CUDA_EP, node.name
        else:
            assert ep == CPU_EP, node.name  # layers.0 pinned to CPU; unmatched nodes go to the fallback


def test_fallback_that_declines_is_an_error(static_decoder):
    g = static_decoder(layers=2).graph
    cpu = OpSetProvider(CPU_EP, ops={"MatMul"}, device_type="cpu")
    with pytest.raises(PlacementError, match="no execution provider") as info:
        place(g, [cpu])
    assert "declines" in str(info.value)


def test_fallback_budget_is_counted_not_a_cut_off(static_decoder):
    """Nodes over the fallback's budget have no other provider: it takes them all and counts them; the
    exact memory plan (ort-session) refuses a plan over that budget, the per-node sum does not."""
    g = static_decoder(layers=2).graph
    p = place(g, [CUDA_EP, CPU_EP], budgets="cuda:1KiB, cpu:1KiB")
    assert CPU_EP not in p.stops and p.budgets[CPU_EP] == 1024
    assert CUDA_EP in p.stops  # the accelerator's budget still cuts off
    assert len(p.assignments) == len(g.nodes) and p.consumed[CPU_EP] > 1024


def test_provider_names_must_be_unique(static_decoder):
    with pytest.raises(PlacementError, match="repeat"):
        place(static_decoder(layers=1).graph, [CPU_EP, CPU_EP])


def test_subgraph_nodes_follow_their_parent(control_flow_model):
    model = control_flow_model()
    p = place(model, [OpSetProvider(CUDA_EP, ops={"If", "Add"}), CPU_EP])
    p.apply()
    by = {n.name: n.ep for n in model.graph.walk()}
    assert by["/the_if"] == CUDA_EP and by["/t_plain"] == CUDA_EP and by["/deep_plain"] == CUDA_EP
    assert by["/plain"] == CPU_EP


@attrs.define
class ProposingEP:
    """A plugin that proposes directly (no claim method)."""

    name: str = CUDA_EP

    def propose(self, nodes):
        return [(n, Supported() if n.op_type == "MatMul" else Declined(self.name, n.name, n.op_type)) for n in nodes]


def test_plugin_provider_without_claim(static_decoder):
    g = static_decoder(layers=1).graph
    p = place(g, [ProposingEP(), CPU_EP])
    assert {n.op_type for n in p.nodes_on(CUDA_EP)} == {"MatMul"}
    assert p.loops[CUDA_EP] == "host"
