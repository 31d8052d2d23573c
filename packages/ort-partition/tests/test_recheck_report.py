import json
import warnings

import pytest

from ort_partition import (
    CPU_EP,
    CUDA_EP,
    BudgetOverrunWarning,
    OpSetProvider,
    PlacementReport,
    auto_fit,
    place,
    recheck_budget,
)

GPU_OPS = {"MatMul", "Add", "Mul", "Softmax", "Transpose", "Reshape", "Pow", "ReduceMean", "Sqrt", "Div", "Sigmoid",
           "Concat", "Slice", "Neg", "Identity", "Expand", "Unsqueeze"}


class FusedEstimator:
    def __init__(self, fused_bytes):
        self.fused_bytes = fused_bytes

    def estimate(self, node, ep_name):
        if node.op_type == "FusedMatMulAct":
            return self.fused_bytes
        return 0 if node.op_type == "MatMul" else None


def _fuse(graph):
    """Replace gate_proj MatMul + Sigmoid of layer 0 with one fused node, keeping the ep (what L2 does)."""
    mm = graph.node_by_name("/model/layers.0/mlp/gate_proj/MatMul")
    sig = graph.node_by_name("/model/layers.0/mlp/act_fn/Sigmoid")
    ep = mm.ep
    graph.remove_node(mm)
    graph.remove_node(sig)
    fused = graph.add_node("FusedMatMulAct", list(mm.inputs), list(sig.outputs), name=mm.name + "/Fusion",
                           domain="com.example", position=0)
    fused.ep = ep
    graph.relink()
    return fused


def test_level2_recheck_warns_with_the_overrun_and_never_reassigns(static_decoder):
    model = static_decoder(layers=2)
    g = model.graph
    fit = auto_fit(g, [OpSetProvider(CUDA_EP, ops=GPU_OPS), CPU_EP], "cuda:2MiB", estimator=FusedEstimator(0))
    fit.placement.apply()
    budget = fit.budget
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = recheck_budget(g, {CUDA_EP: budget}, estimator=FusedEstimator(0))
    assert before.ok and before.totals[CUDA_EP] == fit.cost_on_device
    fused = _fuse(g)
    assert fused.ep == CUDA_EP
    eps_before = {n.name: n.ep for n in g.nodes}
    extra = 10 * budget
    with pytest.warns(BudgetOverrunWarning) as record:
        result = recheck_budget(g, {CUDA_EP: budget}, estimator=FusedEstimator(extra))
    (overrun,) = result.overruns
    assert overrun.ep == CUDA_EP and overrun.overrun == result.totals[CUDA_EP] - budget > 0
    assert f"by {overrun.overrun} bytes" in str(record[0].message)
    assert {n.name: n.ep for n in g.nodes} == eps_before  # never reassigned
    quiet = recheck_budget(g, {CUDA_EP: budget}, estimator=FusedEstimator(extra), warn=False)
    assert quiet.overruns == result.overruns


def test_report_rows_add_up_and_show_declines(static_decoder):
    g = static_decoder(layers=2).graph
    ep = OpSetProvider(CUDA_EP, ops=GPU_OPS - {"Softmax"}, estimates={"MatMul": 0}, opsets={"": 17})
    p = place(g, [ep, CPU_EP], budgets="cuda:1500KiB")
    report = PlacementReport.from_placement(p)
    cuda = next(d for d in report.devices if d.ep == CUDA_EP)
    assert cuda.total_bytes == p.consumed[CUDA_EP] and cuda.budget == 1500 * 1024
    assert sum(r.nodes for r in report.rows) == len(g.nodes)
    layer0 = {r.ep: r for r in report.rows if r.group == "layer 0"}
    assert layer0[CUDA_EP].layer == 0 and layer0[CUDA_EP].workspace_estimated > 0
    assert layer0[CUDA_EP].workspace_heuristic > 0 and "estimated+heuristic" == layer0[CUDA_EP].workspace_kind
    for r in report.rows:
        assert r.total_bytes == r.weight_bytes + r.activation_bytes + r.workspace_bytes
    groups = [r.group for r in report.rows]
    assert groups.index("embed_tokens") < groups.index("layer 0") < groups.index("layer 1") < groups.index("lm_head")
    softmax_declines = [d for d in report.declines if d.op == "Softmax"]
    assert len(softmax_declines) == 2 and all("op type 'Softmax'" in d.reason for d in softmax_declines)
    table = report.table()
    assert "layer 0" in table and "declines (" in table and "budget" in table and "Softmax" in table
    assert report.stops and report.stops[0].reason in table
    data = json.loads(report.to_json())
    assert {"rows", "devices", "declines", "budget_stops"} <= set(data)
    assert data["devices"][0]["total_bytes"] == cuda.total_bytes
    assert data["declines"][0]["reason"] and data["declines"][0]["remedy"]
    assert data["rows"][0]["workspace_kind"] in ("estimated", "heuristic", "estimated+heuristic", "-")
    assert report.rows_for("layer 1")


def test_report_dedups_weights_per_device(static_decoder):
    g = static_decoder(layers=2).graph
    p = place(g, [CPU_EP])
    report = PlacementReport.from_placement(p)
    (cpu,) = report.devices
    assert cpu.weight_bytes == sum(t.nbytes for t in g.initializers.values())


def test_declines_are_grouped_by_reason_with_a_count():
    from ort_partition import Declined, declines_by_reason

    same = [Declined(ep=CUDA_EP, node=f"n{i}", op=op, rejected="no driver", accepts="a GPU", remedy="install it")
            for i, op in enumerate(["MatMul", "Add", "MatMul", "Softmax"])]
    lone = Declined(ep=CUDA_EP, node="s", op="Softmax", rejected="dtype float64", accepts="float32")
    lines = declines_by_reason([*same, lone])
    assert lines[0] == "declines (5 nodes, 2 reasons):"
    assert len(lines) == 3 and lines[1].count("no driver") == 1
    assert lines[1].startswith("  4 nodes (Add, MatMul, Softmax; 'n0', 'n1', 'n2' and 1 more)")
    assert "remedy: install it" in lines[1] and lines[2] == f"  {lone.reason}"
