import pytest

from ort_partition import CPU_EP, CUDA_EP, OpSetProvider, PlacementError, assign_layers, auto_fit, place

GPU_OPS = {"MatMul", "Add", "Mul", "Softmax", "Transpose", "Reshape", "Pow", "ReduceMean", "Sqrt", "Div", "Sigmoid",
           "Concat", "Slice", "Neg", "Identity", "Expand", "Unsqueeze", "Sub"}


def cuda_ep():
    # some ops carry a Level-1 estimate, the rest fall back to the 1.5x heuristic
    return OpSetProvider(CUDA_EP, ops=GPU_OPS, estimates={"Softmax": 2048, "MatMul": 0, "Concat": 64})


def prefix_cost(graph, k):
    """Bytes on CUDA when layers 0..k-1 are pinned there by a name rule (no budget): the brute force."""
    if k == 0:
        return 0
    index = assign_layers(graph, name_rules=f"cuda(layers.[0-{k - 1}]/)", available_eps=[CUDA_EP, CPU_EP])
    return place(graph, [cuda_ep(), CPU_EP], layering=index).consumed[CUDA_EP]


CONFIGS = [
    dict(layers=2),
    dict(layers=3, norm="layernorm"),
    dict(layers=4, bias=True),
    dict(layers=5, kv_cache=False, hidden=32, heads=2, kv_heads=1),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_auto_fit_picks_the_largest_layer_count_that_fits(static_decoder, cfg):
    graph = static_decoder(**cfg).graph
    n = cfg["layers"]
    costs = [prefix_cost(graph, k) for k in range(n + 1)]
    assert costs == sorted(costs) and len(set(costs)) == len(costs)  # each layer costs something
    budgets = {0, costs[-1] + 10**9}
    for k in range(1, n + 1):
        budgets |= {costs[k], costs[k] - 1, (costs[k - 1] + costs[k]) // 2}
    for budget in sorted(budgets):
        result = auto_fit(graph, [cuda_ep(), CPU_EP], {"cuda": budget}, include_tail=False)
        best = max(k for k in range(n + 1) if costs[k] <= budget)  # brute force over layer counts
        assert result.layers_on_device == best, (budget, costs)
        assert result.layer_ids == tuple(range(best))
        assert result.total_layers == n
        if best == 0:  # not even one layer: node granularity places what the accountant allows instead
            assert result.cost_on_device <= budget
            assert result.granularity == ("nodes" if result.nodes_on_device else "layers")
            continue
        assert result.granularity == "layers"
        assert result.cost_on_device == costs[best] <= budget
        placed = {node.name for node in result.placement.nodes_on(CUDA_EP)}
        wanted = {node.name for node in graph.nodes if node.op_type in GPU_OPS and "/layers." in node.name
                  and int(node.name.split("/layers.")[1].split("/")[0]) < best}
        assert placed == wanted


def test_auto_fit_places_the_tail_when_all_layers_fit(static_decoder):
    graph = static_decoder(layers=2).graph
    result = auto_fit(graph, [cuda_ep(), CPU_EP], "cuda:1TiB")
    assert result.layers_on_device == 2 and result.tail_on_device
    assert result.placement.ep_of(graph.node_by_name("/lm_head/MatMul")) == CUDA_EP
    assert result.placement.ep_of(graph.node_by_name("/model/embed_tokens/Gather")) == CPU_EP  # not a layer
    tight = auto_fit(graph, [cuda_ep(), CPU_EP], {"cuda": prefix_cost(graph, 2)})
    assert tight.layers_on_device == 2 and not tight.tail_on_device
    assert "2/2 decoder layers" in tight.summary()


def test_node_level_cut_off_continues_into_the_next_layer(static_decoder):
    graph = static_decoder(layers=3).graph
    c1, c2 = prefix_cost(graph, 1), prefix_cost(graph, 2)
    budget = (c1 + c2) // 2
    whole = auto_fit(graph, [cuda_ep(), CPU_EP], {"cuda": budget})
    cut = auto_fit(graph, [cuda_ep(), CPU_EP], {"cuda": budget}, node_level=True)
    assert whole.layers_on_device == cut.layers_on_device == 1
    assert whole.partial_nodes == 0 and cut.partial_nodes > 0
    assert whole.cost_on_device == c1 < cut.cost_on_device <= budget
    stop = cut.placement.stops[CUDA_EP]
    assert "/layers.1/" in stop.node and cut.cost_on_device + stop.cost > budget
    assert "plus" in cut.summary()


def test_declined_nodes_cost_nothing_on_the_device(static_decoder):
    graph = static_decoder(layers=2).graph
    only_matmul = OpSetProvider(CUDA_EP, ops={"MatMul"}, estimates={"MatMul": 0})
    result = auto_fit(graph, [only_matmul, CPU_EP], "cuda:1TiB", include_tail=False)
    assert result.layers_on_device == 2
    assert {n.op_type for n in result.placement.nodes_on(CUDA_EP)} == {"MatMul"}


def test_auto_fit_needs_a_budget_for_an_accelerator(static_decoder):
    graph = static_decoder(layers=1).graph
    with pytest.raises(PlacementError, match="needs a budget"):
        auto_fit(graph, [cuda_ep(), CPU_EP], "cpu:1GiB")


def test_auto_fit_keeps_other_budgets(static_decoder):
    graph = static_decoder(layers=2).graph
    tight = auto_fit(graph, [cuda_ep(), CPU_EP], "cuda:1MiB, cpu:1KiB")
    # the fallback's budget is no cut-off (its nodes have nowhere else to go): it is kept for the exact plan
    # check, and what the fallback took is counted
    assert tight.placement.budgets[CPU_EP] == 1024 and CPU_EP not in tight.placement.stops
    assert tight.placement.consumed[CPU_EP] > 1024
    fit = auto_fit(graph, [cuda_ep(), CPU_EP], "cuda:1MiB, cpu:1GiB")
    assert fit.placement.budgets == {CUDA_EP: 2**20, CPU_EP: 2**30}
