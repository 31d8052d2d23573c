"""Claim rules from node facts alone: each decline names the rejected thing and a remedy."""

from __future__ import annotations

import pytest
from onnx import TensorProto

from ort_cuda_ep import NodeFacts, check_node, supported_ops

F, H, U8, D = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.UINT8, TensorProto.DOUBLE


def facts(op, shapes, dtypes=None, attrs=None, domain="", inputs=None):
    inputs = inputs or tuple(f"x{i}" if s is not None else "" for i, s in enumerate(shapes))
    dtypes = dtypes or tuple(F if s is not None else 0 for s in shapes)
    return NodeFacts("n", op, domain, tuple(inputs), tuple(dtypes), tuple(shapes), attrs or {})


@pytest.mark.parametrize("f,opset", [
    (facts("Add", [(2, 3), (3,)]), 17), (facts("Sigmoid", [(4,)]), 17), (facts("Softmax", [(2, 8)], attrs={"axis": 1}), 13),
    (facts("Softmax", [(2, 8)]), 11), (facts("MatMul", [("b", 8, 64), (64, 32)]), 17),
    (facts("MatMul", [("b", 8, 64), ("b", 64, 32)]), 17), (facts("Gemm", [(4, 8), (8, 2), (2,)]), 13),
    (facts("SimplifiedLayerNormalization", [("b", 64), (64,)]), 17),
    (facts("MatMulNBits", [("m", 64), (32, 2, 16), (64,)], (F, U8, F), {"K": 64, "N": 32, "bits": 4, "block_size": 32},
           "com.microsoft"), 1),
    (facts("Gelu", [(4,)], attrs={"approximate": "tanh"}), 20),
    (facts("Mul", [(2, 3), (3,)], (H, H)), 17),
    (facts("MatMul", [("b", 8, 64), (64, 32)], (H, H)), 17),
    (facts("MatMulNBits", [("m", 64), (32, 2, 16), (64,)], (H, U8, H), {"K": 64, "N": 32, "bits": 4, "block_size": 32},
           "com.microsoft"), 1),
    (facts("SimplifiedLayerNormalization", [("b", 4, 8), (4, 8)], attrs={"axis": -2}), 17),
    (facts("MultiHeadAttention", [("b", 1, 64), ("b", "t", 64), ("b", "t", 64)], attrs={"num_heads": 2},
           domain="com.microsoft"), 1),
    (NodeFacts("n", "SkipSimplifiedLayerNormalization", "com.microsoft", ("x", "s", "g"), (F, F, F),
               ((1, 8, 64), (1, 8, 64), (64,)), {}, ("y", "", "", "sum")), 1),
    (facts("Reshape", [("b", 8, 64), (3,)], (F, TensorProto.INT64)), 17),
    (facts("Unsqueeze", [("b", 64), (1,)], (H, TensorProto.INT64)), 13),
    (facts("Squeeze", [("b", 1, 64)], attrs={"axes": [1]}), 11),
    (facts("Transpose", [(2, 3, 4, 5)], attrs={"perm": [0, 2, 1, 3]}), 17),
    (facts("Slice", [(2, 8), (1,), (1,), (1,), (1,)], (F, TensorProto.INT64, TensorProto.INT64, TensorProto.INT64,
                                                        TensorProto.INT64)), 13),
    (facts("Expand", [(1, 8), (3,)], (F, TensorProto.INT64)), 13),
    (facts("Concat", [("b", 3), ("b", 5)], attrs={"axis": 1}), 13),
    (facts("Gather", [(256, 64), ("b", "s")], (F, TensorProto.INT64)), 13),
    (facts("Cast", [(3,)], (TensorProto.INT64,), attrs={"to": F}), 21),
    (facts("Shape", [("b", 8)]), 21),
    (facts("MatMulNBits", [("m", 64), (32, 2, 32), (64,)], (F, U8, F), {"K": 64, "N": 32, "bits": 8, "block_size": 32},
           "com.microsoft"), 1),
    (facts("MatMul", [("b", 8, 64), (64, 32)], (TensorProto.BFLOAT16, TensorProto.BFLOAT16)), 17),
    (facts("SimplifiedLayerNormalization", [("b", 64), (64,)], (TensorProto.BFLOAT16, TensorProto.BFLOAT16)), 17),
    (facts("Cast", [(3,)], (F,), attrs={"to": TensorProto.BFLOAT16}), 21),
])
def test_supported(f, opset):
    spec, rejection = check_node(f, opset)
    assert spec is not None and rejection is None


