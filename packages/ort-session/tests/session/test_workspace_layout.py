"""Each device's memory plan keeps the smaller of workspace packed with the activations and a separate workspace
arena, and the plan (`sess.plan`, `ortrun plan --json`) says which."""

from __future__ import annotations

import warnings

import pytest

import ort_memplan
from ort_session import InferenceSession

SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
DIMS = {"batch_size": 1, "sequence_length": 16, "past_sequence_length": 0, "total_sequence_length": 16,
        "kv_cache_dim": 16}


@pytest.mark.parametrize("export", ["genai_int4_cpu", "genai_int4_cuda"])
def test_a_genai_int4_export_plans_the_smaller_workspace_layout(shared_models, export):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(shared_models / "llama_l4" / export / "model.onnx"),
                                {"budgets": "gpu:1GiB", "free_dimension_overrides": DIMS}, providers=SIM)
    gplan = sess.memory.gplan
    slots = list(gplan.slot_requests.values())
    others = [r for r in gplan.requests if r.id not in {s.id for s in slots}]
    packed = ort_memplan.plan([*others, *slots], "auto")
    acts, work = ort_memplan.plan(others, "auto"), ort_memplan.plan(slots, "auto")
    devices = sess.plan.to_dict()["devices"]
    assert any(slots) and set(devices) == {"simgpu", "cpu"}
    for device, d in devices.items():
        separate = acts.peak.get(device, 0) + work.peak.get(device, 0)
        want = "separate" if separate < packed.peak.get(device, 0) else "packed"
        assert d["workspace_layout"] == want, (device, packed.peak, separate)
        assert d["peak_activations"] == min(packed.peak.get(device, 0), separate)
    ort_memplan.validate(gplan.plan, gplan.requests)
