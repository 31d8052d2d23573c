"""Host cost of small nodes (a decode step's Shape, Gather, Cast, ReduceSum, Mul ...): a chain of 30 nodes of
one op on small tensors through ort_session and through onnxruntime, interleaved in one process, 1 thread.

    python benchmarks/small_nodes.py [--ops Mul,Cast,...] [--repeat 7] [--split] [--profile Mul]

Prints each side's best time per node (run time / 30) and the ratio ours / onnxruntime (the ratio is what to
read: the machine is shared). `--split` runs the chains once more with `NumpyKernel.compute` and
`KernelContext.output` timed (perf_counter around each call, so slightly inflated): the time inside the numpy
kernel (ort-cpu-ep), the part of it spent in `ctx.output` (ort-abi and the session's output allocator), and
the rest of the step (the session's executor). `--profile OP` prints cProfile's top functions for one chain,
per node call. Run by hand, not by `run.py`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

import ort_session

NODES = 30
OPS = ("Mul", "Add", "Sub", "Cast", "ReduceSum", "Gather", "ShapeGather", "Unsqueeze", "Concat")


def chain(op: str) -> tuple[bytes, np.ndarray]:
    """A model of NODES nodes of `op` on small tensors, each reading the previous one, and its feed."""
    nodes, inits = [], []
    x, in_type, shape, out_type, out_shape = "x", T.FLOAT, [1, 1, 2048], T.FLOAT, [1, 1, 2048]
    if op in ("Mul", "Add", "Sub"):  # by a constant, as a decoder's scalings
        inits.append(nh.from_array(np.full([1], 1.0001, np.float32), "c"))
        for i in range(NODES):
            nodes.append(helper.make_node(op, [x, "c"], [f"v{i}"]))
            x = f"v{i}"
    elif op == "Cast":  # float -> float16 -> float ...
        for i in range(NODES):
            nodes.append(helper.make_node("Cast", [x], [f"v{i}"], to=T.FLOAT16 if i % 2 == 0 else T.FLOAT))
            x = f"v{i}"
    elif op == "ReduceSum":  # keepdims, over the last axis
        inits.append(nh.from_array(np.array([-1], np.int64), "ax"))
        for i in range(NODES):
            nodes.append(helper.make_node("ReduceSum", [x, "ax"], [f"v{i}"], keepdims=1))
            x = f"v{i}"
        out_shape = [1, 1, 1]
    elif op == "Unsqueeze":
        inits.append(nh.from_array(np.array([0], np.int64), "ax"))
        for i in range(NODES):
            nodes.append(helper.make_node("Unsqueeze", [x, "ax"], [f"v{i}"]))
            x = f"v{i}"
        shape, out_shape = [4], [1] * NODES + [4]
    elif op == "Gather":  # an int64 [1] index into an int64 vector
        inits.append(nh.from_array(np.array([0], np.int64), "idx"))
        for i in range(NODES):
            nodes.append(helper.make_node("Gather", [x, "idx"], [f"v{i}"], axis=0))
            x = f"v{i}"
        in_type, shape, out_type, out_shape = T.INT64, [8], T.INT64, [1]
    elif op == "ShapeGather":  # Shape then Gather of one dimension, 15 times
        inits.append(nh.from_array(np.array(2, np.int64), "idx"))
        for i in range(NODES // 2):
            nodes.append(helper.make_node("Shape", ["x"], [f"s{i}"]))
            nodes.append(helper.make_node("Gather", [f"s{i}", "idx"], [f"g{i}"], axis=0))
        x, out_type, out_shape = f"g{NODES // 2 - 1}", T.INT64, []
    elif op == "Concat":  # a shape vector grown by one element
        inits.append(nh.from_array(np.array([1], np.int64), "one"))
        for i in range(NODES):
            nodes.append(helper.make_node("Concat", [x, "one"], [f"v{i}"], axis=0))
            x = f"v{i}"
        in_type, shape, out_type, out_shape = T.INT64, [2], T.INT64, [2 + NODES]
    else:
        raise SystemExit(f"unknown op {op!r}; choose from {', '.join(OPS)}")
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", in_type, shape)],
                              [helper.make_tensor_value_info(x, out_type, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feed = np.arange(int(np.prod(shape))).reshape(shape).astype(np.float32 if in_type == T.FLOAT else np.int64)
    return model.SerializeToString(), feed


def sessions(op: str):
    model, feed = chain(op)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # 30 nodes stay 30 nodes
    ref = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    ours = ort_session.InferenceSession(model, {"intra_op_num_threads": 1}, providers=["CPUExecutionProvider"])
    feeds = {"x": feed}
    got, expected = ours.run(None, feeds)[0], ref.run(None, feeds)[0]
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(expected, np.float64), rtol=1e-2)
    return (lambda: ours.run(None, feeds)), (lambda: ref.run(None, feeds))


def per_node(fn, runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / runs / NODES


def compare(op: str, repeat: int) -> tuple[float, float]:
    ours, ref = sessions(op)
    for _ in range(20):
        ours(), ref()
    times = [(per_node(ours, 100), per_node(ref, 300)) for _ in range(repeat)]  # interleaved
    return min(t[0] for t in times), min(t[1] for t in times)


def split(op: str) -> tuple[float, float, float]:
    """(step, inside NumpyKernel.compute, inside KernelContext.output) seconds per node, best of 5."""
    import ort_abi
    from ort_cpu_ep import _provider

    spent = {"kernel": 0.0, "output": 0.0}
    compute, output = _provider.NumpyKernel.compute, ort_abi.KernelContext.output

    def timed_compute(self, ctx):
        t = time.perf_counter()
        try:
            return compute(self, ctx)
        finally:
            spent["kernel"] += time.perf_counter() - t

    def timed_output(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return output(self, *args, **kwargs)
        finally:
            spent["output"] += time.perf_counter() - t

    _provider.NumpyKernel.compute, ort_abi.KernelContext.output = timed_compute, timed_output
    try:
        ours, _ = sessions(op)
        for _ in range(20):
            ours()
        best = None
        for _ in range(5):
            spent.update(kernel=0.0, output=0.0)
            total = per_node(ours, 200)
            row = (total, spent["kernel"] / 200 / NODES, spent["output"] / 200 / NODES)
            best = row if best is None or row[0] < best[0] else best
        return best
    finally:
        _provider.NumpyKernel.compute, ort_abi.KernelContext.output = compute, output


def profile(op: str, top: int = 25) -> None:
    ours, _ = sessions(op)
    for _ in range(20):
        ours()
    runs = 300
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        ours()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    calls = runs * NODES
    print(f"cProfile, {op}: microseconds per node call (self, cumulative), profiler overhead included")
    for line in out.getvalue().splitlines():
        cells = line.split(None, 5)
        if len(cells) == 6 and cells[1].replace(".", "").isdigit():
            print(f"{float(cells[1]) / calls * 1e6:7.2f} {float(cells[3]) / calls * 1e6:7.2f}  {cells[5][-100:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--split", action="store_true")
    parser.add_argument("--profile", metavar="OP")
    args = parser.parse_args()
    if args.profile:
        profile(args.profile)
        return
    ops = args.ops.split(",")
    print(f"{'op':12s} {'ours us/node':>12s} {'ort us/node':>11s} {'ratio':>6s}")
    for op in ops:
        ours, ref = compare(op, args.repeat)
        print(f"{op:12s} {ours * 1e6:12.2f} {ref * 1e6:11.2f} {ours / ref:6.1f}", flush=True)
    if args.split:
        print(f"\n{'op':12s} {'step us':>8s} {'numpy kernel':>12s} {'of it ctx.output':>16s} {'executor rest':>13s}")
        for op in ops:
            step, kernel, out = split(op)
            print(f"{op:12s} {step * 1e6:8.2f} {kernel * 1e6:12.2f} {out * 1e6:16.2f} {(step - kernel) * 1e6:13.2f}")


if __name__ == "__main__":
    main()
