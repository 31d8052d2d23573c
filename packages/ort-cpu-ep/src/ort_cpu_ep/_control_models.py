"""Small control-flow models for tests (re-exported by `ort_cpu_ep.testing`): Loops with any trip count (a
graph input, so one session runs 2**40 iterations and then 3), nested Loops, a Loop inside If, a Scan, and
an empty Loop body."""

from __future__ import annotations

from onnx import ModelProto, TensorProto, helper

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
KINDS = ("loop", "loop_in_loop", "loop_in_if", "empty_body", "scan")


def _vi(name: str, dtype: int, shape: list | None) -> object:
    return helper.make_tensor_value_info(name, dtype, shape)


def _loop_body(name: str, inner: bool, scan: bool, empty: bool) -> object:
    """i, cond, v -> cond, v + 1 (or v + M when `inner`: a Loop of M iterations inside), [v + 1 per iteration]."""
    ins = [_vi(f"{name}_i", I64, []), _vi(f"{name}_cond", B, []), _vi(f"{name}_v", F, [4])]
    if empty:  # no node at all: the body's outputs are its inputs
        return helper.make_graph([], name, ins, [_vi(f"{name}_cond", B, []), _vi(f"{name}_v", F, [4])])
    nodes = [helper.make_node("Identity", [f"{name}_cond"], [f"{name}_cond_out"], name=f"{name}/cond")]
    if inner:
        nodes.append(helper.make_node("Loop", ["M", "", f"{name}_v"], [f"{name}_v_out"], name=f"{name}/inner",
                                      body=_loop_body(f"{name}_inner", False, False, False)))
    else:
        nodes.append(helper.make_node("Add", [f"{name}_v", "one"], [f"{name}_v_out"], name=f"{name}/add"))
    outs = [_vi(f"{name}_cond_out", B, []), _vi(f"{name}_v_out", F, [4])]
    if scan:
        nodes.append(helper.make_node("Identity", [f"{name}_v_out"], [f"{name}_s"], name=f"{name}/scan"))
        outs.append(_vi(f"{name}_s", F, [4]))
    return helper.make_graph(nodes, name, ins, outs)


def control_flow_model(kind: str, *, scan: bool = False, opset: int = 17) -> ModelProto:
    """Inputs x: float[4] and M: int64[] (the trip count; for "scan", seq: float[L, 4] instead). Output y:
    x + M ("loop", "loop_in_if"), x + M*M ("loop_in_loop"), x ("empty_body"), x + sum(seq) ("scan"); with
    `scan` also `scans` [M, 4] (the value after each iteration; "scan" always has it)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {KINDS!r}")
    if scan and kind == "empty_body":
        raise ValueError("an empty Loop body has no scan output (its outputs are its inputs): scan=False")
    inits = [helper.make_tensor("one", F, [], [1.0]), helper.make_tensor("true", B, [], [True])]
    outputs = [_vi("y", F, [4])] + ([_vi("scans", F, ["iterations", 4])] if scan or kind == "scan" else [])
    if kind == "scan":
        body = helper.make_graph(
            [helper.make_node("Add", ["st", "xt"], ["st_out"], name="scan_body/add"),
             helper.make_node("Identity", ["st_out"], ["yt"], name="scan_body/out")],
            "scan_body", [_vi("st", F, [4]), _vi("xt", F, [4])], [_vi("st_out", F, [4]), _vi("yt", F, [4])])
        nodes = [helper.make_node("Scan", ["x", "seq"], ["y", "scans"], name="scan", num_scan_inputs=1, body=body)]
        inputs = [_vi("x", F, [4]), _vi("seq", F, ["L", 4])]
    else:
        body = _loop_body("body", kind == "loop_in_loop", scan, kind == "empty_body")
        loop_outs = ["y"] + (["scans"] if scan else [])
        shapes = {"y": [4], "scans": ["iterations", 4]}
        if kind == "loop_in_if":
            loop = helper.make_node("Loop", ["M", "true", "x"], ["t_" + o for o in loop_outs], name="if/loop", body=body)
            then = helper.make_graph([loop], "then", [], [_vi("t_" + o, F, shapes[o]) for o in loop_outs])
            inits.append(helper.make_tensor("axis0", I64, [1], [0]))
            other = helper.make_graph(  # never taken: the condition is the constant true
                [helper.make_node("Identity", ["x"], ["e_y"], name="if/else_y"),
                 helper.make_node("Unsqueeze", ["x", "axis0"], ["e_scans"], name="if/else_scans")][:len(loop_outs)],
                "else", [], [_vi("e_" + o, F, shapes[o]) for o in loop_outs])
            nodes = [helper.make_node("If", ["true"], loop_outs, name="if", then_branch=then, else_branch=other)]
        else:
            nodes = [helper.make_node("Loop", ["M", "true", "x"], loop_outs, name="loop", body=body)]
        inputs = [_vi("x", F, [4]), _vi("M", I64, [])]
    g = helper.make_graph(nodes, f"control_{kind}", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


__all__ = ["KINDS", "control_flow_model"]
