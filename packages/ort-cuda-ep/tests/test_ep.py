"""The EP without a GPU: declines at initialization, plans for a profile, registers through ort-abi."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto

import ort_cuda_ep
from ort_abi import (
    Declined,
    KernelRegistry,
    Supported,
    declare_workspace,
    estimate_workspace,
    workspace_input_shapes,
)
from ort_cuda_ep import (
    EP_NAME,
    CudaExecutionProvider,
    DeviceInfo,
    DeviceUnavailableError,
    attention_recipe,
    declared_slots,
    get_profile,
)
from ort_cuda_ep._ops import find_spec
from ort_graph import resolve_shapes, zoo


def _no_device(monkeypatch):
    def fail(device_id=0):
        raise DeviceUnavailableError("the CUDA driver library could not be loaded: libcuda.so.1 not found")

    monkeypatch.setattr("ort_cuda_ep._ep.discover", fail)


def _decoder():
    model = zoo.decoder(zoo.DecoderConfig(batch=1, sequence=8, past_sequence=0))
    resolve_shapes(model)
    return model


def test_without_a_device_every_node_is_declined_with_reason_and_remedy(monkeypatch):
    _no_device(monkeypatch)
    ep = CudaExecutionProvider()
    assert ep.unavailable_reason and not ep.can_run
    monkeypatch.setattr("ort_cuda_ep._ep.discover", lambda *a: pytest.fail("discovery must happen once, at init"))
    model = _decoder()
    verdicts = [ep.claim(n, model.opset("")) for n in model.graph.nodes]
    assert verdicts and all(isinstance(v, Declined) for v in verdicts)
    v = verdicts[0]
    assert v.rejected.startswith("no CUDA driver/device: the CUDA driver library could not be loaded")
    assert "profile" in v.remedy and v.ep == EP_NAME and v.node == model.graph.nodes[0].name
    assert "no CUDA driver/device" in v.message


def test_real_discovery_here_explains_itself():
    ep = CudaExecutionProvider()
    if ep.can_run:
        pytest.skip("a CUDA device is present")
    assert ep.unavailable_reason
    with pytest.raises(DeviceUnavailableError, match="no CUDA driver/device"):
        ep.runtime  # noqa: B018


def test_profile_plans_without_a_device(monkeypatch):
    _no_device(monkeypatch)
    ep = CudaExecutionProvider(profile="h100")
    assert ep.device_properties["multi_processor_count"] == 132
    model = _decoder()
    by_name = {n.name: ep.claim(n, model.opset("")) for n in model.graph.nodes}
    assert isinstance(by_name["/model/layers.0/self_attn/q_proj/MatMul"], Supported)
    assert isinstance(by_name["/model/layers.0/self_attn/Softmax"], Supported)
    assert isinstance(by_name["/model/layers.0/mlp/act_fn/Sigmoid"], Supported)
    assert isinstance(by_name["/model/layers.0/self_attn/Reshape"], Supported)  # its shape input stays on the host
    rng = by_name["/model/attn_mask/Range"]
    assert isinstance(rng, Declined) and rng.rejected.startswith("op: Range")
    assert "MatMul" in rng.accepts and "CPU" in rng.remedy
    # cost = outputs + initializers, no workspace for MatMul
    node = model.graph.node_by_name("/model/layers.0/self_attn/q_proj/MatMul")
    assert by_name[node.name].cost_bytes == model.graph.output_nbytes(node) + model.graph.initializer_nbytes(node)
    with pytest.raises(DeviceUnavailableError, match="cannot run"):
        ep.runtime  # noqa: B018


def test_attention_estimate_declaration_and_registry_agree(monkeypatch, models):
    _no_device(monkeypatch)
    ep = CudaExecutionProvider(profile="a100")  # 108 SMs
    model = models.mha(1, 1, 13824)
    node = model.graph.nodes[0]
    expected = attention_recipe(1, 1, 13824, 2, 64, 108).total_bytes
    assert ep.estimate(node) == expected
    registry = KernelRegistry()
    ep.register(registry)
    entry = registry.find("MultiHeadAttention", "com.microsoft", 1, EP_NAME)
    assert entry is not None and entry.has_estimate
    assert estimate_workspace(entry, node, ep) == expected  # the host's Level-1 path
    slots = declared_slots(find_spec("MultiHeadAttention", "com.microsoft", 1), workspace_input_shapes(node),
                           {"num_heads": 2}, ep.profile)
    assert [(s.slot_id, s.size_bytes) for s in slots] == [(0, expected)]  # Level 2


def test_estimate_takes_sm_count_from_the_ep_handle(monkeypatch, models):
    _no_device(monkeypatch)
    ep = CudaExecutionProvider(profile="h100")
    registry = KernelRegistry()
    ep.register(registry)
    entry = registry.find("MultiHeadAttention", "com.microsoft", 1, EP_NAME)
    node = models.mha(1, 1, 13825).graph.nodes[0]
    other = CudaExecutionProvider(profile="a100")
    assert estimate_workspace(entry, node, other) == attention_recipe(1, 1, 13825, 2, 64, 108).total_bytes
    assert estimate_workspace(entry, node, ep) == attention_recipe(1, 1, 13825, 2, 64, 132).total_bytes


def test_max_shapes_give_the_envelope_not_the_value_at_the_maximum(monkeypatch, models):
    _no_device(monkeypatch)
    model = models.mha(1, 1, 13825)
    node = model.graph.nodes[0]
    at_max = CudaExecutionProvider(profile="a100").estimate(node)
    env = CudaExecutionProvider(profile="a100", shapes_are_maxima=True).estimate(node)
    assert env == ort_cuda_ep.attention_workspace_envelope(1, 1, (1, 13825), 2, 64, 108)
    assert env > at_max


def test_symbolic_dims_need_ranges(monkeypatch, models):
    _no_device(monkeypatch)
    model = models.mha("batch", 1, "total")
    node = model.graph.nodes[0]
    assert CudaExecutionProvider(profile="a100").estimate(node) is None  # unavailable, never a guess
    ep = CudaExecutionProvider(profile="a100", dim_ranges={"batch": (1, 1), "total": (1, 14000)})
    assert ep.estimate(node) == ort_cuda_ep.attention_workspace_envelope(1, 1, (1, 14000), 2, 64, 108)
    assert isinstance(ep.claim(node, 1), Supported)


@pytest.mark.parametrize("make,aspect", [
    (lambda models: models.mha(1, 1, 64, extra_inputs=("mask",)), "input"),
    (lambda models: models.mha(1, 1, 64, hidden=130, heads=4), "attribute"),
    (lambda models: models.mha(1, 1, 64, dtype=TensorProto.DOUBLE), "dtype"),
    (lambda models: models.mha(1, 2, 64, unidirectional=1), "attribute"),
])
def test_attention_declines_what_it_cannot_run(monkeypatch, make, aspect, models):
    _no_device(monkeypatch)
    node = make(models).graph.nodes[0]
    v = CudaExecutionProvider(profile="h100").claim(node, 1)
    assert isinstance(v, Declined) and v.rejected.startswith(aspect + ":") and v.remedy


@pytest.mark.parametrize("m,expected", [(1, 0), (8, 0), (9, 0), (300, 0), (0, 0)])  # tiled: B dequantized per tile
def test_matmul_nbits_estimate_equals_declaration(monkeypatch, m, expected, models):
    _no_device(monkeypatch)
    ep = CudaExecutionProvider(profile="l4")
    node = models.nbits(m).graph.nodes[0]
    assert ep.estimate(node) == expected
    slots = declared_slots(find_spec("MatMulNBits", "com.microsoft", 1), workspace_input_shapes(node),
                           {"K": 128, "N": 256, "bits": 4, "block_size": 32}, ep.profile)
    assert sum(s.size_bytes for s in slots) == expected and len(slots) == (1 if expected else 0)
    cost = ep.claim(node, 1)
    assert isinstance(cost, Supported)
    assert cost.cost_bytes == node.graph.output_nbytes(node) + node.graph.initializer_nbytes(node) + expected


def test_kernel_creation_without_a_device_fails_at_initialization(monkeypatch, models):
    _no_device(monkeypatch)
    ep = CudaExecutionProvider(profile="h100")
    registry = KernelRegistry()
    ep.register(registry)
    node = models.nbits(16).graph.nodes[0]
    entry = registry.find("MatMulNBits", "com.microsoft", 1, EP_NAME)
    from ort_abi import KernelInfo

    with pytest.raises(DeviceUnavailableError, match="no CUDA driver/device.*libcuda"):
        entry.create_kernel(KernelInfo.from_node(node, ep))


def test_with_a_device_the_driver_profile_is_used(monkeypatch, models):
    fake = DeviceInfo(0, "NVIDIA H200", get_profile("h200"), 13000)
    monkeypatch.setattr("ort_cuda_ep._ep.discover", lambda device_id=0: fake)
    ep = CudaExecutionProvider()
    assert ep.can_run and ep.profile.sm_count == 132
    kernel = ep.create_kernel(models.mha(1, 1, 60000, hidden=128, heads=2).graph.nodes[0], 1)
    slots = declare_workspace(kernel, workspace_input_shapes(kernel.info.node), node=kernel.node_name)
    want = attention_recipe(1, 1, 60000, 2, 64, 132)  # the split count depends on the SM count (L4's 58: 24)
    assert want.num_splits == 59 and [(s.slot_id, s.size_bytes) for s in slots] == [(0, want.total_bytes)]


def test_registration_covers_every_op_once():
    registry = KernelRegistry()
    entries = CudaExecutionProvider(profile="h100").register(registry)
    assert len(entries) == len(ort_cuda_ep.OP_SPECS) == len(registry)
    assert {e.ep for e in entries} == {EP_NAME}
    assert all(e.has_estimate for e in entries)


def test_resolved_decoder_claims_are_stable(monkeypatch):
    _no_device(monkeypatch)
    model = zoo.decoder(zoo.DecoderConfig(batch="batch", sequence="sequence", past_sequence=0))
    resolve_shapes(model, dims={"batch": 1, "sequence": 8})
    ep = CudaExecutionProvider(profile="rtx4090")
    claimed = [n.op_type for n in model.graph.nodes if isinstance(ep.claim(n, model.opset("")), Supported)]
    assert {"MatMul", "Softmax", "Add", "Mul", "Sigmoid", "Pow", "Sqrt", "Div"} <= set(claimed)
    assert {"Transpose", "Reshape", "Concat", "Slice", "Unsqueeze"} <= set(claimed)  # float data movement
    assert "Where" in claimed and not {"Range", "Greater"} & set(claimed)  # mask select on the device, index math not
    onnx.checker.check_model(zoo.decoder_proto(zoo.DecoderConfig(batch=1, sequence=8, past_sequence=0)))


def test_real_exported_int4_model(shared_models, monkeypatch):
    """onnxruntime-genai's int4 CPU export: MatMulNBits, the norms and GroupQueryAttention are claimed."""
    from ort_graph import load

    _no_device(monkeypatch)
    model = load(shared_models / "llama_l4" / "genai_int4_cpu" / "model.onnx")
    resolve_shapes(model, dims={"batch_size": 1, "sequence_length": 16, "total_sequence_length": 16,
                                "past_sequence_length": 0})
    ep = CudaExecutionProvider(profile="l4")
    verdicts = {n.name: (n, ep.claim(n, model.opset(n.domain) or 1)) for n in model.graph.nodes}
    kinds = {}
    for node, v in verdicts.values():
        kinds.setdefault(node.op_type, set()).add(type(v).__name__)
    assert kinds["MatMulNBits"] == {"Supported"} and kinds["SkipSimplifiedLayerNormalization"] == {"Supported"}
    assert kinds["GroupQueryAttention"] == {"Supported"}
    qkv = next(n for n, _ in verdicts.values() if n.op_type == "MatMulNBits")
    k, n = qkv.attr("K"), qkv.attr("N")
    assert k and n and ep.estimate(qkv, 1) == 0  # 16 tokens: the tiled path dequantizes B per tile, no workspace


@pytest.mark.parametrize("export", ["genai_fp16_cuda", "genai_bf16_cuda"])
def test_real_exported_half_cuda_model(shared_models, monkeypatch, export):
    """onnxruntime-genai's fp16 and bf16 CUDA exports: the half-precision MatMuls, norms, activations and GQA are claimed."""
    from ort_graph import load

    _no_device(monkeypatch)
    model = load(shared_models / "llama_l4" / export / "model.onnx")
    resolve_shapes(model, dims={"batch_size": 1, "sequence_length": 4, "total_sequence_length": 4,
                                "past_sequence_length": 0})
    ep = CudaExecutionProvider(profile="h100")
    kinds: dict[str, set[str]] = {}
    for n in model.graph.nodes:
        kinds.setdefault(n.op_type, set()).add(type(ep.claim(n, model.opset(n.domain) or 1)).__name__)
    assert kinds["MatMul"] == {"Supported"} and kinds["SkipSimplifiedLayerNormalization"] == {"Supported"}
    assert kinds["Sigmoid"] == {"Supported"} and kinds["GroupQueryAttention"] == {"Supported"}
