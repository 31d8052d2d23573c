"""The seeds' session keys: ONNX Runtime's node memory stats file, static workspace pre-allocation and strict
workspace verification mean what 000/002 say (not 'unknown key' warnings)."""

import importlib.util
import pathlib
import warnings

import numpy as np
import pytest

from ort_session import InferenceSession, SessionOptions, WorkspaceVerificationError
from ort_session._errors import InvalidOptionError
from ort_session._options import NODE_MEMORY_STATS_FILE, STATIC_WORKSPACE, STRICT_WORKSPACE

_HERE = pathlib.Path(__file__).with_name("test_preallocated_zero.py")
_spec = importlib.util.spec_from_file_location("_preallocated_zero_kernels", _HERE)
_zero = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_zero)  # its kernels, model and session fixture, shared rather than copied
CPU, SIM, GreedyRelu, OldAbiRelu, X, relu_model = (_zero.CPU, _zero.SIM, _zero.GreedyRelu, _zero.OldAbiRelu, _zero.X,
                                                   _zero.relu_model)
session_with = _zero.session_with
STRICT = {STRICT_WORKSPACE: "1"}


@pytest.mark.parametrize("key", [NODE_MEMORY_STATS_FILE, STATIC_WORKSPACE, STRICT_WORKSPACE])
def test_seed_keys_are_read_not_warned_about(key, tmp_path):
    value = str(tmp_path / "s.csv") if key == NODE_MEMORY_STATS_FILE else "1"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opts = SessionOptions.from_mapping({key: value})
    assert opts.get(key) == value


@pytest.mark.parametrize("key", [STATIC_WORKSPACE, STRICT_WORKSPACE])
def test_seed_boolean_keys_reject_non_booleans(key):
    with pytest.raises(InvalidOptionError, match=f"{key}.*not a boolean"):
        SessionOptions.from_mapping({key: "maybe"})


def test_onnx_runtime_stats_key_writes_the_same_file_as_memory_profile_out(tmp_path):
    ours, theirs = tmp_path / "ours.csv", tmp_path / "theirs.csv"
    InferenceSession(relu_model(), {"memory_profile_out": str(ours)}).run(None, {"X": X})
    InferenceSession(relu_model(), {NODE_MEMORY_STATS_FILE: str(theirs)}).run(None, {"X": X})
    assert theirs.read_text() == ours.read_text() and "first" in theirs.read_text()


def test_two_different_stats_files_are_refused_at_initialization(tmp_path):
    with pytest.raises(InvalidOptionError, match="two different files"):
        InferenceSession(relu_model(), {"memory_profile_out": str(tmp_path / "a.csv"),
                                    NODE_MEMORY_STATS_FILE: str(tmp_path / "b.csv")})


@pytest.mark.parametrize("providers", [CPU, SIM], ids=["cpu", "simgpu"])
def test_static_workspace_preallocation_allocates_at_initialization_and_falls_back_counted(session_with, providers):
    sess = session_with(GreedyRelu, {STATIC_WORKSPACE: "1"}, providers)
    assert sess.memory.buffers is not None  # allocated once, at initialization
    sess.run(None, {"X": X})  # the greedy kernel asks 256 of its declared 64: a counted fallback, not an error
    stats = sess.last_run_stats
    assert stats.layout == "static workspace" and stats.scratch_fallbacks == 1 and stats.scratch_bytes == 256
    GreedyRelu.greedy = False
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], -np.maximum(X, 0))
    assert sess.last_run_stats.workspace_from_plan == 1 and sess.last_run_stats.allocations == 0


def test_static_workspace_preallocation_needs_static_shapes():
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InvalidOptionError, match=f"{STATIC_WORKSPACE} needs static shapes"):
        InferenceSession(model, {STATIC_WORKSPACE: "1"})


@pytest.mark.parametrize("providers", [CPU, SIM], ids=["cpu", "simgpu"])
@pytest.mark.parametrize("pre", [False, True], ids=["per-run", "static-workspace"])
def test_strict_verification_refuses_more_workspace_than_declared(session_with, providers, pre):
    sess = session_with(GreedyRelu, {**STRICT, **({STATIC_WORKSPACE: "1"} if pre else {})}, providers)
    device = sess.memory.allocators.get("simgpu")
    in_use = device.bytes_in_use if device is not None else None
    with pytest.raises(WorkspaceVerificationError,
                       match=r"node 'first' \(Relu\).*256-byte workspace buffer, more than it declared.*\{0: 64\}.*"
                             r"strict_workspace_verification") as info:
        sess.run(None, {"X": X})
    assert (info.value.node, info.value.requested, info.value.planned) == ("first", 256, 64)
    if device is not None:
        assert device.bytes_in_use == in_use
    GreedyRelu.greedy = False
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], -np.maximum(X, 0))




def test_strict_verification_refuses_a_kernel_that_declares_nothing(session_with):
    sess = session_with(OldAbiRelu, STRICT, CPU)
    with pytest.raises(WorkspaceVerificationError, match=r"256-byte workspace buffer, more than it declared.*\{\}"):
        sess.run(None, {"X": X})


def test_static_workspace_preallocation_refuses_larger_feeds_naming_its_key():
    from onnx import TensorProto, helper

    from ort_session import FeedExceedsPlanError

    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 16])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = InferenceSession(model, {STATIC_WORKSPACE: "1", "free_dimension_overrides": {"n": 2}})
    sess.run(None, {"X": np.ones((1, 16), np.float32)})  # smaller: the static plan
    assert sess.last_run_stats.layout == "static workspace"
    with pytest.raises(FeedExceedsPlanError, match=f"pre-allocated its static workspace.*{STATIC_WORKSPACE}"):
        sess.run(None, {"X": np.ones((3, 16), np.float32)})
