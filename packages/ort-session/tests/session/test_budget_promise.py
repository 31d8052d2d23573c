"""The budget promise at initialization: values of unknown size on a budgeted device are refused there
(naming them, the symbolic input dims and the fix), accepted only knowingly, and `ortrun plan` plans the
dims `ortrun run` feeds."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ort_graph import zoo
from ort_session import InferenceSession, InvalidOptionError, UnplannedShapesWarning, cli

SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]


def _mlp(batch="batch"):
    w = helper.make_tensor("W", TensorProto.FLOAT, [16, 16], np.eye(16, dtype=np.float32).ravel().tolist())
    nodes = [helper.make_node("MatMul", ["X", "W"], ["H"], name="fc1/MatMul"),
             helper.make_node("Relu", ["H"], ["Y"], name="fc1/Relu")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, 16])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [batch, 16])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(*args, **kwargs)


def test_symbolic_dims_on_a_budgeted_device_are_refused_at_initialization_naming_values_dims_and_fix():
    with pytest.raises(InvalidOptionError, match=r"(?s)cannot be planned.*simgpu.*'H'.*input 'X' \['batch', 16\]: "
                                                 r"dynamic axis 0 \('batch'\).*--max-shape X=\[N,16\].*"
                                                 r"free_dimension_overrides=\{'batch': N\} \(ortrun: --dim batch=N\)"
                                                 r".*session.allow_unplanned_shapes=1"):
        _quiet(_mlp(), {"budgets": "gpu:1MiB"}, providers=SIM)


def test_the_same_model_is_planned_once_its_dims_are_given_and_runs_within_the_budget():
    sess = _quiet(_mlp(), {"budgets": "gpu:1MiB", "free_dimension_overrides": {"batch": 4}}, providers=SIM)
    assert sess.memory.static
    x = np.arange(64, dtype=np.float32).reshape(4, 16)
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], np.maximum(x, 0))
    assert sess.device_memory()["simgpu"]["peak"] <= 1 << 20


def test_accepting_unplanned_shapes_knowingly_warns_and_the_allocator_holds_the_budget():
    with pytest.warns(UnplannedShapesWarning, match=r"cannot be guaranteed by the plan.*'X' \['batch', 16\]"):
        sess = InferenceSession(_mlp(), {"budgets": "gpu:2KiB", "session.allow_unplanned_shapes": "1"}, providers=SIM)
    x = np.ones((2, 16), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], x)
    with pytest.raises(Exception, match="cannot allocate"):  # far more than the budget: fails at its node
        sess.run(None, {"X": np.ones((4096, 16), np.float32)})
    assert sess.device_memory()["simgpu"]["peak"] <= 2048


def test_without_a_budget_symbolic_dims_trace_as_before():
    sess = _quiet(_mlp(), providers=SIM)
    x = np.ones((3, 16), np.float32)
    sess.run(None, {"X": x})
    assert sess.last_run_stats.layout == "tracing"


def test_a_plan_only_session_warns_instead_of_refusing():
    pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is an optional extra of ort-session and is not installed")
    with pytest.warns(UnplannedShapesWarning):
        InferenceSession(_mlp(), {"budgets": "cuda:1MiB", "device_profile": "h100"},
                         providers=["CUDAExecutionProvider"])


def test_a_max_shape_on_one_input_bounds_its_symbols_in_every_input():
    cfg = zoo.DecoderConfig(layers=2)
    head = cfg.hidden // cfg.heads
    sess = _quiet(zoo.decoder(cfg), {"free_dimension_overrides": {"batch": 1}, "budgets": "gpu:8MiB",
                                     "max_shapes": {"input_ids": [1, 16], "past_key_values.0.key": [1, cfg.kv_heads, 32, head]},
                                     "session.name_based_layer_assignment": "gpu(layers.0/)"}, providers=SIM)
    assert sess.memory.static  # past_key_values.1.* share 'past_sequence': bounded by the max shape of .0.key
    assert tuple(sess.model.graph.values["past_key_values.1.value"].shape) == (1, cfg.kv_heads, 32, head)


def test_ortrun_plan_plans_the_dims_ortrun_run_feeds(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), path)
    code = cli.main(["plan", str(path), "--budget", "gpu:1MiB", "--providers", ",".join(SIM), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "planning for the dims `ortrun run` feeds by default: {'batch': 1}" in err
    assert '"simgpu"' in out


def test_a_plan_over_the_budget_is_refused_at_initialization_and_nothing_stays_allocated(monkeypatch):
    # the rule's accountant admits fc1/MatMul by its per-node cost (weights 1024 + output 4096 = 5120 <= 6000),
    # but the plan also holds the input copied onto the device while the MatMul runs: 1024 + 8192 > 6000
    from ort_session import PlanOverBudgetError

    allocated = []
    import ort_abi

    real = ort_abi.NullDeviceAllocator.alloc

    def spy(self, nbytes):
        buf = real(self, nbytes)
        allocated.append(buf)
        return buf

    monkeypatch.setattr(ort_abi.NullDeviceAllocator, "alloc", spy)
    opts = {"free_dimension_overrides": {"batch": 64}, "budgets": "gpu:6000",
            "session.name_based_layer_assignment": "gpu(fc1/MatMul)"}
    with pytest.raises(PlanOverBudgetError, match=r"simgpu: weights 1024 \+ planned peak 8192 = 9216 bytes, over its "
                                                  r"budget of 6000 bytes by 3216.*nothing was allocated"):
        _quiet(_mlp(), opts, providers=SIM)
    assert not allocated
