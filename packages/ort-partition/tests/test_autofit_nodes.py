"""Auto-fit on graphs without decoder layers: node granularity (ONNX Runtime's accountant without an exact
check, one contiguous segment of the supported nodes with one)."""

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_partition import CPU_EP, CUDA_EP, OpSetProvider, auto_fit, place


def _mlp(widths=(16, 64, 64, 64, 8), stem_repeats=0):
    """fc1..fcN (MatMul, Add, Relu); with `stem_repeats`, a weightless stem/Tile in front whose output is
    `stem_repeats` times the input (a large first activation, as a CNN's first convolutions have)."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    if stem_repeats:
        inits.append(numpy_helper.from_array(np.array([1, stem_repeats], np.int64), "stem.repeats"))
        nodes += [helper.make_node("Tile", ["x", "stem.repeats"], ["stem/tiled"], name="stem/Tile"),
                  helper.make_node("Slice", ["stem/tiled", "stem.starts", "stem.ends", "stem.axes"], ["stem/out"],
                                   name="stem/Slice")]
        inits += [numpy_helper.from_array(np.array([v], np.int64), n)
                  for n, v in (("stem.starts", 0), ("stem.ends", widths[0]), ("stem.axes", 1))]
        x = "stem/out"
    for i, (a, b) in enumerate(zip(widths, widths[1:]), start=1):
        inits += [numpy_helper.from_array(rng.standard_normal((a, b)).astype(np.float32), f"fc{i}.weight"),
                  numpy_helper.from_array(np.zeros(b, np.float32), f"fc{i}.bias")]
        nodes += [helper.make_node("MatMul", [x, f"fc{i}.weight"], [f"fc{i}/mm"], name=f"fc{i}/MatMul"),
                  helper.make_node("Add", [f"fc{i}/mm", f"fc{i}.bias"], [f"fc{i}/add"], name=f"fc{i}/Add"),
                  helper.make_node("Relu", [f"fc{i}/add"], [f"fc{i}/out"], name=f"fc{i}/Relu")]
        x = f"fc{i}/out"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, widths[0]])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, widths[-1]])], inits)
    model = ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_graph.resolve_shapes(model)
    return model.graph


def _names(placement, ep=CUDA_EP):
    return [n.name for n in placement.nodes_on(ep)]


def test_without_an_exact_check_it_is_onnxruntimes_accountant_a_prefix_growing_with_the_budget():
    g = _mlp()
    order = [n.name for n in ort_graph.topological_order(g)]
    counts = []
    for budget in (0, 300, 2_000, 10_000, 30_000, 60_000, 10**9):
        fit = auto_fit(g, [OpSetProvider(CUDA_EP), CPU_EP], {"cuda": budget})
        ort_rule = place(g, [OpSetProvider(CUDA_EP), CPU_EP], budgets={"cuda": budget})  # the accountant itself
        assert fit.granularity == "nodes" and fit.layers_on_device == 0
        assert _names(fit.placement) == _names(ort_rule) == order[:len(_names(ort_rule))]
        assert fit.cost_on_device <= budget
        counts.append(fit.nodes_on_device)
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] == len(order)


def _cost_fits(limit, calls):
    def fits(placement):  # an exact check stand-in: the device's per-node cost sum within `limit`
        calls.append(1)
        return sum(c.total for n, c in placement.costs.items() if placement.assignments.get(n) == CUDA_EP) <= limit

    return fits


@pytest.mark.parametrize("limit", [0, 1_000, 5_000, 20_000, 50_000, 10**9])
def test_the_exact_check_decides_one_contiguous_segment_in_few_checks(limit):
    g = _mlp(widths=(16,) + (32,) * 12 + (8,))
    order = ort_graph.topological_order(g)
    calls = []
    fit = auto_fit(g, [OpSetProvider(CUDA_EP), CPU_EP], {"cuda": max(limit, 1)}, fits=_cost_fits(limit, calls))
    pos = [order.index(n) for n in fit.placement.nodes_on(CUDA_EP)]
    assert pos == list(range(pos[0], pos[0] + len(pos))) if pos else True  # one run of the topological order
    assert _cost_fits(limit, [])(fit.placement)
    assert fit.granularity == "nodes" and fit.nodes_on_device == len(pos)
    assert fit.segment == ((pos[0], pos[-1]) if pos else None)
    # growing by one more node at either end would not fit: the segment is maximal
    for extra in ([pos[0] - 1] if pos and pos[0] > 0 else []) + ([pos[-1] + 1] if pos and pos[-1] + 1 < len(order) else []):
        bigger = place(g, [OpSetProvider(CUDA_EP), CPU_EP], allowed={order[i]: CUDA_EP for i in pos + [extra]})
        assert not _cost_fits(limit, [])(bigger)
    assert len(calls) <= 2 * (2 * len(order).bit_length() + 3) + 4  # galloping and bisection, not a scan


def test_declined_nodes_stay_on_the_fallback_inside_the_segment():
    g = _mlp()
    no_relu = OpSetProvider(CUDA_EP, ops={"MatMul", "Add"})
    fit = auto_fit(g, [no_relu, CPU_EP], "cuda:1GiB", fits=_cost_fits(10**9, []))
    on = _names(fit.placement)
    assert on == [n.name for n in ort_graph.topological_order(g) if n.op_type in ("MatMul", "Add")]
    assert {d.op for d in fit.placement.declines if d.ep == CUDA_EP} == {"Relu"}


def test_a_heavy_weightless_start_is_skipped_for_the_segment_with_the_weights():
    g = _mlp(widths=(16, 32, 32, 32, 8), stem_repeats=200)
    tile = g.node_by_name("stem/Tile")
    big = 4 * 16 * 200 * 4
    assert g.values[tile.outputs[0]].nbytes == big
    limit = big // 2  # the stem alone does not fit; every fc layer does
    fit = auto_fit(g, [OpSetProvider(CUDA_EP), CPU_EP], {"cuda": limit}, fits=_cost_fits(limit, []))
    on = set(_names(fit.placement))
    assert "stem/Tile" not in on  # its output alone is over the budget (the cheap Slice may join the segment)
    assert {f"fc{i}/MatMul" for i in range(1, 5)} <= on
