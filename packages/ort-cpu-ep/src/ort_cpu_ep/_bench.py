"""Hot-op timings of the numpy kernels next to onnxruntime's CPU provider (prints, never asserts).

    python -m ort_cpu_ep._bench [--repeat N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

import ort_graph

from .ops._interp import run_graph


def _one_node(op: str, feeds: dict[str, np.ndarray], n_out: int = 1, opset: int = 23, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, list(feeds), [f"y{i}" for i in range(n_out)], **attrs)
    g = helper.make_graph([node], op, [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                                       for k, v in feeds.items()],
                          [helper.make_tensor_value_info(f"y{i}", 0, None) for i in range(n_out)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def _best(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def cases() -> list[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    out = []

    def add(label, op, feeds, n_out=1, **attrs):
        out.append((label, _one_node(op, feeds, n_out, **attrs), feeds))

    add("MatMul 1x128x1024 @ 1024x4096", "MatMul", {"a": f(1, 128, 1024), "b": f(1024, 4096)})
    add("Gemm 256x1024 @ 1024x1024 + bias", "Gemm", {"a": f(256, 1024), "b": f(1024, 1024), "c": f(1024)})
    add("Conv 1x64x56x56 k3 64", "Conv", {"x": f(1, 64, 56, 56), "w": f(64, 64, 3, 3)}, pads=[1, 1, 1, 1])
    add("Softmax 16x128x128", "Softmax", {"x": f(16, 128, 128)})
    add("LayerNormalization 128x1024", "LayerNormalization", {"x": f(128, 1024), "s": f(1024), "b": f(1024)}, n_out=1)
    add("Add broadcast 64x128x1024 + 1024", "Add", {"a": f(64, 128, 1024), "b": f(1024)})
    add("Attention 1x16x256x64 causal", "Attention", {"q": f(1, 16, 256, 64), "k": f(1, 16, 256, 64),
                                                      "v": f(1, 16, 256, 64)}, is_causal=1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ort_cpu_ep._bench", description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - onnxruntime is a test-only peer
        ort = None
    print(f"{'op':40s} {'numpy ms':>10s} {'onnxruntime ms':>15s}")
    for label, proto, feeds in cases():
        model = ort_graph.from_proto(proto)
        ours = _best(lambda m=model, fe=feeds: run_graph(m.graph, fe, opsets=m.opset_imports), args.repeat)
        theirs = float("nan")
        if ort is not None:
            sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
            theirs = _best(lambda s=sess, fe=feeds: s.run(None, fe), args.repeat)
        print(f"{label:40s} {ours * 1e3:10.2f} {theirs * 1e3:15.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
