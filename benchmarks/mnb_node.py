"""One MatMulNBits node: ort-cpu-ep's C kernel vs onnxruntime's CPU kernel, interleaved, same thread count.

    python benchmarks/mnb_node.py [--threads 1] [--repeat 15] [--shapes 2048x2048,2048x6144,6144x2048] [--m 1,128]

Weights are 4-bit, block 32, with zero points, packed by onnxruntime's own quantizer (`_int4.quantize_int4`).
Prints the best time of each and the ratio ours / onnxruntime (the ratio is what to read: the machine is shared).
The C kernel is called directly (ort_abi.KernelContext) with the same inputs onnxruntime gets; that Python call
costs ~70 us against ~8 us for onnxruntime's `run`, so `kernel ratio` also compares the times less those of a
64 x 64 node of the same M and accuracy level (each side's own fixed cost).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _int4 import quantize_int4  # noqa: E402

import ort_abi  # noqa: E402
from ort_cpu_ep import c_kernels, intra_op_thread_scope  # noqa: E402

MS = "com.microsoft"


def _node_model(M: int, K: int, N: int, level: int, rng) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    w = (rng.standard_normal((K, N)) * 0.05).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["A", "W"], ["Y"], name="mm")], "g",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [M, K])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [M, N])],
                          initializer=[onnx.numpy_helper.from_array(w, "W")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    proto.ir_version = 10
    return quantize_int4(proto, 32, level), {"A": rng.standard_normal((M, K)).astype(np.float32)}


def _c_runner(model: onnx.ModelProto, feeds: dict[str, np.ndarray]):
    registry = c_kernels.c_registry()
    assert registry is not None, c_kernels.status()
    node = model.graph.node[0]
    entry = registry.find("MatMulNBits", MS, 1, "CPUExecutionProvider", input_types=[1, 2, 1, 2, 0, 0])
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    info = ort_abi.KernelInfo("/mnb", "MatMulNBits", input_count=4, output_types=(TensorProto.FLOAT,), attributes=attrs)
    kernel = entry.create_kernel(info)
    inputs = [feeds["A"], *(inits[n] for n in node.input[1:])]

    def run():
        ctx = ort_abi.KernelContext(inputs, output_types=[TensorProto.FLOAT])
        kernel.compute(ctx)
        return ctx.outputs[0]
    return run


def _ort_runner(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feeds)[0]


def measure(M: int, K: int, N: int, level: int, threads: int, repeat: int) -> tuple[float, float, float]:
    """(ours s, onnxruntime s, max |difference| relative to max |y|): best of `repeat`, interleaved."""
    model, feeds = _node_model(M, K, N, level, np.random.default_rng(M + K + N + level))
    ours, theirs = _c_runner(model, feeds), _ort_runner(model, feeds, threads)
    a, b = ours(), theirs()
    diff = float(np.abs(a - b).max() / np.abs(b).max())
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, fn in enumerate((ours, theirs)):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return best[0], best[1], diff


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--shapes", default="2048x2048,2048x6144,6144x2048", help="KxN,...")
    p.add_argument("--m", default="1,128")
    p.add_argument("--levels", default="0,4")
    args = p.parse_args(argv)
    print(f"{'M':>4s} {'K':>5s} {'N':>5s} acc {'ours ms':>8s} {'ort ms':>8s} {'ratio':>6s} {'kernel ratio':>12s} "
          f"{'rel diff':>9s}")
    with intra_op_thread_scope(args.threads):
        for M in map(int, args.m.split(",")):
            for level in map(int, args.levels.split(",")):
                fixed_ours, fixed_theirs, _ = measure(M, 64, 64, level, args.threads, args.repeat)
                for shape in args.shapes.split(","):
                    K, N = map(int, shape.split("x"))
                    ours, theirs, diff = measure(M, K, N, level, args.threads, args.repeat)
                    kernel = (ours - fixed_ours) / max(theirs - fixed_theirs, 1e-9)
                    print(f"{M:4d} {K:5d} {N:5d} {level:3d} {ours * 1e3:8.3f} {theirs * 1e3:8.3f} "
                          f"{ours / theirs:6.2f} {kernel:12.2f} {diff:9.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
