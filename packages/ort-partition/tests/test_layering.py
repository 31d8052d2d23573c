import warnings

import pytest

from ort_partition import (
    CPU_EP,
    CUDA_EP,
    LAYER_ASSIGNMENT_KEY,
    NAME_LAYER_ASSIGNMENT_KEY,
    EpInfo,
    RuleDroppedWarning,
    RuleError,
    assign_layers,
    assign_layers_from_options,
    match_device,
)

EPS = [CUDA_EP, CPU_EP]


def _by_name(index, model):
    return {n.name: index.ep_of(n) for n in model.graph.walk()}


def test_annotation_mode_inherits_into_subgraphs(control_flow_model):
    model = control_flow_model()
    index = assign_layers(model, annotation_rules="cuda(layers.0); cpu(layers.1)", available_eps=EPS)
    got = _by_name(index, model)
    assert got["/outer_add"] == CUDA_EP
    assert got["/plain"] is None  # top level, no annotation: fallback
    assert got["/cmp"] == CPU_EP  # annotation trimmed
    assert got["/the_if"] == CPU_EP
    assert got["/t_plain"] == CPU_EP and got["/e_plain"] == CPU_EP  # inherited from the If
    assert got["/t_own"] == CUDA_EP  # its own annotation wins
    assert got["/t_if"] == CPU_EP and got["/deep_plain"] == CPU_EP  # inherited two levels down


def test_name_mode_has_no_inheritance(control_flow_model):
    model = control_flow_model()
    index = assign_layers(model, name_rules="cuda(the_if, _own)", available_eps=EPS)
    got = _by_name(index, model)
    assert got["/the_if"] == CUDA_EP and got["/t_own"] == CUDA_EP
    assert got["/t_plain"] is None and got["/deep_plain"] is None


def test_dropped_rule_leaves_its_nodes_unassigned_as_onnxruntime_does(control_flow_model):
    model = control_flow_model()
    with pytest.warns(RuleDroppedWarning, match=r"'npu'.*'layers.1'.*fallback"):
        index = assign_layers(model, annotation_rules="npu(layers.1); cuda(layers)", available_eps=EPS)
    assert [r.pattern for r in index.dropped] == ["layers.1"]
    got = _by_name(index, model)
    assert got["/outer_add"] == CUDA_EP
    assert got["/the_if"] is None and got["/t_plain"] is None  # best rule dropped: no fallback to rule 1


def test_both_options_is_an_error_naming_both_keys(control_flow_model):
    model = control_flow_model()
    with pytest.raises(RuleError) as info:
        assign_layers(model, name_rules="cuda(layers.0/)", annotation_rules="cuda(layers.0)", available_eps=EPS)
    msg = str(info.value)
    assert LAYER_ASSIGNMENT_KEY in msg and NAME_LAYER_ASSIGNMENT_KEY in msg and "mutually exclusive" in msg
    with pytest.raises(RuleError):
        assign_layers_from_options(model, {LAYER_ASSIGNMENT_KEY: "cuda(a)", NAME_LAYER_ASSIGNMENT_KEY: "cpu(b)"})


def test_neither_option_gives_no_index(control_flow_model):
    model = control_flow_model()
    assert assign_layers(model, available_eps=EPS) is None
    assert assign_layers(model, name_rules="  ", annotation_rules="", available_eps=EPS) is None
    assert assign_layers_from_options(model, {NAME_LAYER_ASSIGNMENT_KEY: ""}) is None


def test_name_mode_refuses_exact_qualifier(control_flow_model):
    with pytest.raises(RuleError, match="'='"):
        assign_layers(control_flow_model(), name_rules="cuda(=/plain)", available_eps=EPS)


