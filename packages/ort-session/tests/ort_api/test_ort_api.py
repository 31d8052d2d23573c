"""ort-session's side of ONNX Runtime's API: what it honours, what it refuses, and how it says so."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import ort_session as ort
from ort_graph import zoo
from ort_session import _ort_api, _ort_options
from ort_session.capi import onnxruntime_pybind11_state as capi

from .snippets import X, mlp_model

SIM = "SimulatedGPUExecutionProvider"
CPU = "CPUExecutionProvider"


@pytest.fixture
def fresh_notes(monkeypatch):
    monkeypatch.setattr(_ort_options, "_NOTED", set())


def _fixed_batch() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 2)
    return so


def _quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


# -- exceptions ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("ours", "theirs"), [
    (ort.InvalidInputError, capi.InvalidArgument), (ort.InvalidOptionError, capi.InvalidArgument),
    (ort.PlacementError, capi.NotImplemented), (ort.KernelRunError, capi.Fail), (ort.RunTerminatedError, capi.Fail),
    (ort.DeviceMemoryError, capi.RuntimeException), (ort.ModelFileNotFoundError, capi.NoSuchFile),
    (ort.InvalidModelError, capi.InvalidProtobuf), (ort.InvalidGraphError, capi.InvalidGraph),
    (ort.FallbackDisabledError, capi.EPFail), (ort.UnplannedAllocationError, capi.RuntimeException),
])
def test_each_error_is_caught_by_the_onnxruntime_type_it_corresponds_to(ours, theirs):
    assert issubclass(ours, theirs) and issubclass(ours, ort.SessionError)
    assert theirs is getattr(ort, theirs.__name__)


def test_a_missing_model_file_is_no_such_file_and_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ort.InferenceSession(str(tmp_path / "absent.onnx"))


# -- constructor forms and provider options -------------------------------------------------------
def test_gpu_mem_limit_becomes_the_device_budget():
    model = mlp_model().SerializeToString()
    roomy = _quiet(ort.InferenceSession, model, _fixed_batch(), providers=[(SIM, {"gpu_mem_limit": "1GiB"}), CPU])
    assert roomy.placement.result.budgets == {SIM: 2**30}
    assert roomy.get_providers() == [SIM]  # the host copies of the outputs are not counted as CPU nodes
    assert roomy.get_provider_options()[SIM] == {"gpu_mem_limit": "1GiB", "device_id": "0"}
    tight = _quiet(ort.InferenceSession, model, _fixed_batch(), providers=[SIM, CPU],
                   provider_options=[{"gpu_mem_limit": 1}, {}])
    assert tight.get_providers() == [CPU]
    np.testing.assert_allclose(roomy.run(None, {"X": X})[1], tight.run(None, {"X": X})[1], rtol=1e-6)


def test_an_unknown_provider_option_warns_with_the_closest_key():
    with pytest.warns(ort.UnknownConfigKeyWarning, match="did you mean 'gpu_mem_limit'"):
        ort.InferenceSession(mlp_model().SerializeToString(), providers=[(SIM, {"gpu_memory_limit": "1"}), CPU])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"providers": [(SIM, {"device_id": "one"})]}, "non-negative int"),
    ({"providers": [(SIM, {"device_id": 1})]}, "one device, id 0"),
    ({"providers": [SIM, CPU], "provider_options": [{}]}, "one per provider"),
    ({"providers": [(SIM, {"device_id": 0})], "provider_options": [{}]}, "in one place"),
    ({"provider_options": [{}]}, "without providers"),
    ({"providers": [(CPU, {"gpu_mem_limit": 5})]}, "limits a GPU provider"),
    ({"providers": [(SIM, {"gpu_mem_limit": 5})], "sess_options": {"budgets": "gpu:1GiB"}}, "give one of them"),
    ({"providers": [(SIM, {"gpu_mem_limit": "lots"})]}, "budget"),
    ({"providers": "CPUExecutionProvider"}, "expected a list"),
])
def test_bad_provider_arguments_are_refused_naming_them(kwargs, message):
    with pytest.raises(ort.InvalidArgument, match=message):
        _quiet(ort.InferenceSession, mlp_model().SerializeToString(), **kwargs)


def test_session_options_given_twice_are_refused():
    with pytest.raises(ort.InvalidOptionError, match="given twice"):
        ort.InferenceSession(mlp_model().SerializeToString(), ort.SessionOptions(), sess_options=ort.SessionOptions())


def test_available_providers_list_cuda_only_with_a_device(monkeypatch):
    monkeypatch.setattr(_ort_api, "cuda_device_count", lambda: 0)
    assert ort.get_available_providers() == [SIM, CPU]
    monkeypatch.setattr(_ort_api, "cuda_device_count", lambda: 2)
    assert ort.get_available_providers() == ["CUDAExecutionProvider", SIM, CPU]
    assert set(ort.get_available_providers()) <= set(ort.get_all_providers())


# -- fallback -------------------------------------------------------------------------------------
def test_with_fallback_disabled_a_node_that_would_move_to_the_cpu_is_an_error_at_initialization():
    so = _fixed_batch()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(capi.EPFail, match=r"'fc/MatMul.*' \(\w+\): placed on the CPU by the budget"):
        _quiet(ort.InferenceSession, mlp_model().SerializeToString(), so, providers=[(SIM, {"gpu_mem_limit": 1})])
    sess = _quiet(ort.InferenceSession, mlp_model().SerializeToString(), so, providers=[(SIM, {"gpu_mem_limit": "1GiB"})])
    assert sess.get_providers() == [SIM]


def test_disable_fallback_names_nodes_the_session_already_moved():
    sess = _quiet(ort.InferenceSession, mlp_model().SerializeToString(), _fixed_batch(),
                  providers=[(SIM, {"gpu_mem_limit": 1}), CPU])
    with pytest.raises(ort.FallbackDisabledError, match="3 node"):
        sess.disable_fallback()
    ort.InferenceSession(mlp_model().SerializeToString()).disable_fallback()  # CPU asked for first: nothing moved


def test_set_providers_recreates_the_session_and_keeps_it_when_the_new_one_fails():
    model = mlp_model().SerializeToString()
    sess = _quiet(ort.InferenceSession, model, sess_options=_fixed_batch(), providers=[CPU])
    _quiet(sess.set_providers, [SIM, CPU], [{"gpu_mem_limit": "1GiB"}, {}])
    assert sess.get_providers() == [SIM] and sess.placement.result.budgets == {SIM: 2**30}
    sess.disable_fallback()  # nothing moved to the CPU: allowed, and the next set_providers refuses a fallback
    with pytest.raises(ort.FallbackDisabledError, match="fc/MatMul"):
        _quiet(sess.set_providers, [(SIM, {"gpu_mem_limit": 1})])
    assert sess.get_providers() == [SIM]
    np.testing.assert_allclose(sess.run(["Z"], {"X": X})[0], ort.InferenceSession(model).run(["Z"], {"X": X})[0],
                               rtol=1e-6)
    sess.enable_fallback()
    _quiet(sess.set_providers, [(SIM, {"gpu_mem_limit": 1})])
    assert sess.get_providers() == [CPU]
    with pytest.raises(ort.InvalidOptionError, match="ort_graph Model"):
        _quiet(ort.InferenceSession, zoo.decoder(zoo.DecoderConfig(layers=1))).set_providers([CPU])


# -- SessionOptions -------------------------------------------------------------------------------
def test_disable_all_turns_the_fusions_off_and_optimized_model_filepath_saves_the_fused_model(tmp_path):
    import onnx

    cfg = zoo.DecoderConfig(layers=1)
    so = ort.SessionOptions(free_dimension_overrides={"batch": 1, "sequence": 4, "past_sequence": 0})
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    fused = ort.InferenceSession(zoo.decoder(cfg), so)
    assert fused.fusions
    assert {n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node} >= {r.op_type for r in fused.fusions
                                                                                      if hasattr(r, "op_type")}
    # saved before placement: the CPU provider's own passes (SiLUFusion, MatMulTransposeFusion: one node for two;
    # RepeatKVFusion: three for four, once for K and once for V) run after it
    ep_pass_removed = sum(len(r.replaced) - len(r.created) for r in fused.fusions
                          if r.fusion in ("SiLUFusion", "MatMulTransposeFusion", "RepeatKVFusion"))
    assert ep_pass_removed == 4
    assert len(onnx.load(so.optimized_model_filepath).graph.node) == len(fused.model.graph.nodes) + ep_pass_removed
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert ort.InferenceSession(zoo.decoder(cfg), so).fusions == []


@pytest.mark.parametrize(("attribute", "value"), [
    ("inter_op_num_threads", 4), ("execution_mode", ort.ExecutionMode.ORT_PARALLEL), ("enable_mem_pattern", False),
    ("log_severity_level", 3), ("use_deterministic_compute", True),
])
def test_options_without_effect_here_are_noted_once(fresh_notes, attribute, value):
    so = ort.SessionOptions()
    with pytest.warns(ort.OrtOptionNoteWarning, match=f"{attribute}: accepted .* no effect"):
        setattr(so, attribute, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setattr(ort.SessionOptions(), attribute, value)  # once per process
    assert getattr(so, attribute) == value


def test_honoured_options_are_not_noted(fresh_notes):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        so = ort.SessionOptions()
        so.intra_op_num_threads = 3
        so.enable_profiling = True
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.log_severity_level = 2  # the default: nothing to note
        so.enable_cpu_mem_arena = False  # the host buffer is freed after each run
    assert so.intra_op_num_threads == 3


@pytest.mark.parametrize(("attribute", "value"), [
    ("graph_optimization_level", 5), ("graph_optimization_level", "ORT_ENABLE_EVERYTHING"), ("intra_op_num_threads", -1),
    ("intra_op_num_threads", 2.0), ("enable_mem_pattern", "no"), ("log_severity_level", 7),
    ("execution_mode", ort.GraphOptimizationLevel.ORT_ENABLE_ALL), ("profile_file_prefix", 3),
])
def test_a_bad_option_value_is_refused_when_set(attribute, value):
    so = ort.SessionOptions()
    with pytest.raises(ort.InvalidArgument, match=attribute):
        setattr(so, attribute, value)


def test_enum_options_take_member_names():
    so = ort.SessionOptions.from_mapping({"graph_optimization_level": "ORT_DISABLE_ALL", "execution_mode": 0})
    assert so.graph_optimization_level is ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert so.execution_mode is ort.ExecutionMode.ORT_SEQUENTIAL


def test_onnxruntimes_own_enum_values_are_accepted():
    onnxruntime = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert so.graph_optimization_level is ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def test_add_initializer_is_checked_against_the_model_before_anything_is_replaced():
    so = ort.SessionOptions()
    so.add_initializer("B", ort.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32)))
    so.add_initializer("W", np.zeros((3, 4), np.float32))
    with pytest.raises(ort.InvalidOptionError, match=r"add_initializer\('W'\): got float32\[3, 4\].*float32\[4, 3\]"):
        ort.InferenceSession(mlp_model().SerializeToString(), so)
    so.initializer_overrides = {"nope": np.zeros(1, np.float32)}
    with pytest.raises(ort.InvalidOptionError, match="no initializer of that name"):
        ort.InferenceSession(mlp_model().SerializeToString(), so)


def test_session_option_methods():
    so = ort.SessionOptions()
    so.register_custom_ops_library("/opt/libkernels.so")
    assert so.kernel_libraries == ["/opt/libkernels.so"]
    with pytest.raises(ort.InvalidOptionError, match="not set"):
        so.get_session_config_entry("session.pre_allocate_execution_buffers")
    with pytest.raises(ort.InvalidOptionError, match="by its name"):
        so.add_free_dimension_override_by_denotation("DATA_BATCH", 1)
    with pytest.raises(ort.InvalidOptionError, match="free_dimension_overrides"):
        so.add_free_dimension_override_by_name("batch", -1)


# -- inputs and outputs ---------------------------------------------------------------------------
def test_unknown_dimensions_are_none_and_overridden_ones_their_value():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.INT64, ["n", None, 3])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString())
    assert sess.get_inputs()[0].shape == ["n", None, 3] and sess.get_inputs()[0].type == "tensor(int64)"
    assert sess.get_outputs()[0].shape is None
    so = ort.SessionOptions(free_dimension_overrides={"n": 5})
    assert ort.InferenceSession(model.SerializeToString(), so).get_inputs()[0].shape == [5, None, 3]


# -- runs -----------------------------------------------------------------------------------------
def test_terminate_stops_a_run_between_nodes_and_the_session_runs_again():
    sess = ort.InferenceSession(mlp_model().SerializeToString())
    ro = ort.RunOptions()
    seen = []

    def stop_after_first(done, total):
        seen.append(done)
        ro.terminate = True  # as another thread would

    with pytest.raises(ort.RunTerminatedError, match=r"after 1 of \d+ nodes"):
        sess.run(None, {"X": X}, ro, progress=stop_after_first)
    assert seen == [1]
    ro.terminate = False
    assert sess.run(["Y"], {"X": X}, ro)[0].shape == (2, 3)


def test_run_options_in_the_progress_position_are_refused():
    with pytest.raises(ort.InvalidOptionError, match="must be a RunOptions"):
        ort.InferenceSession(mlp_model().SerializeToString()).run(None, {"X": X}, lambda d, t: None)


def test_a_bound_output_of_the_wrong_shape_is_refused_and_left_untouched():
    sess = ort.InferenceSession(mlp_model().SerializeToString())
    io = sess.io_binding()
    io.bind_cpu_input("X", X)
    good = ort.OrtValue.ortvalue_from_numpy(np.full((2, 3), 7, np.float32))
    bad = ort.OrtValue.ortvalue_from_numpy(np.full((3, 3), 7, np.float32))
    io.bind_ortvalue_output("Y", good)
    io.bind_ortvalue_output("Z", bad)
    with pytest.raises(ort.InvalidInputError, match=r"output 'Z' is float32\[2, 3\] but its bound buffer"):
        sess.run_with_iobinding(io)
    assert (good.numpy() == 7).all() and (bad.numpy() == 7).all()


@pytest.mark.parametrize(("call", "message"), [
    (lambda io: io.bind_cpu_input("nope", X), "model's inputs are"),
    (lambda io: io.bind_output("nope"), "model's outputs are"),
    (lambda io: io.bind_input("X", "tpu", 0, np.float32, [2, 4], X.ctypes.data), "device_type 'tpu'"),
    (lambda io: io.bind_input("X", "cpu", 0, np.float32, [2, 4], 0), "not a host address"),
    (lambda io: io.bind_output("Y", "cpu", 0, None, None, X.ctypes.data), "needs element_type and shape"),
    (lambda io: io.run(), "no output is bound"),
])
def test_iobinding_misuse_is_refused(call, message):
    io = ort.InferenceSession(mlp_model().SerializeToString()).io_binding()
    with pytest.raises(ort.InvalidArgument, match=message):
        call(io)


def test_ortvalue_checks():
    with pytest.raises(ort.InvalidArgument, match="numpy array"):
        ort.OrtValue.ortvalue_from_numpy([1.0, 2.0])
    if _ort_api.cuda_device_count() == 0:
        with pytest.raises(ort.InvalidArgument, match="0 CUDA device"):
            ort.OrtValue.ortvalue_from_numpy(X, "cuda", 0)
    v = ort.OrtValue.ortvalue_from_numpy(X)
    with pytest.raises(ort.InvalidArgument, match="same shape and dtype"):
        v.update_inplace(np.zeros((2, 4), np.float64))
    assert v.element_type() == 1 and v.tensor_size_in_bytes() == X.nbytes and v.data_ptr() == v.numpy().ctypes.data


# -- profiling -----------------------------------------------------------------------------------
def test_profile_has_init_phases_and_one_event_per_node_per_run(tmp_path):
    so = ort.SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "p"))
    sess = ort.InferenceSession(mlp_model().SerializeToString(), so)
    sess.run(None, {"X": X})
    ro = ort.RunOptions()
    ro.logid = "second"
    sess.run(None, {"X": X}, ro)
    path = sess.end_profiling()
    events = json.loads(open(path).read())
    names = [e["name"] for e in events if e["cat"] == "Session"]
    for phase in ("model_loading", "shape_resolution", "fusions", "placement", "kernel_creation", "memory_planning",
                  "session_initialization"):
        assert phase in names
    nodes = [e for e in events if e["cat"] == "Node"]
    assert len(nodes) == 2 * len(sess.order)
    assert {e["args"]["provider"] for e in nodes} == {CPU}
    assert nodes[0]["name"] == f"{sess.order[0].name}_kernel_time"
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    runs = [e for e in events if e["name"] == "model_run"]
    assert [r["args"].get("run_tag") for r in runs] == [None, "second"]
    assert sess.end_profiling() == ""  # profiling stopped with the first file


def test_the_first_nodes_time_is_its_own_not_the_runs_setup(tmp_path, monkeypatch):
    """Feed checks, layouts and thread scopes come before the first node: its event starts after them."""
    import time

    so = ort.SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "p"))
    sess = ort.InferenceSession(mlp_model().SerializeToString(), so)
    layout_for = type(sess.memory).layout_for

    def slow_layout(memory, arrays):
        time.sleep(0.2)  # setup the run does before its first node
        return layout_for(memory, arrays)

    monkeypatch.setattr(type(sess.memory), "layout_for", slow_layout)
    sess.run(None, {"X": X})
    events = json.loads(open(sess.end_profiling()).read())
    (run,) = [e for e in events if e["name"] == "model_run"]
    first = next(e for e in events if e["cat"] == "Node")
    assert run["dur"] >= 200_000 and first["dur"] < 100_000
    assert first["ts"] >= run["ts"] + 200_000


def test_onnxruntime_config_key_families_are_accepted_with_a_warning_and_others_refused():
    so = ort.SessionOptions()
    with pytest.warns(ort.UnknownConfigKeyWarning, match="'ep.context_enable' is not read"):
        so.add_session_config_entry("ep.context_enable", "0")
    assert so.get_session_config_entry("ep.context_enable") == "0"
    with pytest.raises(ort.InvalidOptionError, match="must start with one of"):
        so.add_session_config_entry("context_enable", "0")


def test_profiling_can_be_asked_for_by_keyword(tmp_path):
    sess = ort.InferenceSession(mlp_model().SerializeToString(), enable_profiling=True,
                                profile_file_prefix=str(tmp_path / "kw"))
    sess.run(None, {"X": X})
    assert sess.end_profiling().startswith(str(tmp_path / "kw_"))
