"""The real exports in ../shared/models (skipped where absent): genai builder and torch exporters."""

import collections
import warnings

import pytest

import ort_graph
from ort_partition import (
    CPU_EP,
    CUDA_EP,
    FINAL_NORM,
    PlacementReport,
    assign_layers,
    auto_fit,
    name_match_target,
    node_group,
    place,
)

EPS = [CUDA_EP, CPU_EP]
GENAI_DIMS = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0, "total_sequence_length": 8}


def _load(path, dims=None):
    model = ort_graph.load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_graph.resolve_shapes(model, dims=dims or {})
    return model


@pytest.fixture(scope="module")
def genai_fp32(shared_models):
    return _load(shared_models / "llama_l4" / "genai_fp32_cpu" / "model.onnx", GENAI_DIMS)


def test_genai_name_rules_place_layers(genai_fp32):
    g = genai_fp32.graph
    index = assign_layers(g, name_rules="cuda(layers.[0-1]/); cpu(layers.[2-3]/)", available_eps=EPS)
    p = place(g, EPS, layering=index)
    for node, ep in p.assignments.items():
        group = node_group(node)
        assert ep == (CUDA_EP if group in (0, 1) else CPU_EP), node.name
    assert len(p.nodes_on(CUDA_EP)) == 2 * 11


def test_genai_shared_initializers_counted_once(genai_fp32):
    g = genai_fp32.graph
    index = assign_layers(g, name_rules="cuda(layers.[0-3]/)", available_eps=EPS)
    p = place(g, EPS, layering=index)
    gqa = [n for n in p.order if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == 4
    cache = g.initializers["cos_cache"].nbytes + g.initializers["sin_cache"].nbytes
    assert p.costs[gqa[0]].weights == cache
    assert all(p.costs[n].weights == 0 for n in gqa[1:])
    used = {i for n in p.nodes_on(CUDA_EP) for i in n.inputs if i in g.initializers}
    report = PlacementReport.from_placement(p)
    cuda = next(d for d in report.devices if d.ep == CUDA_EP)
    assert cuda.weight_bytes == sum(g.initializers[i].nbytes for i in used)


def test_genai_final_norm_is_not_a_decoder_layer(genai_fp32):
    g = genai_fp32.graph
    final = g.node_by_name("/model/layers.4/final_norm_layernorm/SkipLayerNorm")
    assert node_group(final) == FINAL_NORM
    p = place(g, EPS, layering=assign_layers(g, name_rules="cuda(layers.[0-3]/)", available_eps=EPS))
    assert p.ep_of(final) == CPU_EP  # layers.4 is not a 5th layer: rules for 4 layers leave it alone
    report = PlacementReport.from_placement(p)
    groups = list(dict.fromkeys(r.group for r in report.rows))
    assert "layer 4" not in groups
    assert groups.index("layer 3") < groups.index(FINAL_NORM) < groups.index("lm_head")
    assert [r.nodes for r in report.rows if r.group == FINAL_NORM] == [1]


def test_genai_auto_fit_brute_force(genai_fp32):
    g = genai_fp32.graph

    def prefix_cost(k):
        if k == 0:
            return 0
        index = assign_layers(g, name_rules=f"cuda(layers.[0-{k - 1}]/)", available_eps=EPS)
        return place(g, EPS, layering=index).consumed[CUDA_EP]

    costs = [prefix_cost(k) for k in range(5)]
    for budget in [costs[1] - 1, costs[1], (costs[2] + costs[3]) // 2, costs[4]]:
        fit = auto_fit(g, EPS, {"cuda": budget})
        assert fit.layers_on_device == max(k for k in range(5) if costs[k] <= budget)
    everything = auto_fit(g, EPS, "cuda:1GiB")
    assert everything.total_layers == 4 and everything.layers_on_device == 4 and everything.tail_on_device
    tail = {n.name for n in everything.placement.nodes_on(CUDA_EP) if not isinstance(node_group(n), int)}
    assert "/model/layers.4/final_norm_layernorm/SkipLayerNorm" in tail and "/lm_head/MatMul" in tail


def _placement_signature(model, rules):
    g = model.graph
    index = assign_layers(g, name_rules=rules, available_eps=EPS)
    p = place(g, EPS, layering=index)
    sig = collections.Counter()
    for node, ep in p.assignments.items():
        if node.op_type in ("MatMul", "Softmax", "Sigmoid", "ReduceMean"):
            sig[(node_group(node), node.op_type, ep)] += 1
    return sig, p


@pytest.mark.parametrize("variant", ["static", "dynamic", "kv_dynamic"])
def test_dynamo_and_torchscript_exports_place_the_same_way(shared_models, variant):
    torch_dir = shared_models / "llama_l4" / "torch"
    dynamo = _load(torch_dir / f"dynamo_{variant}.onnx")
    script = _load(torch_dir / f"torchscript_{variant}.onnx")
    assert not any("/" in n.name for n in dynamo.graph.nodes)  # dynamo puts no path into names
    rules = "cuda(layers.[0-1]/, lm_head); cpu(layers.[2-3]/)"
    sig_d, p_d = _placement_signature(dynamo, rules)
    sig_s, p_s = _placement_signature(script, rules)
    assert sig_d == sig_s
    assert sum(v for (grp, op, ep), v in sig_d.items() if ep == CUDA_EP and op == "MatMul") == 2 * 9 + 1
    q = next(n for n in dynamo.graph.nodes
             if name_match_target(n) == "/model/layers.0/self_attn/q_proj/MatMul")
    assert p_d.ep_of(q) == CUDA_EP


def test_torch_static_exports_auto_fit_the_same_units(shared_models):
    torch_dir = shared_models / "llama_l4" / "torch"
    seen = []
    for name in ("dynamo_static", "torchscript_static"):
        g = _load(torch_dir / f"{name}.onnx").graph
        fit = auto_fit(g, EPS, "cuda:1GiB")
        assert fit.layers_on_device == fit.total_layers == 4 and fit.tail_on_device
        groups = collections.Counter(node_group(n) for n in fit.placement.nodes_on(CUDA_EP))
        seen.append({k for k in groups if k in (0, 1, 2, 3, "norm", "lm_head")})
        assert fit.placement.ep_of(next(n for n in g.nodes if name_match_target(n).startswith("/lm_head/"))) == CUDA_EP
    assert seen[0] == seen[1] == {0, 1, 2, 3, "norm", "lm_head"}