@pytest.mark.parametrize(
    ("designator", "eps", "expected"),
    [
        ("cpu", EPS, CPU_EP),
        ("CPU", EPS, CPU_EP),
        ("gpu", EPS, CUDA_EP),
        ("GPU:0", EPS, CUDA_EP),
        ("gpu:1", EPS, None),
        ("gpu:1", [EpInfo(CUDA_EP, "gpu", 0), EpInfo("CUDAExecutionProvider:1", "gpu", 1), EpInfo(CPU_EP)],
         "CUDAExecutionProvider:1"),
        ("cuda", EPS, CUDA_EP),
        ("Cuda:0", EPS, CUDA_EP),
        ("gpu:nvidia", EPS, CUDA_EP),
        ("accelerator", EPS, CUDA_EP),
        ("accelerator", [CPU_EP], None),
        ("cudaexecutionprovider", EPS, CUDA_EP),
        ("CPUExecutionProvider", EPS, CPU_EP),
        ("npu", EPS, None),
        ("MyEP", [EpInfo("MyEP", "unknown"), CPU_EP], "MyEP"),
        ("accelerator", [EpInfo("MyEP", "unknown"), CPU_EP], "MyEP"),
        ("gpu", ["DmlExecutionProvider", CPU_EP], "DmlExecutionProvider"),
        ("dml", ["DmlExecutionProvider", CPU_EP], "DmlExecutionProvider"),
        ("DML:0", [CUDA_EP, "DmlExecutionProvider", CPU_EP], "DmlExecutionProvider"),
        ("dml:1", ["DmlExecutionProvider", CPU_EP], None),
        ("dml", EPS, None),
        ("fpga", [EpInfo("MyFpgaEP", "fpga"), CPU_EP], "MyFpgaEP"),
        ("fpga", ["XilinxFpgaExecutionProvider", CPU_EP], "XilinxFpgaExecutionProvider"),
        ("FPGA:1", [EpInfo("A", "fpga", 0), EpInfo("B", "fpga", 1), CPU_EP], "B"),
        ("fpga", EPS, None),
        ("accelerator", [EpInfo("MyFpgaEP", "fpga"), CPU_EP], "MyFpgaEP"),
        ("npu:1", [EpInfo("QNNExecutionProvider", "npu", 0), CPU_EP], None),
    ],
)
def test_device_designators(designator, eps, expected):
    assert match_device(designator, eps) == expected


def test_zoo_annotation_and_name_modes_agree(static_decoder):
    model = static_decoder(layers=2, layer_annotations=True)
    by_ann = assign_layers(model, annotation_rules="cuda(layers.0); cpu(layers.1)", available_eps=EPS)
    by_name = assign_layers(model, name_rules="cuda(layers.0/); cpu(layers.1/)", available_eps=EPS)
    annotated = [n for n in model.graph.nodes if n.layer_ann]
    assert annotated
    for n in annotated:
        assert by_ann.ep_of(n) == by_name.ep_of(n), n.name


def test_fused_nodes_keep_matching_by_derivative_names(static_decoder):
    model = static_decoder(layers=2)
    g = model.graph
    index = assign_layers(model, name_rules="cuda(layers.1/); cpu(layers.0/)", available_eps=EPS)
    mm = g.node_by_name("/model/layers.1/self_attn/q_proj/MatMul")
    fused = g.add_node("Identity", [mm.outputs[0]], ["fused_out"], name=mm.name + "/MatMulAddFusion")
    generic = g.add_node("Identity", ["fused_out"], ["generic_out"], name="Attention")
    index.update([fused, generic])
    assert index.ep_of(fused) == CUDA_EP
    assert index.ep_of(generic) is None  # a generic name matches nothing: fallback


def test_rule_assignment_queries(static_decoder):
    model = static_decoder(layers=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        index = assign_layers(model, name_rules="cuda(layers.[0-1]/); cpu(layers.2/)", available_eps=EPS)
    assert index.rules_for_ep(CUDA_EP) == {0, 1}
    on_cuda = index.nodes_for_ep(CUDA_EP)
    assert on_cuda and all("/layers.0/" in n.name or "/layers.1/" in n.name for n in on_cuda)
    assert set(index.assignment().values()) == {CUDA_EP, CPU_EP}
    node = on_cuda[0]
    assert index.rule_of(node).device == "cuda"
    index.make_unassigned(node)
    assert index.ep_of(node) is None


def test_a_rule_matching_no_node_warns_with_the_rule_and_the_closest_names(static_decoder):
    from ort_partition import RuleUnmatchedWarning

    model = static_decoder(layers=3)
    with pytest.warns(RuleUnmatchedWarning) as caught:
        index = assign_layers(model.graph, name_rules="cuda(layer.[0-1]); cpu(layers.[2-4])")
    messages = [str(w.message) for w in caught if w.category is RuleUnmatchedWarning]
    assert len(messages) == 2
    assert "'cuda(layer.[0-1])' matches no node name" in messages[0] and "layers.0" in messages[0]
    assert "has 2 of 3 patterns that match no node name ('layers.3', 'layers.4')" in messages[1]
    assert index.assignment()  # layers.2 still assigned


def test_rules_that_all_match_do_not_warn(static_decoder):
    model = static_decoder(layers=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assign_layers(model.graph, name_rules="cuda(layers.[0-1])")
