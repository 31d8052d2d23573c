"""A model shaped like a streaming voice-activity detector (silero-VAD's structure, random weights): one 512-sample
window per call, an If on the int64 sample rate (a 16 kHz branch, an 8 kHz one that doubles the gain), an STFT as a
Conv1d (258 filters of 256 taps, stride 128) and its magnitude, three Conv1d + Relu encoder layers, two LSTM layers of
hidden 64 and 128 whose h / c state comes in and goes out (the caller carries it to the next window), and a
MatMul + Sigmoid head averaged over the frames. Built with onnx.helper; the benchmark's `speech-like` row."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
WINDOW = 512
HIDDEN = (64, 128)


def _w(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float) -> TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _branch(name: str, gain: float) -> helper.GraphProto:
    out = helper.make_tensor_value_info(f"{name}_x", F, [1, 1, WINDOW])
    gain_t = numpy_helper.from_array(np.array(gain, np.float32), f"{name}_gain")
    return helper.make_graph([helper.make_node("Mul", ["x3", f"{name}_gain"], [f"{name}_x"])], name, [], [out],
                             initializer=[gain_t])


def speech_model(seed: int = 0) -> ModelProto:
    rng = np.random.default_rng(seed)
    inits = [_w(rng, "stft", (258, 1, 256), 0.05), numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array(16000, np.int64), "sr16k")]
    nodes = [helper.make_node("Unsqueeze", ["input", "ax1"], ["x3"]),
             helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["xs"], then_branch=_branch("k16", 1.0), else_branch=_branch("k8", 2.0)),
             helper.make_node("Conv", ["xs", "stft"], ["spec"], strides=[128], pads=[64, 64]),  # [1, 258, 4]
             helper.make_node("Split", ["spec"], ["re", "im"], axis=1),
             helper.make_node("Mul", ["re", "re"], ["re2"]), helper.make_node("Mul", ["im", "im"], ["im2"]),
             helper.make_node("Add", ["re2", "im2"], ["pow"]), helper.make_node("Sqrt", ["pow"], ["mag"])]
    prev, width = "mag", 129
    for i, (out_ch, stride) in enumerate(((128, 1), (64, 2), (64, 1))):
        inits += [_w(rng, f"enc{i}_w", (out_ch, width, 3), 1 / np.sqrt(3 * width)), _w(rng, f"enc{i}_b", (out_ch,), 0.1)]
        nodes += [helper.make_node("Conv", [prev, f"enc{i}_w", f"enc{i}_b"], [f"enc{i}"], pads=[1, 1], strides=[stride]),
                  helper.make_node("Relu", [f"enc{i}"], [f"enc{i}_r"])]
        prev, width = f"enc{i}_r", out_ch
    nodes.append(helper.make_node("Transpose", [prev], ["seq"], perm=[2, 0, 1]))  # [frames, 1, 64]
    prev = "seq"
    ins = [helper.make_tensor_value_info("input", F, [1, WINDOW]), helper.make_tensor_value_info("sr", TensorProto.INT64, [])]
    outs = []
    for i, h in enumerate(HIDDEN):
        inits += [_w(rng, f"lstm{i}_w", (1, 4 * h, width), 1 / np.sqrt(width)), _w(rng, f"lstm{i}_r", (1, 4 * h, h), 1 / np.sqrt(h)),
                  _w(rng, f"lstm{i}_b", (1, 8 * h), 0.1)]
        ins += [helper.make_tensor_value_info(f"h{i}", F, [1, 1, h]), helper.make_tensor_value_info(f"c{i}", F, [1, 1, h])]
        outs += [helper.make_tensor_value_info(f"h{i}_out", F, [1, 1, h]), helper.make_tensor_value_info(f"c{i}_out", F, [1, 1, h])]
        nodes += [helper.make_node("LSTM", [prev, f"lstm{i}_w", f"lstm{i}_r", f"lstm{i}_b", "", f"h{i}", f"c{i}"],
                                   [f"y{i}", f"h{i}_out", f"c{i}_out"], hidden_size=h),
                  helper.make_node("Squeeze", [f"y{i}", "ax1"], [f"y{i}s"])]  # [frames, 1, h]
        prev, width = f"y{i}s", h
    inits += [_w(rng, "head_w", (width, 1), 1 / np.sqrt(width)), _w(rng, "head_b", (1,), 0.1)]
    nodes += [helper.make_node("Relu", [prev], ["dec"]), helper.make_node("MatMul", ["dec", "head_w"], ["logit0"]),
              helper.make_node("Add", ["logit0", "head_b"], ["logit"]), helper.make_node("Sigmoid", ["logit"], ["frame_p"]),
              helper.make_node("ReduceMean", ["frame_p"], ["prob"], axes=[0], keepdims=0)]  # [1, 1]
    outs.insert(0, helper.make_tensor_value_info("prob", F, [1, 1]))
    graph = helper.make_graph(nodes, "speech_like", ins, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def speech_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"input": (rng.standard_normal((1, WINDOW)) * 0.3).astype(np.float32), "sr": np.array(16000, np.int64)}
    for i, h in enumerate(HIDDEN):
        feeds[f"h{i}"] = (rng.standard_normal((1, 1, h)) * 0.5).astype(np.float32)
        feeds[f"c{i}"] = (rng.standard_normal((1, 1, h)) * 0.5).astype(np.float32)
    return feeds
