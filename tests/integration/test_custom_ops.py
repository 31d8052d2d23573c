"""Custom-domain ops from a C kernel library keep the session's static plan, and the host checks them.

c/custom_ops.c registers com.example::TileRows (y = x repeated `repeats` times along axis 0, float32
only) with an output-shape callback (ABI v3), TileRowsNoShape without one, and ShortRows, which asks
for one row less than its plan says (and drops the refusal)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_abi
import ort_graph
import ort_partition
from ort_session import InferenceSession
from ort_session._errors import InvalidOptionError, KernelRunError
from ort_session._executor import NO_C_STEPS_ENV

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE
PRE_ALLOCATE = "session.pre_allocate_execution_buffers"


def tile_model(op: str = "TileRows", *, declared: list | None = None, elem: int = F32, repeats: int = 2):
    """x[4, 8] -> com.example::<op>(repeats) -> y -> Relu -> z -> MatMul(w[8, 3]) -> out.
    `declared`: y's shape in value_info (None: y is not declared)."""
    w = helper.make_tensor("w", elem, [8, 3], np.linspace(-1, 1, 24).tolist())
    nodes = [helper.make_node(op, ["x"], ["y"], name="tile", domain="com.example", repeats=repeats),
             helper.make_node("Relu", ["y"], ["z"], name="relu"),
             helper.make_node("MatMul", ["z", "w"], ["out"], name="matmul")]
    value_info = [helper.make_tensor_value_info("y", elem, declared)] if declared is not None else []
    graph = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("x", elem, [4, 8])],
                              [helper.make_tensor_value_info("out", elem, None)], [w], value_info=value_info)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def reference(x: np.ndarray, repeats: int = 2) -> np.ndarray:
    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    return np.maximum(np.concatenate([x] * repeats, axis=0), 0) @ w


def session(model, lib, **options):
    return InferenceSession(model, {"kernel_libraries": [str(lib)], **options})


X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


# ---- part 4: custom ops keep static planning -------------------------------------------------------------
def test_declared_value_info_of_a_custom_output_keeps_the_plan_static(custom_ops_lib):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort_graph.ShapeResolutionWarning)
        sess = session(tile_model("TileRowsNoShape", declared=[8, 8]), custom_ops_lib, **{PRE_ALLOCATE: "1"})
    g = sess.model.graph
    assert g.values["z"].shape == (8, 8) and g.values["out"].shape == (8, 3)
    assert sess.memory.static and sess.memory.gplan.activations.unknown_sizes == ()
    out, = sess.run(None, {"x": X})
    np.testing.assert_allclose(out, reference(X), rtol=1e-5)
    assert sess.last_run_stats.layout == "pre-allocated"


def test_output_shape_callback_resolves_the_nodes_after_a_custom_op(custom_ops_lib):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort_graph.ShapeResolutionWarning)
        sess = session(tile_model("TileRows", repeats=3), custom_ops_lib, **{PRE_ALLOCATE: "1"})
    g = sess.model.graph
    assert (g.values["y"].shape, g.values["y"].dtype) == ((12, 8), F32)
    assert g.values["out"].shape == (12, 3) and sess.shape_report.unresolved_node is None
    out, = sess.run(None, {"x": X})
    np.testing.assert_allclose(out, reference(X, 3), rtol=1e-5)


def test_callback_sees_symbolic_extents_as_unknown(custom_ops_lib):
    model = tile_model("TileRows")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    sess = session(model, custom_ops_lib, free_dimension_overrides={"batch": 5})
    assert sess.model.graph.values["out"].shape == (10, 3)


def test_unresolvable_custom_output_is_reported_naming_the_node_and_the_fixes(custom_ops_lib):
    with pytest.warns(ort_graph.ShapeResolutionWarning, match=r"node 'tile' \(com.example::TileRowsNoShape\) has no "
                      r"output-shape rule.*--dim cannot fix that.*value_info.*output-shape callback.*open an issue"):
        sess = session(tile_model("TileRowsNoShape"), custom_ops_lib)
    assert sess.shape_report.unresolved_node == "tile"
    assert any("'tile'" in w for w in sess.plan.to_dict()["shapes"]["warnings"])
    with pytest.warns(ort_graph.ShapeResolutionWarning), \
            pytest.raises(InvalidOptionError, match=r"pre_allocate.*because node 'tile' \(com.example::TileRowsNoShape\) "
                                                    r"has no output-shape rule") as info:
        session(tile_model("TileRowsNoShape"), custom_ops_lib, **{PRE_ALLOCATE: "1"})
    assert "set free_dimension_overrides" not in str(info.value)  # one cause, not the generic --dim advice


