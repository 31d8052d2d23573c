"""Budget-only placement on graphs without decoder-layer names (an MLP, a small CNN, an encoder named
otherwise): as much as fits goes on the simulated GPU, node segments verified by the exact plan check."""

import warnings

import numpy as np
import pytest

from ort_session import CpuExecutionProvider, InferenceSession

SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
GPU = "SimulatedGPUExecutionProvider"
MODELS = ["mlp", "cnn", "encoder"]


def _session(proto, dims, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(proto, {"free_dimension_overrides": dims, **options}, providers=SIM)


def _on_device(sess):
    return [n for n in sess.model.graph.nodes if n.ep == GPU and not n.op_type.startswith("Memcpy")]


@pytest.fixture(scope="module", params=MODELS)
def case(request, layerless):
    name = request.param
    proto, dims, feeds = layerless.build[name](), layerless.dims[name], layerless.inputs(name)
    reference = _session(proto, dims, budgets=None)
    assert [p.name for p in reference.providers] == SIM
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu_only = InferenceSession(proto, {"free_dimension_overrides": dims}).run(None, feeds)
    everything = _session(proto, dims, budgets="gpu:1GiB")
    full = everything.plan.to_dict()["devices"]["simgpu"]["total"]
    return name, proto, dims, feeds, cpu_only, full


@pytest.mark.parametrize("fraction", [0.0005, 0.03, 0.15, 0.4, 0.7, 1.0])
def test_budget_places_node_segments_within_the_budget_with_cpu_equal_outputs(case, fraction):
    name, proto, dims, feeds, cpu_only, full = case
    budget = max(1, int(full * fraction))
    sess = _session(proto, dims, budgets=f"gpu:{budget}")
    d = sess.plan.to_dict()
    assert d["placement_mode"] == "auto-fit" and d["granularity"] == "nodes"
    assert sess.placement.granularity == "nodes" and "node granularity" in sess.plan.to_table()
    outs = sess.run(None, feeds)
    for a, b in zip(outs, cpu_only):
        # float rounding only (measured: 2e-7 absolute after the encoder's layers): the CPU's C kernels (MatMul,
        # Softmax) and the simulated GPU's numpy kernels round differently, as a real GPU never matches the CPU bit
        # for bit either; wrong wiring is far off this
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    peak = sess.device_memory().get("simgpu", {}).get("peak", 0)
    assert peak <= budget, (name, budget, peak)
    if fraction == 1.0:
        assert len(_on_device(sess)) == len([n for n in sess.model.graph.nodes if not n.op_type.startswith("Memcpy")])
    if fraction >= 0.15:
        assert _on_device(sess), (name, budget)


def test_something_is_placed_once_the_budget_holds_the_smallest_node(case):
    name, proto, dims, feeds, cpu_only, _ = case
    singles = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = InferenceSession(proto, {"free_dimension_overrides": dims})
    # the nodes placement sees: after the L1 fusions, before the providers' own passes (a rule naming a node an
    # EP pass made matches nothing at placement; the nodes it replaced are placed node by node, less those an earlier
    # pass made: RepeatKVFusion may replace MatMulTransposeFusion's FusedMatMul, ConvActivationFusion ConvAddFusion's Conv)
    pass_names = {p.name for p in CpuExecutionProvider.graph_passes(object.__new__(CpuExecutionProvider))}
    ep_passes = [f for f in cpu.fusions if f.fusion in pass_names]
    made = {c for f in ep_passes for c in f.created}
    names = [n.name for n in cpu.model.graph.nodes if n.name not in made] + [
        r for f in ep_passes for r in f.replaced if r not in made]
    for node_name in names:  # brute force (after the L1 fusions): each node alone on the device
        sess = _session(proto, dims, **{"session.name_based_layer_assignment": f"gpu({node_name})"})
        assert [n.name for n in _on_device(sess)] == [node_name]
        singles[node_name] = sess.plan.to_dict()["devices"]["simgpu"]["total"]
    smallest = min(singles.values())
    below = _session(proto, dims, budgets=f"gpu:{smallest - 1}")
    assert not _on_device(below)
    at = _session(proto, dims, budgets=f"gpu:{smallest}")
    assert _on_device(at), (name, smallest, singles)
    at.run(None, feeds)
    assert at.device_memory()["simgpu"]["peak"] <= smallest


def test_a_graph_with_layers_keeps_layer_granularity():
    from ort_graph import zoo

    sess = _session(zoo.decoder(zoo.DecoderConfig(layers=2, hidden=64, vocab=256)),
                    {"batch": 1, "sequence": 8, "past_sequence": 0}, budgets="gpu:1GiB")
    assert sess.placement.granularity == "layers" and sess.placement.layers_on_device == 2
    assert sess.plan.to_dict()["granularity"] == "layers"


@pytest.fixture(scope="module")
def squeezenet():
    import os

    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
    if not os.path.exists(path):
        pytest.skip(f"the onnx package has no light model at {path}")
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = InferenceSession(path)
        name = cpu.input_names[0]
        full = _session(path, {}, budgets="gpu:100GiB").plan.to_dict()["devices"]["simgpu"]["total"]
        return path, {name: x}, cpu.run(None, {name: x}), full


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.7])
def test_a_real_cnn_without_layer_names_fits_its_budget(squeezenet, fraction):
    path, feeds, cpu_only, full = squeezenet
    budget = int(full * fraction)
    sess = _session(path, {}, budgets=f"gpu:{budget}")
    assert sess.placement.granularity == "nodes" and _on_device(sess)
    for a, b in zip(sess.run(None, feeds), cpu_only):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert sess.device_memory()["simgpu"]["peak"] <= budget
