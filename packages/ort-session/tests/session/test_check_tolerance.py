"""`ortrun run --check` judges each output at a tolerance it names: float arithmetic, or one int8 step of the
output's range downstream of quantized activations; a wrong quantized result still fails. And the int4
accuracy_level 4 export generates onnxruntime's greedy tokens."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_cpu_ep.ops.ops_extra_quant import dequantize_weight
from ort_session import InferenceSession
from ort_session._check import FLOAT_TOLERANCE, judge_outputs, output_tolerance, quantizing_ancestors
from ort_session.cli import main

MS = "com.microsoft"
K, N, BS = 128, 24, 32


def _nbits_model(accuracy_level: int, zero_points: bool = True):
    rng = np.random.default_rng(7)
    kb = K // BS
    b = rng.integers(0, 256, (N, kb, BS // 2), dtype=np.uint8)
    scales = (rng.random((N, kb)) * 0.1 + 0.01).astype(np.float32)
    zp = rng.integers(0, 256, (N, (kb * 4 + 7) // 8), dtype=np.uint8)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales.reshape(-1), "S")]
    names = ["A", "B", "S"]
    if zero_points:
        inits.append(numpy_helper.from_array(zp.reshape(-1), "Z"))
        names.append("Z")
    nodes = [helper.make_node("MatMulNBits", names, ["Y"], name="/proj/MatMul_Q4", domain=MS, K=K, N=N, bits=4,
                              block_size=BS, accuracy_level=accuracy_level),
             helper.make_node("ArgMax", ["Y"], ["ids"], name="/argmax", axis=-1, keepdims=0),
             helper.make_node("Relu", ["A"], ["plain"], name="/relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, N]),
                               helper.make_tensor_value_info("ids", TensorProto.INT64, [2]),
                               helper.make_tensor_value_info("plain", TensorProto.FLOAT, [2, K])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    return model, (b, scales, zp if zero_points else None)


def test_each_output_is_traced_to_the_op_that_rounds_its_activations():
    model, _ = _nbits_model(4)
    g = ort_graph.from_proto(model).graph
    found = quantizing_ancestors(g, ["Y", "ids", "plain"])
    assert found["Y"] == ("/proj/MatMul_Q4", "MatMulNBits accuracy_level=4: int8 activations per block of 32")
    assert found["ids"] == found["Y"]  # through the ArgMax
    assert found["plain"] is None
    # accuracy_level 0 dequantizes the weights and multiplies in float: nothing is rounded at run time
    assert quantizing_ancestors(ort_graph.from_proto(_nbits_model(0)[0]).graph, ["Y"])["Y"] is None


def test_tolerances_say_where_they_come_from():
    ref = np.array([[3.81, -1.0]], np.float32)
    src = ("/proj/MatMul_Q4", "MatMulNBits accuracy_level=4: int8 activations per block of 32")
    quantized = output_tolerance(ref, src, None)
    assert quantized.value == pytest.approx(FLOAT_TOLERANCE + 3.81 / 127, rel=1e-6)
    assert "one int8 step" in quantized.reason and "/proj/MatMul_Q4" in quantized.reason
    assert output_tolerance(ref, None, None).value == FLOAT_TOLERANCE
    assert output_tolerance(np.array([1, 2]), None, None).value == 0.0
    assert output_tolerance(ref, src, 1e-6).value == 1e-6  # --tolerance is the user's word for every output


def _wrong_zero_points(a, weights):
    """What a kernel that ignored the packed zero points (took the default 8) would compute."""
    b, scales, _ = weights
    return a @ dequantize_weight(b, scales, None, K=K, N=N, bits=4, block_size=BS).T


def test_a_correct_quantized_result_passes_and_a_wrong_one_fails():
    ort = pytest.importorskip("onnxruntime")
    model, weights = _nbits_model(4)
    a = np.random.default_rng(1).standard_normal((2, K)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"A": a})
    g = ort_graph.from_proto(model).graph
    ours = InferenceSession(model.SerializeToString()).run(None, {"A": a})
    lines: list[str] = []
    assert judge_outputs(["Y", "ids", "plain"], ours, ref, g, None, lines.append), lines
    # one activation a whole int8 step away (a rounding that went the other way) moves Y by well under a step
    # of its range: still a pass
    step = float(np.abs(a[0, :BS]).max()) / 127
    shifted = a.copy()
    shifted[0, 1] += step
    moved = InferenceSession(model.SerializeToString()).run(None, {"A": shifted})[0]
    assert judge_outputs(["Y"], [moved], ref[:1], g, None, lines.append)
    # zero points ignored: off by a large part of the range, FAILED, with the reason in the line
    lines.clear()
    wrong = _wrong_zero_points(a, weights).astype(np.float32)
    assert not judge_outputs(["Y"], [wrong], ref[:1], g, None, lines.append)
    assert "> tolerance" in lines[0] and "one int8 step" in lines[0]


def test_nan_against_nan_is_equal_and_against_a_number_is_not():
    g = ort_graph.from_proto(_nbits_model(0)[0]).graph
    ref = np.array([np.nan, np.inf, 1.0], np.float32)
    assert judge_outputs(["plain"], [ref.copy()], [ref], g, None, lambda _: None)
    assert not judge_outputs(["plain"], [np.array([0.0, np.inf, 1.0], np.float32)], [ref], g, None, lambda _: None)


@pytest.mark.parametrize("export", ["genai_int4_cpu", "genai_int8_cpu"])
def test_check_on_quantized_exports_names_each_tolerance(shared_models, export, capsys):
    pytest.importorskip("onnxruntime")
    path = shared_models / "llama_l4" / export / "model.onnx"
    assert main(["run", str(path), "--check", "--dim", "past_sequence_length=3"]) == 0
    out = capsys.readouterr().out
    logits = next(line for line in out.splitlines() if line.strip().startswith("check logits"))
    assert "one int8 step" in logits and "MatMulNBits accuracy_level=4" in logits
    assert "check PASSED" in out


def test_check_with_an_explicit_tolerance_holds_every_output_to_it(shared_models, capsys):
    pytest.importorskip("onnxruntime")
    path = shared_models / "llama_l4" / "genai_int4_cpu" / "model.onnx"
    assert main(["run", str(path), "--check", "--tolerance", "1e-12", "--dim", "past_sequence_length=3"]) == 1
    out = capsys.readouterr().out
    assert "check FAILED" in out and "(--tolerance)" in out


def _ort_greedy(path, prompt, steps, genai_feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ids, total, past, out = np.array([prompt], np.int64), len(prompt), None, []
    for _ in range(steps):
        res = dict(zip(names, sess.run(None, genai_feeds(ids, total, past))))
        tok = int(np.argmax(res["logits"][0, -1]))
        out.append(tok)
        ids, total, past = np.array([[tok]], np.int64), total + 1, res
    return out


def test_int4_accuracy_level_4_export_generates_onnxruntimes_greedy_tokens(shared_models, genai_feeds):
    """The genai builder's CPU int4 default (accuracy_level 4, int8 activations): our C kernels pick the tokens
    onnxruntime picks, step for step."""
    pytest.importorskip("onnxruntime")
    from ort_session._generate import generate, generation_max_shapes

    path = shared_models / "llama_l4" / "genai_int4_cpu" / "model.onnx"
    prompt, steps = [1, 5, 9, 33, 100], 24
    maxes = generation_max_shapes(ort_graph.load(str(path)), len(prompt), len(prompt) + steps)
    sess = InferenceSession(str(path), {"intra_op_num_threads": 1, "max_shapes": maxes,
                                        "session.pre_allocate_execution_buffers": "1"})
    ours = list(generate(sess, prompt, max_new_tokens=steps))
    assert ours == _ort_greedy(path, prompt, steps, genai_feeds)