# ---- part 5: the host checks what kernels do ----------------------------------------------------------
@pytest.fixture(params=["C step runner", "Python contexts"])
def runner(request, monkeypatch):
    """Both ways a planned C kernel's step is called (`ort_session._fast_steps`): the checks are the same."""
    if request.param == "C step runner":
        monkeypatch.delenv(NO_C_STEPS_ENV, raising=False)
    else:
        monkeypatch.setenv(NO_C_STEPS_ENV, "1")
    return request.param


def test_a_custom_c_kernel_of_a_static_plan_runs_through_the_step_runner(custom_ops_lib, runner):
    sess = session(tile_model("TileRows"), custom_ops_lib)
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], reference(X), rtol=1e-5)
    stats = sess.last_run_stats
    assert stats.layout == "static plan"
    assert (stats.c_steps >= 1) if runner == "C step runner" else (stats.c_steps == 0)  # TileRows (+ the C MatMul)


@pytest.mark.parametrize("declared", [[4, 8], [16, 8], [8, 8, 1]], ids=["smaller", "larger", "rank"])
def test_a_kernel_output_that_contradicts_the_plan_fails_naming_node_index_and_shapes(custom_ops_lib, declared,
                                                                                       runner):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort_graph.ShapeResolutionWarning)  # MatMul cannot take the rank-3 declaration
        sess = session(tile_model("TileRowsNoShape", declared=declared), custom_ops_lib)
    with pytest.raises(KernelRunError, match="node 'tile'") as info:
        sess.run(None, {"x": X})
    cause = info.value.__cause__
    assert isinstance(cause, ort_abi.OutputMismatchError) and cause.index == 0
    assert "[8, 8]" in str(cause) and str(declared).replace(" ", "") in str(cause).replace(" ", "")
    assert cause.code == ort_abi.ErrorCode.INVALID_ARGUMENT


def test_a_kernel_that_drops_the_refusal_still_fails(custom_ops_lib, runner):
    sess = session(tile_model("ShortRows"), custom_ops_lib)
    with pytest.raises(KernelRunError, match=r"output 0 requested with shape \[7, 8\] but the plan has \[8, 8\]"):
        sess.run(None, {"x": X})


def test_a_float_kernel_declines_double_inputs_with_the_reason(custom_ops_lib):
    with pytest.raises(ort_partition.PlacementError, match=r"node 'tile'.*rejected input 0 dtype DOUBLE "
                       r"\(type constraint 'T' allows FLOAT\)"):
        session(tile_model("TileRows", elem=F64), custom_ops_lib)


def test_the_estimate_receives_the_ep_it_is_asked_about(custom_ops_lib):
    sess = session(tile_model("TileRows"), custom_ops_lib)
    cpu = sess.providers[-1]
    tile = next(n for n in sess.model.graph.nodes if n.name == "tile")
    assert cpu.estimate(tile) == 4096  # the C estimate read Ep_GetName; with a NULL EP it declines


def test_in_tree_kernels_without_an_estimate_get_the_heuristic_not_zero(custom_ops_lib, monkeypatch):
    from ort_cpu_ep import c_kernels

    monkeypatch.setattr(c_kernels, "c_registry", lambda: None)  # the numpy Relu (the C Relu declares 0 workspace)
    sess = session(tile_model("TileRows"), custom_ops_lib)
    cpu = sess.providers[-1]
    relu = next(n for n in sess.model.graph.nodes if n.name == "relu")
    assert cpu.estimate(relu) is None
    cost = ort_partition.node_cost_breakdown(ort_partition.ResourceAccountant(1 << 30), relu,
                                             ort_partition.safe_estimate(None, relu, cpu.name))
    assert cost.workspace_source == "heuristic" and cost.total == cost.activations * 3 // 2


def test_kernel_listing_shows_which_kernels_have_an_output_shape_callback(custom_ops_lib):
    from ort_session._kernels import kernel_rows, kernel_table

    rows = {r["op"]: r for r in kernel_rows([str(custom_ops_lib)]) if r["library"]}
    assert rows["com.example::TileRows"]["output_shapes"] == "yes"
    assert rows["com.example::TileRowsNoShape"]["output_shapes"] == "no"
    assert "output shapes" in kernel_table([str(custom_ops_lib)]).splitlines()[0]
