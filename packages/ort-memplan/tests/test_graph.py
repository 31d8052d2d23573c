"""The graph adapter: lifetimes, devices, unknown sizes, in-place reuse and workspace packing."""

from __future__ import annotations

import pytest
from onnx import TensorProto

import ort_memplan as mp
from ort_graph import topological_order


def cpu(_node) -> str:
    return "cpu"


def lifetimes(acts: mp.Activations) -> dict[str, tuple[int, int, str]]:
    by_id = {r.id: r for r in acts.requests}
    return {name: (by_id[i].first, by_id[i].last, by_id[i].device) for name, i in acts.value_ids.items()}


def test_lifetimes_without_inplace(chain_graph) -> None:
    g = chain_graph
    acts = mp.activation_lifetimes(g, g.nodes, cpu, inplace=False)
    life = lifetimes(acts)
    assert life["x"] == (0, 4, "cpu")          # graph input: from step 0 to its last reader (add4)
    assert life["a"] == (1, 2, "cpu")
    assert life["d"] == (4, 5, "cpu")
    assert life["y"] == (5, 6, "cpu")          # graph outputs live to the last step
    assert life["z"] == (6, 6, "cpu")
    assert "w" not in acts.value_ids            # initializers are weights, not activations
    assert acts.unknown_sizes == ("u",)
    assert acts.inplace == {}
    assert acts.steps == 7 and acts.node_names[2] == "relu2"
    assert acts.lower_bound == acts.lower_bound_without_inplace == {"cpu": 5 * 1024}   # x, a, b at step 2


def test_inplace_reuse_and_its_limits(chain_graph) -> None:
    g = chain_graph
    acts = mp.activation_lifetimes(g, g.nodes, cpu)
    # relu2 overwrites a (dies at step 2); add4 overwrites c, never the graph input x; relu6 must not
    # overwrite y, a graph output
    assert acts.inplace == {"b": "a", "d": "c"}
    assert acts.value_ids["b"] == acts.value_ids["a"]
    assert acts.value_ids["y"] != acts.value_ids["z"]
    assert len(acts.requests) == len(acts.plain_requests) - 2
    assert acts.lower_bound == {"cpu": 4 * 1024}                            # x, a/b, c at step 3
    assert acts.lower_bound_without_inplace == {"cpu": 5 * 1024}
    gp = mp.plan_graph(g, g.nodes, cpu)
    mp.validate(gp.plan, gp.requests)
    assert gp.value_block("b") == gp.value_block("a")
    assert gp.plan.peak == {"cpu": 4 * 1024}
    assert gp.lower_bound_without_inplace == acts.lower_bound_without_inplace


def test_inplace_needs_same_device_and_enough_bytes(graph_builder) -> None:
    g = graph_builder([("mm0", "MatMul", ["x", "w"], ["a"]), ("add1", "Add", ["a", "a"], ["b"]),
               ("mm2", "MatMul", ["b", "w"], ["c"]), ("cast3", "Cast", ["c"], ["d"]),
               ("mm4", "MatMul", ["d", "w"], ["y"])],
              {"x": (1, 256), "a": (1, 256), "b": (1, 256), "c": (1, 256), "d": (2, 256), "y": (1, 256)},
              ["x"], ["y"])
    order = topological_order(g)
    acts = mp.activation_lifetimes(g, order, lambda n: "cuda" if n.name == "add1" else "cpu")
    assert acts.inplace == {}       # add1 runs on another device than a's producer; d outgrows c
    assert lifetimes(acts)["b"][2] == "cuda"
    same = mp.activation_lifetimes(g, order, cpu)
    assert same.inplace == {"b": "a"}


