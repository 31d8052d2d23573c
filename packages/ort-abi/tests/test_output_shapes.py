"""ABI v3: output-shape callbacks (Python and C roles), planned-output checks, schema-less type constraints."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_abi
import ort_graph
from ort_abi import (
    InputTypeError,
    KernelContext,
    KernelDefBuilder,
    KernelInfo,
    KernelRegistry,
    OutputMismatchError,
    OutputShape,
    load_kernel_library,
)

F32, F64, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64


def _custom_model(declared=None):
    """x[2, 3] -> my.ops::Double -> y -> Relu -> z -> Transpose -> out."""
    nodes = [helper.make_node("Double", ["x"], ["y"], name="dbl", domain="my.ops"),
             helper.make_node("Relu", ["y"], ["z"], name="relu"),
             helper.make_node("Transpose", ["z"], ["out"], name="tr")]
    vi = [helper.make_tensor_value_info("y", F32, declared)] if declared is not None else []
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [2, 3])],
                          [helper.make_tensor_value_info("out", F32, None)], value_info=vi)
    return ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                                     helper.make_opsetid("my.ops", 1)]))


class _Double:
    def __init__(self, state, info):
        pass

    def compute(self, ctx):
        x = ctx.input(0)
        ctx.output(0, (x.shape[0] * 2, *x.shape[1:]))[...] = np.concatenate([x, x])


def _double_def(constraints=()):
    b = KernelDefBuilder().op_type("Double").domain("my.ops").since_version(1).ep("CPUExecutionProvider")
    for name, types in constraints:
        b.type_constraint(name, types)
    return b.build()


def _double_shapes(api, node, shapes):
    s = shapes[0]
    if not s.has_shape:
        return None
    assert api.node_op_type(node) == "Double"
    return [OutputShape(s.elem_type, (s.dims[0] * 2 if s.dims[0] >= 0 else -1, *s.dims[1:]))]


def test_python_shape_func_resolves_through_the_custom_node():
    reg = KernelRegistry()
    reg.add_kernel_v2(_double_def(), _Double, shape_func=_double_shapes)
    m = _custom_model()
    report = ort_graph.resolve_shapes(m, output_shapes=ort_abi.output_shapes_hook([reg], m.opset_imports))
    assert m.graph.values["y"].shape == (4, 3) and m.graph.values["out"].shape == (3, 4)
    assert report.unknown == 0 and report.unresolved_node is None


def test_declared_value_info_resolves_the_nodes_after_a_custom_op():
    m = _custom_model(declared=[4, 3])
    report = ort_graph.resolve_shapes(m)
    assert (m.graph.values["z"].shape, m.graph.values["out"].shape) == ((4, 3), (3, 4))
    assert report.unresolved_node is None


def test_nothing_known_warns_naming_the_custom_node():
    m = _custom_model()
    with pytest.warns(ort_graph.ShapeResolutionWarning, match=r"node 'dbl' \(my.ops::Double\)"):
        report = ort_graph.resolve_shapes(m)
    assert report.unresolved_node == "dbl" and m.graph.values["out"].shape is None


def test_a_failing_shape_func_is_ignored_loudly(caplog):
    def broken(api, node, shapes):
        raise RuntimeError("boom")

    reg = KernelRegistry()
    reg.add_kernel_v2(_double_def(), _Double, shape_func=broken)
    m = _custom_model(declared=[4, 3])
    ort_graph.resolve_shapes(m, output_shapes=ort_abi.output_shapes_hook([reg], m.opset_imports))
    assert m.graph.values["out"].shape == (3, 4)  # the declaration still answers
    assert "output-shape callback" in caplog.text and "boom" in caplog.text


@pytest.mark.parametrize(("planned", "shape", "dtype", "problem"), [
    (((2, 3), F32), (3, 3), np.float32, r"shape \[3, 3\] but the plan has \[2, 3\]"),
    (((2, 3), F32), (1, 3), np.float32, r"shape \[1, 3\] but the plan has \[2, 3\]"),
    (((2, 3), F32), (2, 3, 1), np.float32, r"shape \[2, 3, 1\] but the plan has \[2, 3\]"),
    (((2, 3), F32), (2, 3), np.float64, "element type float64 but the plan has FLOAT"),
])
def test_output_requests_are_checked_against_the_plan(planned, shape, dtype, problem):
    ctx = KernelContext([np.zeros((2, 3), np.float32)], planned_outputs=[planned], node_name="n1")
    with pytest.raises(OutputMismatchError, match=f"output 0 requested with {problem}") as info:
        ctx.output(0, shape, dtype)
    assert info.value.node == "n1" and info.value.index == 0 and ctx.violations == [info.value]
    assert ctx.outputs == [None]


@pytest.mark.parametrize("planned", [(("batch", 3), F32), ((None, 3), 0), (None, F32), None])
def test_symbolic_or_unknown_planned_dims_accept_any_value(planned):
    ctx = KernelContext([np.zeros((2, 3), np.float32)], planned_outputs=[planned])
    assert ctx.output(0, (7, 3)).shape == (7, 3) and not ctx.violations


def test_planned_outputs_reads_the_resolved_graph():
    m = _custom_model(declared=[4, 3])
    ort_graph.resolve_shapes(m)
    node = next(n for n in m.graph.nodes if n.name == "tr")
    assert ort_abi.planned_outputs(node) == [((3, 4), F32)]


def test_a_float_kernel_of_a_custom_op_is_never_handed_double():
    reg = KernelRegistry()
    entry = reg.add_kernel_v2(_double_def([("T", [F32])]), _Double)
    kernel = entry.create_kernel(KernelInfo("dbl", "Double", "my.ops"))
    ok = KernelContext([np.ones((1, 2), np.float32)])
    kernel.compute(ok)
    assert ok.outputs[0].shape == (2, 2)
    for _ in range(2):  # an allowed combination is remembered; a refused one is refused every time
        with pytest.raises(InputTypeError, match=r"input 0 dtype DOUBLE \(type constraint 'T' allows FLOAT\)"):
            kernel.compute(KernelContext([np.ones((1, 2), np.float64)]))
        kernel.compute(KernelContext([np.ones((1, 2), np.float32)]))


@pytest.mark.parametrize(("constraints", "types", "bad"), [
    ([("T", [F32])], [F32, F32], None),
    ([("T", [F32])], [F32, I64], "input 1 dtype INT64"),
    ([("T0", [F32]), ("T1", [I64])], [F32, I64], None),
    ([("T0", [F32]), ("T1", [I64])], [F32, F32], "input 1 dtype FLOAT (type constraint 'T1' allows INT64)"),
    ([("T0", [F32]), ("T", [I64])], [F32, I64, I64], None),
    ([("T", [F32])], [0, F32], None),  # unknown types are not judged
])
def test_schema_less_constraints_bind_by_name(constraints, types, bad):
    found = ort_abi.check_input_types(_double_def(constraints), types, has_schema=False)
    assert found == bad if bad is None else bad in found


# ---- the C role ---------------------------------------------------------------------------------------
def test_c_shape_callback_reads_attributes_and_resolves(custom_ops_c):
    reg = KernelRegistry()
    load_kernel_library(custom_ops_c, reg)
    tile = next(e for e in reg if e.op_type == "TileRows")
    assert tile.shape_func is not None
    nodes = [helper.make_node("TileRows", ["x"], ["y"], name="t", domain="com.example", repeats=3),
             helper.make_node("Relu", ["y"], ["z"], name="r")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["n", 5])],
                          [helper.make_tensor_value_info("z", F32, None)])
    m = ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                                  helper.make_opsetid("com.example", 1)]))
    hook = ort_abi.output_shapes_hook([reg], m.opset_imports)
    with pytest.warns(ort_graph.ShapeResolutionWarning, match="node 't'"):  # 'n' is not overridden: -1
        ort_graph.resolve_shapes(m, output_shapes=hook)
    assert m.graph.values["z"].shape == (None, 5)
    ort_graph.resolve_shapes(m, {"n": 2}, output_shapes=hook)
    assert m.graph.values["z"].shape == (6, 5)


def test_a_version_2_library_still_loads(misbehaving_variant, fresh_statuses):
    reg = KernelRegistry()
    lib = load_kernel_library(misbehaving_variant("LIBRARY_V2"), reg)
    assert lib.abi_version == 2 and len(reg) > 0 and all(e.shape_func is None for e in reg)


def test_find_picks_the_kernel_whose_schema_less_constraints_the_inputs_meet():
    reg = KernelRegistry()
    f32 = reg.add_kernel_v2(_double_def([("T", [F32])]), _Double)
    f64 = reg.add_kernel_v2(_double_def([("T", [F64])]), _Double)
    find = lambda types: reg.find("Double", "my.ops", 1, "CPUExecutionProvider", input_types=types)  # noqa: E731
    assert find([F32]) is f32 and find([F64]) is f64 and find([I64]) is None
