"""Load the example library, plan its Softmax workspace, run all three kernels and compare with numpy.

    python run_example.py ./libexample_kernels.so
"""

from __future__ import annotations

import sys

import numpy as np
from onnx import TensorProto

import ort_abi

CPU = "CPUExecutionProvider"


def main(path: str) -> None:
    registry = ort_abi.KernelRegistry()
    library = ort_abi.load_kernel_library(path, registry)
    print(f"loaded {path} (ABI v{library.abi_version}):")
    for entry in registry:
        print(f"  {entry.describe()}  level1={'yes' if entry.has_estimate else 'no'}")

    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    softmax = registry.find("Softmax", "", 17, CPU)
    kernel = softmax.create_kernel(ort_abi.KernelInfo("/demo/Softmax", "Softmax", input_count=1,
                                                      output_types=(TensorProto.FLOAT,)))
    slots = ort_abi.declare_workspace(kernel, [ort_abi.WorkspaceInputShape.shaped(x.shape, TensorProto.FLOAT)])
    print(f"Softmax declares {slots}")
    workspace = {s.slot_id: np.zeros(s.size_bytes, np.uint8) for s in slots or []}
    ctx = ort_abi.KernelContext([x], output_types=[TensorProto.FLOAT], workspace=workspace)
    kernel.compute(ctx)
    kernel.release()
    e = np.exp(x - x.max(-1, keepdims=True))
    assert np.allclose(ctx.outputs[0], e / e.sum(-1, keepdims=True), atol=1e-6)
    print(f"Softmax ok, counters {ctx.counters}")

    for op, inputs, ref in [("Relu", [x], np.maximum(x, 0)), ("Add", [x, x], x + x)]:
        k = registry.find(op, "", 17, CPU).create_kernel(ort_abi.KernelInfo(f"/demo/{op}", op))
        c = ort_abi.KernelContext(inputs, output_types=[TensorProto.FLOAT])
        k.compute(c)
        k.release()
        assert np.array_equal(c.outputs[0], ref)
        print(f"{op} ok")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "./libexample_kernels.so")
