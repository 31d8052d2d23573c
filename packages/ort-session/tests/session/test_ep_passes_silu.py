"""The CPU provider's SiLUFusion pass on a zoo decoder (its MLP activation is Mul(gate, Sigmoid(gate))): fused
into QuickGelu on the nodes the CPU provider claimed, with its one-chunk workspace planned; outputs equal the
unfused run and onnxruntime's; pairs another provider runs are left alone; the simulated GPU runs both its
passes."""

import numpy as np
import pytest

import ort_cpu_ep
from ort_cpu_ep.ops._registry import workspace_nbytes
from ort_graph import zoo
from ort_session import CpuExecutionProvider, InferenceSession, SimulatedGpuExecutionProvider

CFG = zoo.DecoderConfig(batch=1, sequence=8, past_sequence=4)
FEEDS = zoo.decoder_inputs(CFG, sequence=8, past=4)
ACT = "/model/layers.{}/mlp/act_fn/{}"
PRE = {"session.pre_allocate_execution_buffers": "1"}


def silu_fusions(sess):
    return [f for f in sess.fusions if f.fusion == "SiLUFusion"]


def test_the_cpu_provider_fuses_the_decoders_silu_and_plans_its_workspace(matches_onnxruntime):
    sess = InferenceSession(zoo.decoder_proto(CFG), PRE, providers=["CPUExecutionProvider"])
    assert [(f.replaced, f.created) for f in silu_fusions(sess)] == [
        ((ACT.format(i, "Sigmoid"), ACT.format(i, "Mul")), (ACT.format(i, "Mul") + "/SiLUFusion",)) for i in range(2)]
    assert not any(n.op_type == "Sigmoid" for n in sess.model.graph.nodes)
    for i in range(2):
        node = sess.model.graph.node_by_name(ACT.format(i, "Mul") + "/SiLUFusion")
        assert (node.op_type, node.ep) == ("QuickGelu", "CPUExecutionProvider")
        # the numpy QuickGelu declares one chunk; ort-cpu-ep's C QuickGelu (where built) needs none
        from ort_cpu_ep import c_kernels

        want_slots = {} if c_kernels.c_registry() is not None else {(node.index, 0): workspace_nbytes((8 * CFG.ffn,), np.float32)}
        assert {k: v for k, v in sess.memory.slots.items() if k[0] == node.index} == want_slots
    got = sess.run(None, FEEDS)
    assert sess.last_run_stats.scratch_fallbacks == 0
    matches_onnxruntime(zoo.decoder_proto(CFG), FEEDS, got)


def test_outputs_equal_the_unfused_run(monkeypatch):
    fused = InferenceSession(zoo.decoder_proto(CFG), providers=["CPUExecutionProvider"])
    assert silu_fusions(fused)
    monkeypatch.setattr(CpuExecutionProvider, "graph_passes", lambda self: [])
    plain = InferenceSession(zoo.decoder_proto(CFG), providers=["CPUExecutionProvider"])
    assert not silu_fusions(plain) and sum(n.op_type == "Sigmoid" for n in plain.model.graph.nodes) == 2
    for g, w in zip(fused.run(None, FEEDS), plain.run(None, FEEDS), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_pair_another_provider_runs_is_left_alone():
    rule = f"gpu({ACT.format(0, 'Sigmoid')})"
    sess = InferenceSession(zoo.decoder_proto(CFG), {"budgets": "simgpu:64MiB", "session.name_based_layer_assignment": rule},
                            providers=["SimulatedGPUExecutionProvider", "CPUExecutionProvider"])
    assert [f.replaced for f in silu_fusions(sess)] == [(ACT.format(1, "Sigmoid"), ACT.format(1, "Mul"))]
    assert sess.model.graph.node_by_name(ACT.format(0, "Sigmoid")).ep == "SimulatedGPUExecutionProvider"
    assert sess.model.graph.node_by_name(ACT.format(0, "Mul")).ep == "CPUExecutionProvider"


def test_a_pair_the_simulated_gpu_claimed_is_fused_there_and_all_its_passes_run():
    assert [p.name for p in SimulatedGpuExecutionProvider.graph_passes(object.__new__(SimulatedGpuExecutionProvider))] == [
        "ConvTransposeAddFusion", "ConvBNFusion", "Conv1dAs2d", "RecurrentDefaultActivations", "InferenceDropoutAsIdentity",
        "ConvMulFusion",
        "ConvAddFusion", "ConvAddActivationFusion", "ConvActivationFusion", "SiLUFusion", "MatMulTransposeFusion", "RepeatKVFusion"]
    rule = "gpu(/model/layers.0/mlp/)"
    sess = InferenceSession(zoo.decoder_proto(CFG), {"budgets": "simgpu:64MiB", "session.name_based_layer_assignment": rule},
                            providers=["SimulatedGPUExecutionProvider", "CPUExecutionProvider"])
    eps = {f.created[0]: sess.model.graph.node_by_name(f.created[0]).ep for f in silu_fusions(sess)}
    assert eps == {ACT.format(0, "Mul") + "/SiLUFusion": "SimulatedGPUExecutionProvider",
                   ACT.format(1, "Mul") + "/SiLUFusion": "CPUExecutionProvider"}
    plain = InferenceSession(zoo.decoder_proto(CFG), providers=["CPUExecutionProvider"])
    for g, w in zip(sess.run(None, FEEDS), plain.run(None, FEEDS), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["CpuExecutionProvider", "SimulatedGpuExecutionProvider"])
def test_both_cpu_providers_offer_the_pass(name):
    provider = getattr(ort_cpu_ep, name)
    assert "SiLUFusion" in [p.name for p in provider.graph_passes(object.__new__(provider))]


@pytest.mark.parametrize("options", [{"enable_fusions": False}, {"graph_optimization_level": "ORT_DISABLE_ALL"}])
def test_fusions_off_turns_the_providers_passes_off(options):
    sess = InferenceSession(zoo.decoder_proto(CFG), options, providers=["CPUExecutionProvider"])
    assert sess.fusions == [] and sum(n.op_type == "Sigmoid" for n in sess.model.graph.nodes) == CFG.layers