@pytest.mark.parametrize("f,opset,aspect,text", [
    (facts("Range", [(), (), ()]), 17, "op", "Range"),
    (facts("Reshape", [(2, 3), (2,)], (TensorProto.INT64, TensorProto.INT64)), 17, "dtype", "INT64"),
    (facts("Reshape", [(2, 3), (2,)], (F, F)), 17, "dtype", "input 1"),
    (facts("Transpose", [(2, 3)], attrs={"perm": [0, 0]}), 17, "attribute", "perm"),
    (facts("Transpose", [(1,) * 7]), 17, "shape", "rank"),
    (facts("Expand", [(2, 3), None], (F, TensorProto.INT64)), 17, "shape", "1-D shape input"),
    (facts("Concat", [(2, 3), (2, 3)], (F, H), attrs={"axis": 0}), 17, "dtype", "mix"),
    (facts("Gather", [(8, 4), (3,)], (F, F)), 17, "dtype", "input 1"),
    (facts("Cast", [(3,)], (TensorProto.INT64,), attrs={"to": TensorProto.INT32}), 21, "dtype", "integer -> integer"),
    (facts("Cast", [(3,)], (F,), attrs={"to": TensorProto.DOUBLE}), 21, "dtype", "DOUBLE"),
    (facts("MatMul", [(2, 8), (8, 4)], (F, TensorProto.BFLOAT16)), 17, "dtype", "mix"),
    (facts("Shape", [(3,)], (TensorProto.INT64,)), 21, "dtype", "INT64"),
    (facts("Add", [(2, 3), (3,)], (D, D)), 17, "dtype", "DOUBLE"),
    (facts("Add", [(2, 3), (3,)], (F, H)), 17, "dtype", "mix"),
    (facts("MatMulNBits", [("m", 64), (32, 2, 16), (64,)], (H, U8, F), {"K": 64, "N": 32, "bits": 4, "block_size": 32},
           "com.microsoft"), 1, "dtype", "mix"),
    (facts("Add", [(2, 3), (3,)], (0, F)), 17, "dtype", "unknown"),
    (facts("Add", [None, (3,)], (F, F), inputs=("a", "b")), 17, "shape", "None"),
    (facts("Add", [(1,) * 7, (3,)]), 17, "shape", "rank"),
    (facts("Softmax", [(2, 8)], attrs={"axis": 0}), 13, "attribute", "axis=0"),
    (facts("MatMul", [(2, 8, 64), (3, 64, 32)]), 17, "shape", "batch dims"),
    (facts("Gemm", [(2, 4, 8), (8, 2)]), 13, "shape", "rank"),
    (facts("MatMulNBits", [("m", 64), (32, 2, 16), (64,)], (F, U8, F), {"K": 64, "N": 32, "bits": 2, "block_size": 32},
           "com.microsoft"), 1, "attribute", "bits=2"),
    (facts("MatMulNBits", [("m", 64), (32, 2, 16), (64,)], (F, U8, F), {"K": 64, "N": 32, "bits": 8, "block_size": 32},
           "com.microsoft"), 1, "shape", "B of shape [32, 2, 32]"),
    (facts("MatMulNBits", [("m", 64), (32, 2, 16), (64,)], (F, U8, F), {"K": 64, "N": 32, "bits": 4, "block_size": 24},
           "com.microsoft"), 1, "attribute", "block_size=24"),
    (facts("MatMulNBits", [("m", 64), (32, 2, 16), (64,), None, (64,)], (F, U8, F, 0, TensorProto.INT32),
           {"K": 64, "N": 32, "bits": 4, "block_size": 32}, "com.microsoft", ("A", "B", "s", "", "g")), 1, "input", "g_idx"),
    (facts("MatMulNBits", [("m", 48), (32, 2, 16), (64,)], (F, U8, F), {"K": 64, "N": 32, "bits": 4, "block_size": 32},
           "com.microsoft"), 1, "shape", "K=64"),
    (facts("SimplifiedLayerNormalization", [(4, 8), (8,), (8,)]), 17, "input", "bias"),
    (facts("Gelu", [(4,)], attrs={"approximate": "fast"}), 20, "attribute", "fast"),
    (facts("SimplifiedLayerNormalization", [(4, 8), (4,)]), 17, "shape", "scale (4,)"),
    (facts("MultiHeadAttention", [(1, 1, 64), (2, 9, 64), (2, 9, 64)], attrs={"num_heads": 2}, domain="com.microsoft"),
     1, "shape", "batch"),
    (facts("MultiHeadAttention", [("b", 1, 64), ("b", "k", 64), ("b", "v", 64)], attrs={"num_heads": 2},
           domain="com.microsoft"), 1, "shape", "key/value lengths"),
    (NodeFacts("n", "SkipSimplifiedLayerNormalization", "com.microsoft", ("x", "s", "g"), (F, F, F),
               ((1, 8, 64), (1, 8, 64), (64,)), {}, ("y", "mean")), 1, "output", "mean"),
])
def test_declined_with_reason(f, opset, aspect, text):
    spec, rejection = check_node(f, opset)
    assert rejection is not None and rejection.aspect == aspect
    assert text in rejection.detail + rejection.accepts
    assert rejection.remedy and rejection.accepts


def test_gelu_needs_opset_20():
    spec, rejection = check_node(facts("Gelu", [(4,)]), 17)
    assert spec is None and rejection.aspect == "op"


def test_supported_ops_list():
    ops = supported_ops()
    assert {"MatMul", "Gemm", "Softmax", "SimplifiedLayerNormalization", "com.microsoft::MatMulNBits",
            "com.microsoft::MultiHeadAttention", "Add", "Sigmoid"} <= set(ops)