def test_devices_split_the_requests(chain_graph) -> None:
    g = chain_graph
    order = topological_order(g)
    acts = mp.activation_lifetimes(g, order, lambda n: "cuda:0" if n.name in ("mm3", "add4") else "cpu")
    life = lifetimes(acts)
    assert life["c"][2] == "cuda:0" and life["x"][2] == "cpu" and life["y"][2] == "cpu"
    gp = mp.plan_graph(g, order, lambda n: "cuda:0" if n.name in ("mm3", "add4") else "cpu")
    assert set(gp.plan.peak) == {"cpu", "cuda:0"}
    mp.validate(gp.plan, gp.requests)


def test_unknown_values_are_reported_not_dropped_silently(chain_graph) -> None:
    g = chain_graph
    gp = mp.plan_graph(g, topological_order(g), cpu)
    assert gp.activations.unknown_sizes == ("u",)
    with pytest.raises(mp.LookupMissError, match="'u' has no planned block: its size is unknown"):
        gp.value_block("u")
    with pytest.raises(mp.LookupMissError, match="'w' has no planned block"):
        gp.offset_of("w")


BIG = (1 << 31) - 1


@pytest.mark.parametrize("shape, named", [
    ((BIG, BIG, BIG, 32), "y"),      # one value past int64 bytes: 2**95 and more
    ((1 << 61,), "y"),               # 2**63 bytes: one past int64
])
def test_values_beyond_int64_bytes_are_invalid_requests_naming_the_value(graph_builder, shape, named) -> None:
    g = graph_builder([("relu0", "Relu", ["x"], ["y"])], {"x": (1, 8), "y": shape}, ["x"], ["y"])
    with pytest.raises(mp.SizeOverflowError, match=rf"value '{named}' \(shape .*needs \d+ bytes.*fix the model's shape"):
        mp.plan_graph(g, g.nodes, lambda n: "gpu")
    with pytest.raises(mp.InvalidRequestError):   # a SizeOverflowError is an invalid request, a MemPlanError
        mp.activation_lifetimes(g, g.nodes, cpu)


def test_values_that_fit_one_by_one_but_not_together_are_refused_not_wrapped(graph_builder) -> None:
    half = (1 << 60,)  # 4 bytes each: 2**62 bytes, two of them live together reach 2**63
    g = graph_builder([("relu0", "Relu", ["x"], ["a"]), ("add1", "Add", ["x", "a"], ["y"])],
                      {"x": half, "a": half, "y": (1,)}, ["x"], ["y"])
    with pytest.raises(mp.SizeOverflowError, match=r"device 'cpu'.*int64"):
        mp.plan_graph(g, g.nodes, cpu, inplace=False)


def test_requests_beyond_int64_are_refused_by_every_entry_point() -> None:
    with pytest.raises(mp.SizeOverflowError, match=r"request 3: nbytes=9223372036854775808 exceeds"):
        mp.AllocationRequest(3, 1 << 63, 0, 0)
    top = mp.AllocationRequest(0, mp.MAX_BYTES, 0, 0, "gpu", 1)
    with pytest.raises(mp.SizeOverflowError, match=r"request 0 .*device 'gpu'"):
        mp.lower_bound([top])           # fits alone, but not with its alignment padding
    with pytest.raises(mp.SizeOverflowError):
        mp.plan([mp.AllocationRequest(0, 1 << 62, 0, 1), mp.AllocationRequest(1, 1 << 62, 0, 1)])
    ok = mp.plan([mp.AllocationRequest(0, 1 << 61, 0, 1), mp.AllocationRequest(1, 1 << 61, 0, 1)])
    assert ok.peak == {"cpu": 1 << 62}


def test_order_must_be_topological_and_unique(chain_graph) -> None:
    g = chain_graph
    order = topological_order(g)
    with pytest.raises(mp.InvalidRequestError, match="reads 'a' before its producer 'mm1'"):
        mp.activation_lifetimes(g, [order[0], order[2], order[1], *order[3:]], cpu)
    with pytest.raises(mp.InvalidRequestError, match="appears twice"):
        mp.activation_lifetimes(g, [*order, order[0]], cpu)


