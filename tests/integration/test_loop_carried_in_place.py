"""Loop-carried state handed to the next iteration as a view of the body's C arena (`BodyPlan.in_place`): only
where the carried input is dead before its output's block is written; the values match onnxruntime either way,
and what leaves the Loop is no view of the arena (a later run does not change an earlier run's results)."""

import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto as TP
from onnx import helper

import ort_graph
from ort_cpu_ep.ops._body_plan import BodyPlan
from ort_session import PRE_ALLOCATE, InferenceSession

N = 16


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def carried_loop(read_after: bool, trip: int = 6):
    """v_out = v * w + b carried; with `read_after`, d = v - v_out (v read after v_out is written) is a scan output."""
    nodes = [helper.make_node("Identity", ["cond"], ["cond_out"], name="b/cond"),
             helper.make_node("Mul", ["v", "w"], ["m"], name="b/mul"),
             helper.make_node("Add", ["m", "bias"], ["v_out"], name="b/add")]
    outs = [_vi("cond_out", TP.BOOL, []), _vi("v_out", TP.FLOAT, [1, N])]
    if read_after:
        nodes.append(helper.make_node("Sub", ["v", "v_out"], ["d"], name="b/sub"))
        outs.append(_vi("d", TP.FLOAT, [1, N]))
    body = helper.make_graph(nodes, "body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []),
                                             _vi("v", TP.FLOAT, [1, N])], outs)
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("M", TP.INT64, [], [trip]), helper.make_tensor("T", TP.BOOL, [], [True]),
             helper.make_tensor("w", TP.FLOAT, [1, N], rng.uniform(0.5, 1.5, N).astype(np.float32).tolist()),
             helper.make_tensor("bias", TP.FLOAT, [1, N], rng.uniform(-1, 1, N).astype(np.float32).tolist())]
    loop_outs = ["y", "ds"] if read_after else ["y"]
    graph_outs = [_vi("y", TP.FLOAT, [1, N])] + ([_vi("ds", TP.FLOAT, [trip, 1, N])] if read_after else [])
    g = helper.make_graph([helper.make_node("Loop", ["M", "T", "x"], loop_outs, name="loop", body=body)], "carried",
                          [_vi("x", TP.FLOAT, [1, N])], graph_outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.usefixtures("cpu_c_kernels")
@pytest.mark.parametrize("read_after", [False, True])
def test_in_place_handoff_only_where_the_carried_input_is_dead_before_its_output_is_written(read_after):
    model = ort_graph.from_proto(carried_loop(read_after))
    ort_graph.resolve_shapes(model, {})
    body = model.graph.nodes[0].attr("body")
    plan = BodyPlan(body, model.opset_imports, True)
    try:
        assert plan.layout is not None and "v_out" in plan.layout.blocks
        # cond_out is made by the step that reads cond: never in place; v_out only when nothing reads v after it
        assert plan.in_place((("cond", 0), ("v", 1))) == (frozenset() if read_after else frozenset({1}))
    finally:
        plan.release()


@pytest.mark.usefixtures("cpu_c_kernels")
@pytest.mark.parametrize("options", [{}, {PRE_ALLOCATE: "1"}])
@pytest.mark.parametrize("read_after", [False, True])
def test_carried_loops_match_onnxruntime_and_their_results_outlive_the_arena(read_after, options):
    proto = carried_loop(read_after)
    rng = np.random.default_rng(1)
    feeds_a, feeds_b = ({"x": rng.standard_normal((1, N)).astype(np.float32)} for _ in range(2))
    ref = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(proto.SerializeToString(), dict(options), providers=["CPUExecutionProvider"])
    first = sess.run(None, feeds_a)
    kept = [np.array(v) for v in first]
    second = sess.run(None, feeds_b)  # the same arena: the first run's outputs must not change with it
    for got, want in ((first, ref.run(None, feeds_a)), (second, ref.run(None, feeds_b)), (first, kept)):
        for g, r in zip(got, want, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
