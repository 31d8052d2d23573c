"""int4 weights for the zoo decoders, packed by onnxruntime's own block quantizer.

`quantize_int4(proto)` replaces every MatMul whose B is a 2-D float32 initializer by a com.microsoft
MatMulNBits with 4-bit weights, block-wise asymmetric (zero points present), as onnxruntime's
`MatMulNBitsQuantizer` does by default: it calls the same packing routine (`quantize_matmul_4bits`), so
the layout and rounding are onnxruntime's. (The quantizer class itself imports `onnx_ir`, which this
environment may lack; the packing routine ships with onnxruntime.)
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def quantize_int4(proto: onnx.ModelProto, block_size: int = 32, accuracy_level: int = 0) -> onnx.ModelProto:
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    nodes, dropped = [], set()
    for node in graph.node:
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        w = numpy_helper.to_array(weight) if weight is not None else None
        if w is None or w.ndim != 2 or w.dtype != np.float32:
            nodes.append(node)
            continue
        K, N = w.shape
        k_blocks = (K + block_size - 1) // block_size
        padded = np.zeros((k_blocks * block_size, N), np.float32)
        padded[:K] = w
        packed = np.zeros((N, k_blocks, block_size // 2), np.uint8)
        scales = np.zeros((N, k_blocks), np.float32)
        zero_points = np.zeros((N, (k_blocks + 1) // 2), np.uint8)
        quantize_matmul_4bits(packed, padded, scales, zero_points, block_size, N, K, False)
        base = node.input[1]
        graph.initializer.extend([numpy_helper.from_array(packed, f"{base}_Q4"),
                                  numpy_helper.from_array(scales.reshape(-1), f"{base}_scales"),
                                  numpy_helper.from_array(zero_points.reshape(-1), f"{base}_zero_points")])
        nodes.append(helper.make_node("MatMulNBits", [node.input[0], f"{base}_Q4", f"{base}_scales", f"{base}_zero_points"],
                                      list(node.output), name=f"{node.name}_Q4", domain="com.microsoft", K=K, N=N,
                                      bits=4, block_size=block_size, accuracy_level=accuracy_level))
        if uses.get(base) == 1:
            dropped.add(base)
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [t for t in graph.initializer if t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model