@pytest.fixture
def workspace_graph(graph_builder):
    big, small = (4, 256), (1, 64)      # 4 KiB and 256 B
    return graph_builder([("sm0", "Softmax", ["x"], ["a"]), ("sm1", "Softmax", ["a"], ["b"]),
                  ("rm2", "ReduceMax", ["b"], ["c"]), ("mm3", "MatMul", ["c", "w"], ["y"])],
                 {"x": small, "a": big, "b": big, "c": small, "y": small}, ["x"], ["y"])


def test_workspace_reuses_dead_activation_memory(workspace_graph) -> None:
    g = workspace_graph
    order = topological_order(g)
    mm3 = next(n for n in order if n.name == "mm3")
    plain = mp.plan_graph(g, order, cpu)
    gp = mp.plan_graph(g, order, cpu, workspace={(mm3.index, 0): 4096, (mm3.index, 1): 1000})
    mp.validate(gp.plan, gp.requests)
    # a and b (4 KiB each) are dead at mm3's step: the slots go into their bytes, the peak stays put
    assert gp.plan.peak == plain.plan.peak == {"cpu": 8192}
    assert gp.workspace_layout == {"cpu": "packed"}  # packed: no separate arena can be smaller
    off0, nb0 = gp.workspace(mm3.index, 0)
    off1, nb1 = gp.workspace(mm3.index, 1)
    assert (nb0, nb1) == (4096, 1000)
    dead = [gp.value_block(v) for v in ("a", "b")]
    for off, nb in ((off0, nb0), (off1, nb1)):
        assert any(o < off + nb and off < o + n for _, o, n in dead)
    ids = [r.id for r in gp.slot_requests.values()]
    assert sorted(ids) == [-2, -1]
    assert all(r.first == r.last == gp.activations.node_steps[mm3.index] for r in gp.slot_requests.values())
    assert not set(ids) & set(gp.activations.value_ids.values())
    assert gp.names[-1] == "workspace of 'mm3' slot 0"


def test_run_long_blocks_live_for_the_whole_run(workspace_graph) -> None:
    g = workspace_graph
    order = topological_order(g)
    mm3 = next(n for n in order if n.name == "mm3")
    plain = mp.plan_graph(g, order, cpu, workspace={(mm3.index, 0): 4096})
    gp = mp.plan_graph(g, order, cpu, workspace={(mm3.index, 0): 4096},
                       run_long={"slot 0": ("cpu", 1000), "slot 1": ("cpu", 1000)})
    mp.validate(gp.plan, gp.requests)
    reqs = list(gp.run_requests.values())
    # ids after the workspace slot's, live from the first step to the last
    assert [r.id for r in reqs] == [-2, -3] and [gp.names[r.id] for r in reqs] == ["slot 0", "slot 1"]
    assert all((r.first, r.last, r.nbytes) == (0, len(order) - 1, 1000) for r in reqs)
    # no dead memory to share at any step: the peak grows by both (aligned) blocks
    assert gp.plan.peak["cpu"] == plain.plan.peak["cpu"] + 2 * 1024
    blocks = [gp.run_block(k) for k in ("slot 0", "slot 1")]
    (_, o0, n0), (_, o1, n1) = blocks
    assert n0 == n1 == 1000 and (o0 + 1024 <= o1 or o1 + 1024 <= o0)
    assert gp.lower_bound_without_inplace["cpu"] >= plain.lower_bound_without_inplace["cpu"] + 2 * 1024
    with pytest.raises(mp.LookupMissError, match="no run-long block 'slot 2'"):
        gp.run_block("slot 2")
    with pytest.raises(mp.InvalidRequestError, match="asks for -1 bytes"):
        mp.plan_graph(g, order, cpu, run_long={"bad": ("cpu", -1)})


