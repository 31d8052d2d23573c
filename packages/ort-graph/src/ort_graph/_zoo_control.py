"""Control-flow models in the shapes `torch.onnx.export` writes, with their weights inside the bodies.

- `if_weights_proto`: an If on a tensor condition (`ReduceSum(x) > 0`) whose branches each hold a [hidden, hidden]
  weight, one as a Constant node and one as a branch initializer (a VAD model keeps all its weights so).
- `loop_proto`: a Loop with a constant trip count and no early exit, carrying a state through a MatMul with a
  Constant weight and a branch-local bias, and emitting a scan output per iteration.
- `scan_proto`: a Scan (opset 9+) over a static sequence length, its weight a body initializer.
- `nested_proto`: a Loop whose body holds an If with a weight in each branch (subgraphs nested two deep).
- `early_exit_loop_proto`: a Loop whose body computes its condition (a data-dependent trip count).

Inputs have the symbolic `batch` dim; bodies declare their values with it, as exporters do; the graph
outputs name each dim they could not work out (`ys_dim_0`).
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

_F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits) -> ModelProto:
    graph = helper.make_graph(nodes, "control_flow", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _weight(rng: np.random.Generator, n: int, scale: float = 0.1) -> np.ndarray:
    return (rng.standard_normal((n, n)) * scale).astype(np.float32)


def _vi(name: str, shape, dtype: int = _F):
    return helper.make_tensor_value_info(name, dtype, shape)


def _out(name: str, rank: int):
    """A graph output as exporters declare one whose dims they could not work out: named per axis."""
    return helper.make_tensor_value_info(name, _F, [f"{name}_dim_{i}" for i in range(rank)])


def _condition(x: str, prefix: str) -> list:
    return [helper.make_node("ReduceSum", [x], [f"{prefix}sum"], keepdims=0, name=f"/{prefix}ReduceSum"),
            helper.make_node("Greater", [f"{prefix}sum", "zero"], [f"{prefix}cond"], name=f"/{prefix}Greater")]


def _loop_io(n) -> tuple[list, list]:
    ins = [_vi("iter", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("h_in", ["batch", n])]
    outs = [_vi("cond_out", [], TensorProto.BOOL), _vi("h_out", ["batch", n]), _vi("y_t", ["batch", n])]
    return ins, outs


def if_weights_proto(hidden: int = 256, seed: int = 0) -> ModelProto:
    rng = np.random.default_rng(seed)
    w_then, w_else = _weight(rng, hidden), _weight(rng, hidden)
    then_b = helper.make_graph(
        [helper.make_node("Constant", [], ["then_w"], value=numpy_helper.from_array(w_then, "then_w"),
                          name="/If/then/Constant"),
         helper.make_node("MatMul", ["x", "then_w"], ["then_y"], name="/If/then/MatMul")],
        "then_branch", [], [_vi("then_y", ["batch", hidden])])
    else_b = helper.make_graph(
        [helper.make_node("MatMul", ["x", "else_w"], ["else_mm"], name="/If/else/MatMul"),
         helper.make_node("Relu", ["else_mm"], ["else_y"], name="/If/else/Relu")],
        "else_branch", [], [_vi("else_y", ["batch", hidden])], initializer=[numpy_helper.from_array(w_else, "else_w")])
    nodes = _condition("x", "") + [helper.make_node("If", ["cond"], ["y"], then_branch=then_b, else_branch=else_b,
                                                    name="/If")]
    return _model(nodes, [_vi("x", ["batch", hidden])], [_out("y", 2)],
                  [numpy_helper.from_array(np.array(0, np.float32), "zero")])


def loop_proto(hidden: int = 64, trip: int = 5, seed: int = 1) -> ModelProto:
    rng = np.random.default_rng(seed)
    ins, outs = _loop_io(hidden)
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(_weight(rng, hidden), "w"),
                          name="/Loop/body/Constant"),
         helper.make_node("MatMul", ["h_in", "w"], ["mm"], name="/Loop/body/MatMul"),
         helper.make_node("Add", ["mm", "bias"], ["pre"], name="/Loop/body/Add"),
         helper.make_node("Tanh", ["pre"], ["h_out"], name="/Loop/body/Tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="/Loop/body/Identity"),
         helper.make_node("Relu", ["h_out"], ["y_t"], name="/Loop/body/Relu")],
        "loop_body", ins, outs,
        initializer=[numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "bias")])
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["h", "ys"], body=body, name="/Loop")]
    return _model(nodes, [_vi("x", ["batch", hidden])], [_out("h", 2), _out("ys", 3)],
                  [numpy_helper.from_array(np.array(trip, np.int64), "M")])


def scan_proto(hidden: int = 32, seed: int = 2) -> ModelProto:
    rng = np.random.default_rng(seed)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "w"], ["a"], name="/Scan/body/MatMul"),
         helper.make_node("Add", ["a", "s_in"], ["s_sum"], name="/Scan/body/Add"),
         helper.make_node("Tanh", ["s_sum"], ["s_out"], name="/Scan/body/Tanh"),
         helper.make_node("Identity", ["s_out"], ["y_t"], name="/Scan/body/Identity")],
        "scan_body", [_vi("s_in", ["batch", hidden]), _vi("x_t", ["batch", hidden])],
        [_vi("s_out", ["batch", hidden]), _vi("y_t", ["batch", hidden])],
        initializer=[numpy_helper.from_array(_weight(rng, hidden), "w")])
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_output_axes=[1], name="/Scan")]
    return _model(nodes, [_vi("s0", ["batch", hidden]), _vi("xs", ["batch", "sequence", hidden])],
                  [_out("s", 2), _out("ys", 3)], [])


def nested_proto(hidden: int = 32, trip: int = 3, seed: int = 3) -> ModelProto:
    rng = np.random.default_rng(seed)

    def branch(name: str, scale: float):
        return helper.make_graph(
            [helper.make_node("MatMul", ["h_in", f"{name}_w"], [f"{name}_y"], name=f"/Loop/body/If/{name}/MatMul")],
            name, [], [_vi(f"{name}_y", ["batch", hidden])],
            initializer=[numpy_helper.from_array(_weight(rng, hidden, scale), f"{name}_w")])

    ins, outs = _loop_io(hidden)
    body = helper.make_graph(
        _condition("h_in", "body_") + [
            helper.make_node("If", ["body_cond"], ["hb"], then_branch=branch("then", 0.2),
                             else_branch=branch("else", -0.2), name="/Loop/body/If"),
            helper.make_node("Tanh", ["hb"], ["h_out"], name="/Loop/body/Tanh"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="/Loop/body/Identity"),
            helper.make_node("Identity", ["h_out"], ["y_t"], name="/Loop/body/Identity_1")],
        "loop_body", ins, outs)
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["h", "ys"], body=body, name="/Loop")]
    return _model(nodes, [_vi("x", ["batch", hidden])], [_out("h", 2), _out("ys", 3)],
                  [numpy_helper.from_array(np.array(trip, np.int64), "M"),
                   numpy_helper.from_array(np.array(0, np.float32), "zero")])


def early_exit_loop_proto(hidden: int = 8, trip: int = 10) -> ModelProto:
    ins, outs = _loop_io(hidden)
    body = helper.make_graph(
        [helper.make_node("Add", ["h_in", "one"], ["h_out"], name="/Loop/body/Add"),
         helper.make_node("ReduceSum", ["h_out"], ["total"], keepdims=0, name="/Loop/body/ReduceSum"),
         helper.make_node("Less", ["total", "limit"], ["cond_out"], name="/Loop/body/Less"),
         helper.make_node("Identity", ["h_out"], ["y_t"], name="/Loop/body/Identity")],
        "loop_body", ins, outs,
        initializer=[numpy_helper.from_array(np.ones(hidden, np.float32), "one"),
                     numpy_helper.from_array(np.array(5.0 * hidden, np.float32), "limit")])
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["h", "ys"], body=body, name="/Loop")]
    return _model(nodes, [_vi("x", ["batch", hidden])], [_out("h", 2), _out("ys", 3)],
                  [numpy_helper.from_array(np.array(trip, np.int64), "M")])
