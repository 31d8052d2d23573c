"""ONNX's C++ shape inference cannot take the process down (`_inference_guard`): models that crashed it (measured
on onnx 1.23) resolve, or fail with a typed error, in a process that lives on."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_graph._inference_guard import InferenceCrashed, bounded_steps, isolated

fork_only = pytest.mark.skipif(not hasattr(os, "fork"), reason="isolation needs os.fork; elsewhere inference runs in-process")


def _slice_model(step, dims=(2, 8)):
    start, end = (0, 8) if step > 0 else (7, -9)
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((start, "s"), (end, "e"), (1, "a"), (step, "st"))]
    g = helper.make_graph([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="sl")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _in_child(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter: a crash there is a failed assertion here, not a dead test run."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("step", [2**31, 2**33, 2**63 - 1, -(2**40)])
def test_a_slice_step_beyond_int32_resolves_like_any_other(step, tmp_path):
    # onnx's Slice inference segfaults or allocates without bound on such a step; onnxruntime runs the model
    path = tmp_path / "m.onnx"
    path.write_bytes(_slice_model(step).SerializeToString())
    p = _in_child(f"""
        import ort_graph
        m = ort_graph.load({str(path)!r})
        ort_graph.resolve_shapes(m)
        print(m.graph.values["y"].shape)
    """)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "(2, 1)"


def test_bounded_steps_keeps_what_is_in_range():
    steps = np.array([1, -3, 2**31 - 1], np.int64)
    assert bounded_steps(steps) is steps
    assert bounded_steps(np.array([2**40, -(2**63)], np.int64)).tolist() == [2**31 - 1, -(2**31 - 1)]


@fork_only
def test_a_negative_dimension_onnx_infers_does_not_abort_the_process(tmp_path):
    # a Conv whose kernel outgrows its input: onnx infers -3 and a Slice over it then fails a libstdc++ assertion
    # (abort) inside onnx's whole-graph inference; the isolated child dies, the per-node pass finds the Conv
    w = numpy_helper.from_array(np.zeros((4, 3, 5, 1), np.float32), "w")
    inits = [w] + [numpy_helper.from_array(np.array(v, np.int64), n)
                   for v, n in (([0, 0, 0, 0], "s"), ([2**31 - 1] * 3 + [1], "e"), ([0, 1, 2, 3], "a"))]
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                           helper.make_node("Slice", ["c", "s", "e", "a"], ["y"], name="slice")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    p = _in_child(f"""
        import warnings, ort_graph
        warnings.simplefilter("ignore")
        m = ort_graph.load({str(path)!r})
        ort_graph.resolve_shapes(m)
        print("resolved", m.graph.values["c"].shape)
    """)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("resolved")
    assert "onnx shape inference died" in p.stderr


@fork_only
def test_isolated_passes_results_and_errors_back_and_survives_a_crash():
    proto = _slice_model(3)
    assert isolated(lambda p: [p.graph.node[0].op_type, 7, (1, None, "n")], proto) == ["Slice", 7, (1, None, "n")]

    def invalid(p):
        raise ValueError("bad model")

    with pytest.raises(ValueError, match="bad model"):
        isolated(invalid, proto)
    with pytest.raises(InferenceCrashed, match="SIGSEGV"):
        isolated(lambda p: os.kill(os.getpid(), signal.SIGSEGV), proto)

    def hog(p):
        return len(bytearray(64 << 30))  # beyond the child's address-space limit: fails there, not in the machine

    with pytest.raises((MemoryError, InferenceCrashed)):
        isolated(hog, proto)


def test_the_guard_changes_no_ordinary_result():
    m = ort_graph.from_proto(_slice_model(3))
    ort_graph.resolve_shapes(m)
    assert m.graph.values["y"].shape == (2, 3)


@fork_only
def test_the_child_is_kept_for_the_next_model_and_replaced_after_a_crash():
    from ort_graph import _inference_guard as guard

    def pid_of(p):
        return os.getpid()

    proto = _slice_model(3)
    first = isolated(pid_of, proto)
    assert first != os.getpid() and isolated(pid_of, proto) == first  # one fork for many models
    with pytest.raises(InferenceCrashed):
        isolated(lambda p: os.kill(os.getpid(), signal.SIGKILL), proto)
    assert guard._worker is None
    assert isolated(pid_of, proto) not in (first, os.getpid())


def test_a_whole_graph_pass_out_of_memory_falls_back_to_the_per_node_pass(monkeypatch):
    # the isolated child answers MemoryError when its address-space limit stops an allocation
    from ort_graph import _shapes

    def out_of_memory(proto):
        raise MemoryError("past the child's address-space limit")

    monkeypatch.setattr(_shapes, "inferred_table", out_of_memory)
    m = ort_graph.from_proto(_slice_model(3))
    ort_graph.resolve_shapes(m)
    assert m.graph.values["y"].shape == (2, 3)