def test_workspace_lookup_errors(workspace_graph) -> None:
    g = workspace_graph
    order = topological_order(g)
    gp = mp.plan_graph(g, order, cpu, workspace={(order[0].index, 3): 512})
    with pytest.raises(mp.LookupMissError, match=r"no workspace slot \(0, 4\)"):
        gp.workspace(order[0].index, 4)
    with pytest.raises(mp.InvalidRequestError, match="node index 99"):
        mp.plan_graph(g, order, cpu, workspace={(99, 0): 16})
    with pytest.raises(mp.InvalidRequestError, match="asks for -5 bytes"):
        mp.plan_graph(g, order, cpu, workspace={(order[0].index, 0): -5})


def test_workspace_requests_graph_free() -> None:
    reqs = mp.workspace_requests({(7, 0): 100, (3, 1): 50}, {3: 0, 7: 4}, ["cpu"] * 5, alignment=64)
    assert reqs[(3, 1)] == mp.AllocationRequest(-1, 50, 0, 0, "cpu", 64)
    assert reqs[(7, 0)] == mp.AllocationRequest(-2, 100, 4, 4, "cpu", 64)


def test_zoo_decoder_plans_at_the_lower_bound() -> None:
    import ort_graph
    from ort_graph import zoo

    m = zoo.decoder(zoo.DecoderConfig(batch=1, sequence=64, past_sequence=0))
    ort_graph.resolve_shapes(m)
    g = m.graph
    gp = mp.plan_graph(g, topological_order(g), cpu)
    mp.validate(gp.plan, gp.requests)
    assert gp.activations.unknown_sizes == ()
    assert gp.plan.peak["cpu"] >= gp.plan.lower_bound["cpu"]
    assert gp.plan.lower_bound["cpu"] < gp.lower_bound_without_inplace["cpu"]
    for base in ("online", "greedy_by_size"):
        assert gp.plan.peak["cpu"] <= gp.plan.candidates[base]


@pytest.mark.parametrize("op, domain, n_inputs, expected", [
    ("Relu", "", 1, (0,)), ("Reshape", "", 2, (0,)), ("Add", "", 2, (0, 1)), ("Sum", "", 3, (0, 1, 2)),
    ("MatMul", "", 2, ()), ("Transpose", "", 1, ()), ("Relu", "custom.domain", 1, ()),
    ("FastGelu", "com.microsoft", 1, (0,)),
])
def test_may_inplace(graph_builder, op: str, domain: str, n_inputs: int, expected: tuple) -> None:
    g = graph_builder([], {}, [], [])
    node = g.add_node(op, [f"i{k}" for k in range(n_inputs)], ["o"], domain=domain)
    assert mp.may_inplace(node) == expected


def test_graph_inputs_can_live_where_feeds_arrive(chain_graph) -> None:
    g = chain_graph
    order = topological_order(g)
    on_device = mp.activation_lifetimes(g, order, lambda n: "cuda:0")
    assert lifetimes(on_device)["x"][2] == "cuda:0"  # default: the first reader's device
    on_host = mp.plan_graph(g, order, lambda n: "cuda:0", input_device="cpu")
    assert lifetimes(on_host.activations)["x"][2] == "cpu" and lifetimes(on_host.activations)["c"][2] == "cuda:0"
    mp.validate(on_host.plan, on_host.requests)


@pytest.mark.parametrize("to, expected", [(TensorProto.INT32, (0,)), (TensorProto.FLOAT16, ()), (TensorProto.INT64, ())])
def test_a_cast_is_written_in_place_only_between_types_of_one_size(graph_builder, to, expected) -> None:
    """Narrowing in place races on a GPU (output element i lands on input element i/2), widening cannot fit."""
    g = graph_builder([("c", "Cast", ["x"], ["y"])], {"x": (4, 8), "y": (4, 8)}, ["x"], ["y"])
    g.values["y"].dtype = to
    assert mp.may_inplace(g.node_by_name("c")) == expected
