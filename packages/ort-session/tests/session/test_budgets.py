import warnings

import numpy as np
import onnxruntime as ort
import pytest

from ort_graph import zoo
from ort_session import InferenceSession

CFG = zoo.DecoderConfig(layers=4, hidden=64, vocab=256)
DIMS = {"batch": 1, "sequence": 16, "past_sequence": 0}
SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]


def _device_total(sess, device="simgpu"):
    return sess.plan.to_dict()["devices"].get(device, {}).get("total", 0)


def _rules_total(k):
    rules = f"gpu(layers.[0-{k - 1}]/)" if k else "cpu(layers.0/)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS,
                                                   "session.name_based_layer_assignment": rules}, providers=SIM)
    return _device_total(sess)


@pytest.fixture(scope="module")
def totals_by_layers():
    return [_rules_total(k) for k in range(CFG.layers + 1)]


@pytest.mark.parametrize("fraction", [0.3, 0.45, 0.6, 0.8])
def test_auto_fit_places_the_most_layers_whose_real_plan_fits(totals_by_layers, fraction):
    budget = int(totals_by_layers[-1] * fraction)
    best = max(k for k, total in enumerate(totals_by_layers) if total <= budget)  # brute force over counts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": f"gpu:{budget}",
                                                   "session.pre_allocate_execution_buffers": "1"}, providers=SIM)
    assert sess.placement.mode == "auto-fit"
    assert sess.placement.layers_on_device == best
    assert _device_total(sess) == totals_by_layers[best] <= budget
    feeds = zoo.decoder_inputs(CFG, 1, 16, 0)
    ref = ort.InferenceSession(zoo.decoder_proto(CFG).SerializeToString()).run(None, feeds)
    for a, b in zip(sess.run(None, feeds), ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert sess.last_run_stats.allocations == 0


def test_name_rules_place_layers_and_copy_at_boundaries():
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS,
                                               "session.name_based_layer_assignment": "gpu(layers.[1-2]/)"},
                            providers=SIM)
    on_gpu = {n.name.split("/")[2] for n in sess.model.graph.nodes
              if n.ep == "SimulatedGPUExecutionProvider" and "Memcpy" not in n.op_type}
    assert on_gpu == {"layers.1", "layers.2"}
    copies = {(c.src, c.dst) for c in sess.copies}
    assert copies == {("cpu", "simgpu"), ("simgpu", "cpu")}
    assert sess.plan.to_dict()["devices"]["simgpu"]["weights"] > 0


def test_rules_under_a_tight_budget_stop_at_the_budget_and_preallocate_within_it():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": "gpu:300KiB",
                                                   "session.name_based_layer_assignment": "gpu(layers.[0-3]/)",
                                                   "session.pre_allocate_execution_buffers": "1"}, providers=SIM)
    d = sess.plan.to_dict()
    assert 0 < d["devices"]["simgpu"]["total"] <= 300 * 1024
    stopped = [n for n in d["nodes"] if "budget" in n["reason"]]
    assert stopped and all(n["ep"] == "CPUExecutionProvider" for n in stopped)


@pytest.mark.parametrize("budget, match", [("gpu:-1GiB", "negative|must"), ("gpu:12parsecs", "unit"), ("", "")])
def test_bad_budget_strings_are_clear_errors(budget, match):
    if not budget:
        sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": budget}, providers=SIM)
        assert sess.placement.mode == "priority"
        return
    with pytest.raises(ValueError, match=match):
        InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": budget}, providers=SIM)


def test_cuda_without_device_declines_every_node_with_reason_and_remedy():
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": "cuda:1GiB"},
                            providers=["CUDAExecutionProvider"])
    declines = sess.plan.to_dict()["declines"]
    # every node placement saw: the CPU provider's SiLUFusion then made one node of each Sigmoid + Mul, and its
    # MatMulTransposeFusion one of each attention Transpose + MatMul, and RepeatKVFusion three of each K and V repeat's
    # Unsqueeze + Expand + Reshape + matmul
    ep_removed = sum(len(f.replaced) - len(f.created) for f in sess.fusions
                     if f.fusion in ("SiLUFusion", "MatMulTransposeFusion", "RepeatKVFusion"))
    assert ep_removed == 4 * CFG.layers
    assert len(declines) == len(sess.model.graph.nodes) + ep_removed
    # with ort-cuda-ep installed the reason is the missing driver/device; without it, the missing package
    assert all(("no CUDA driver/device" in d["reason"] or "ort-cuda-ep is not installed" in d["reason"])
               and "remedy" in d["reason"] for d in declines)
    assert {n.ep for n in sess.model.graph.nodes} == {"CPUExecutionProvider"}


def test_memory_profile_csv_round_trips_into_resource_partitioning(tmp_path):
    import ort_partition

    path = tmp_path / "stats.csv"
    sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "memory_profile_out": str(path)})
    sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    stats = ort_partition.read_node_stats(path)
    row = stats["/lm_head/MatMul"]
    assert row.total_dynamic_sizes == 16 * CFG.vocab * 4
    assert row.initializers_sizes == CFG.hidden * CFG.vocab * 4
    assert row.input_sizes == 16 * CFG.hidden * 4
    assert len(stats) == len(sess.order)
    # the CSV feeds ONNX Runtime's own budget option back in: "<limit_kb>,<file>"
    sess2 = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS,
                                                "session.resource_cuda_partitioning_settings": f"1024,{path}"},
                             providers=["CUDAExecutionProvider"])
    assert sess2.placement.result.budgets == {"CUDAExecutionProvider": 1024 * 1024}


def test_device_profile_plans_for_a_gpu_that_is_absent_and_refuses_to_run():
    pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is an optional extra of ort-session and is not installed")
    from ort_session import SessionError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": "cuda:512KiB",
                                                   "device_profile": "h100"}, providers=["CUDAExecutionProvider"])
    d = sess.plan.to_dict()
    assert 0 < d["devices"]["cuda:0"]["total"] <= 512 * 1024
    assert sess.placement.layers_on_device >= 1
    with pytest.raises(SessionError, match="can plan.*cannot run"):
        sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
