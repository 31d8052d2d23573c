"""Which nodes ort-cpu-ep's C kernels compute (`c_kernel_applies`): the op, its domain, element types, ranks and
attributes each C kernel in `csrc/` handles; every other node takes its numpy kernel. The provider asks here for
each node it claims while the C library is loaded (`_ckernels.c_registry()`)."""

from __future__ import annotations

import math
import operator

import numpy as np

from ort_graph import Node, constant_initializer

from ._c_cnn_rules import (
    C_CONV_ACTIVATIONS,
    C_POOLS,
    CONVT_ATTR_LENGTHS,
    c_conv_applies,
    c_pool_applies,
    c_resize_applies,
)
from ._c_rnn_rules import c_rnn_applies

_C_BITS = (2, 4, 8)
_FLOAT = 1  # TensorProto.FLOAT


def c_kernel_applies(node: Node, opset: int | None = None) -> bool:
    """Whether the C kernel computes this node as ONNX Runtime does; otherwise the numpy kernel runs it.

    MatMulNBits: bits 2/4/8, block_size 16..256, no g_idx, and for accuracy_level 4 a constant B (the
    C kernel then always quantizes A to int8, which onnxruntime does only for a prepacked, constant B).
    (Skip)SimplifiedLayerNormalization and GroupQueryAttention: see `_c_norm_applies` / `_c_gqa_applies`;
    QuickGelu: float32 without a bias. MatMul, FusedMatMul: see `_c_matmul_applies`. Gemm: see `_c_gemm_applies`.
    Softmax: see `_c_softmax_applies`. LayerNormalization, BatchNormalization: see `_c_affine_norm_applies`. Add,
    Sub, Mul, Div, Neg, Sum of two inputs: see `_c_arith_applies`. Reshape, Identity, Flatten, (Un)Squeeze, Transpose, Concat, Slice,
    Gather, Shape: see `_c_move_applies`. Conv, ConvTranspose: see `c_conv_applies`; FusedConv: that, a float32 Z if any, and an
    activation the C kernel reads (`C_CONV_ACTIVATIONS`). Relu, Clip, HardSigmoid,
    LeakyRelu, HardSwish, Sigmoid, Sqrt, Reciprocal, Abs, Exp, Tanh: see `_c_unary_applies`. MaxPool, AveragePool,
    GlobalAveragePool, GlobalMaxPool: see `c_pool_applies`. Resize: see `c_resize_applies`. Cast: see
    `_c_cast_applies`. ReduceSum (int64 / int32: `_c_int_applies`), ReduceMean, ReduceMax, ReduceMin: see
    `_c_reduce_applies`. Expand, Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Max, Min: see
    `_c_broadcast_applies`. RNN, GRU, LSTM: see `_c_rnn_rules.c_rnn_applies`.
    `opset`: the model's for the node's domain (None: the latest), for attribute defaults that changed (Softmax's
    axis). Element types are the registered type constraints' business (float16 goes to numpy)."""
    if node.op_type in _C_NORMS:
        return _c_norm_applies(node)
    if node.op_type in ("LayerNormalization", "BatchNormalization") and node.domain in ("", "ai.onnx"):
        return _c_affine_norm_applies(node)
    if node.op_type == "GroupQueryAttention":
        return _c_gqa_applies(node)
    if node.op_type == "QuickGelu":  # float32 without a bias input (the SiLUFusion's)
        return _float32_input(node) and not any(node.inputs[1:])
    if node.op_type in ("MatMul", "FusedMatMul"):
        return _c_matmul_applies(node)
    if node.op_type == "Gemm" and node.domain in ("", "ai.onnx"):
        return _c_gemm_applies(node)
    if node.op_type == "Softmax":
        return _c_softmax_applies(node, opset)
    if node.op_type in _C_ARITH and node.domain in ("", "ai.onnx"):
        return _c_arith_applies(node)
    if node.op_type in _C_MOVES:
        return _c_move_applies(node)
    if node.op_type == "Conv" and node.domain in ("", "ai.onnx"):
        return c_conv_applies(node)
    if node.op_type == "FusedConv":  # an activation the C kernel applies, with its parameters; Z of the output's type
        act = node.attr("activation", "")
        return (act in C_CONV_ACTIVATIONS
                and len(node.attr("activation_params") or []) == C_CONV_ACTIVATIONS[act] and c_conv_applies(node))
    if node.op_type == "ConvTranspose" and node.domain in ("", "ai.onnx"):
        return c_conv_applies(node, CONVT_ATTR_LENGTHS)
    if node.op_type in _C_UNARY and node.domain in ("", "ai.onnx"):
        return _c_unary_applies(node)
    if node.op_type in _C_BROADCASTS and node.domain in ("", "ai.onnx"):
        return _c_broadcast_applies(node)
    if node.op_type in _C_REDUCES and node.domain in ("", "ai.onnx"):
        value = node.graph.values.get(node.inputs[0]) if node.graph is not None and node.inputs else None
        if node.op_type == "ReduceSum" and value is not None and value.dtype in (_INT64, _INT32):
            return _c_int_applies(node)  # csrc/arith_reduce.c
        return _c_reduce_applies(node, opset)
    if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
        return _c_cast_applies(node)
    if node.op_type in C_POOLS and node.domain in ("", "ai.onnx"):
        return c_pool_applies(node)
    if node.op_type == "Resize" and node.domain in ("", "ai.onnx"):
        return c_resize_applies(node)
    if node.op_type in ("RNN", "GRU", "LSTM") and node.domain in ("", "ai.onnx"):
        return c_rnn_applies(node)
    if node.op_type != "MatMulNBits":
        return True
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 0))
    if bits not in _C_BITS or not 16 <= block <= 256 or block & (block - 1):
        return False
    if len(node.inputs) > 4 and node.inputs[4]:
        return False
    if int(node.attr("accuracy_level", 0)) == 4:
        graph = node.graph
        return graph is not None and len(node.inputs) > 1 and constant_initializer(graph, node.inputs[1]) is not None
    return True


# the activations the C Conv kernel applies in its epilogue as FusedConv (conv_kernel.c) -> their activation_params
_C_NORMS = ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization")
# GroupQueryAttention attributes the C kernel takes only at these values (the genai builder's)
_C_GQA_ATTRS = {"local_window_size": -1, "softcap": 0.0, "causal": 1, "qk_output": 0, "smooth_softmax": 0,
                "sliding_window_cache": 0}


def _named(node: Node, index: int) -> bool:
    return index < len(node.outputs) and bool(node.outputs[index])


def _float32_input(node: Node) -> bool:
    graph = node.graph
    value = graph.values.get(node.inputs[0]) if graph is not None and node.inputs else None
    return value is None or value.dtype in (0, None, _FLOAT)


def _c_matmul_applies(node: Node) -> bool:
    """float32 A and B of known ranks up to 16: a 2-D B with A of rank >= 1 (the weights' matmuls), or a batched
    B with A of rank >= 2 (the attention products, batch axes broadcast). FusedMatMul: transB and alpha, the
    other transpose attributes 0. A 1-D B, float16 and unknown ranks stay with numpy."""
    graph = node.graph
    if graph is None or len(node.inputs) != 2 or not all(node.inputs):
        return False
    if node.op_type == "FusedMatMul" and any(int(node.attr(n, 0)) for n in ("transA", "transBatchA", "transBatchB")):
        return False
    a, b = (graph.values.get(n) for n in node.inputs)
    if a is None or b is None or a.dtype != _FLOAT or b.dtype != _FLOAT or a.shape is None or b.shape is None:
        return False
    ra, rb = len(a.shape), len(b.shape)
    if not (1 <= ra <= 16 and 2 <= rb <= 16):
        return False
    return ra >= 2 or (rb == 2 and node.op_type == "MatMul")


def _c_gemm_applies(node: Node) -> bool:
    """A and B known float32 matrices (rank 2), C (if any) float32 of rank <= 2, transA 0."""
    graph = node.graph
    if graph is None or not 2 <= len(node.inputs) <= 3 or not node.inputs[0] or not node.inputs[1]:
        return False
    if int(node.attr("transA", 0)):
        return False
    values = [graph.values.get(n) for n in node.inputs if n]
    if any(v is None or v.dtype != _FLOAT for v in values):
        return False
    ranks = [None if v.shape is None else len(v.shape) for v in values]
    return ranks[0] == 2 and ranks[1] == 2 and all(r is not None and r <= 2 for r in ranks[2:])


def _c_softmax_applies(node: Node, opset: int | None = None) -> bool:
    """float32 input of known rank >= 1 and rows of contiguous values: before opset 13 any axis in range (the
    input coerced to 2-D at `axis`, default 1: a row is every value from it on); from 13 on an axis whose
    following dimensions are all known to be 1 (the last axis: the attention probabilities; a classifier's
    [N, 1000, 1, 1] over axis 1). Another axis stays with numpy."""
    graph = node.graph
    value = graph.values.get(node.inputs[0]) if graph is not None and node.inputs else None
    if value is None or value.dtype != _FLOAT or value.shape is None or len(value.shape) < 1:
        return False
    old = opset is not None and opset < 13
    try:
        axis = operator.index(node.attr("axis", 1 if old else -1))
    except TypeError:  # not an integer (a malformed model): the numpy kernel's checks say what is wrong
        return False
    rank = len(value.shape)
    if not -rank <= axis < rank:
        return False
    return old or all(d == 1 for d in value.shape[axis % rank + 1:])


_C_ARITH = ("Add", "Sub", "Mul", "Div", "Neg", "Sum")


def _c_arith_applies(node: Node) -> bool:
    """Every input present and known float32, or for Add, Sub and Mul every input known int64 or every one int32
    (any ranks and broadcast pattern, known or not: the C kernel takes them all). An input of unknown element type
    stays with numpy: the registered constraint would match it, and a computation of another type reaching the
    kernel would fail at run time."""
    graph = node.graph
    if graph is None or len(node.inputs) != (1 if node.op_type == "Neg" else 2) or not all(node.inputs):
        return False  # a Sum of one or of three and more inputs stays with numpy (two: Add's kernel)
    values = [graph.values.get(name) for name in node.inputs]
    if any(v is None for v in values):
        return False
    types = {v.dtype for v in values}
    return types == {_FLOAT} or (node.op_type in ("Add", "Sub", "Mul") and types in ({_INT64}, {_INT32}))


_INT64, _INT32 = 7, 6


def _c_int_applies(node: Node) -> bool:
    """ReduceSum of a known int64 or int32 input (csrc/arith_reduce.c, opset 13 on: axes an input); its float sums
    are `_c_reduce_applies`' and integer Casts `_c_cast_applies`'."""
    graph = node.graph
    value = graph.values.get(node.inputs[0]) if graph is not None and node.inputs and node.inputs[0] else None
    return value is not None and value.dtype in (_INT64, _INT32)


# the data-movement ops (csrc/move_*.c) and the element types they move: fixed-size numeric types and bool
_C_MOVES = ("Reshape", "Identity", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Slice", "Gather",
            "Shape", "Split")
_C_MOVE_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16})
_C_MAX_RANK = 16


def _c_move_applies(node: Node) -> bool:
    """The data inputs (Concat: every present input, else input 0) of a known fixed-size element type (strings,
    sequences and unknown types stay with numpy), no known rank of them or the output above 16, and for Transpose no
    empty perm (numpy refuses one for a rank above 0; the C kernel would reverse the axes)."""
    graph = node.graph
    if graph is None or not node.inputs or not node.inputs[0]:
        return False
    data = [n for n in node.inputs if n] if node.op_type == "Concat" else node.inputs[:1]
    for name in [*data, *node.outputs[:1]]:
        value = graph.values.get(name)
        if value is None or value.dtype not in _C_MOVE_TYPES:
            return False
        if value.shape is not None and len(value.shape) > _C_MAX_RANK:
            return False
    perm = node.attr("perm", None) if node.op_type == "Transpose" else None
    return perm is None or len(perm) > 0


_C_UNARY = ("Relu", "Clip", "HardSigmoid", "LeakyRelu", "HardSwish", "Sigmoid", "Sqrt", "Reciprocal", "Abs", "Exp", "Tanh")


def _c_unary_applies(node: Node) -> bool:
    """X and every present input (Clip's min / max) known float32: an input of unknown element type stays with
    numpy (as for the arithmetic kernels)."""
    graph = node.graph
    if graph is None or not node.inputs or not node.inputs[0] or len(node.inputs) > (3 if node.op_type == "Clip" else 1):
        return False
    values = [graph.values.get(name) for name in node.inputs if name]
    return all(v is not None and v.dtype == _FLOAT for v in values)


_C_BROADCASTS = ("Expand", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Max", "Min")
_C_COMPARE_TYPES = frozenset({1, 6, 7})  # float32, int32, int64


def _c_broadcast_applies(node: Node) -> bool:
    """Two present inputs of known element types: Expand's data of a fixed-size type (its shape input int64, the
    output of known rank up to 16 when the rank is known), the comparisons' two of one type among float32, int32,
    int64, Max / Min's two float32 (one input, or three and more, stay with numpy)."""
    graph = node.graph
    if graph is None or len(node.inputs) != 2 or not all(node.inputs):
        return False
    a, b = (graph.values.get(n) for n in node.inputs)
    if a is None or b is None:
        return False
    if node.op_type == "Expand":
        out = graph.values.get(node.outputs[0])
        rank_ok = out is None or out.shape is None or len(out.shape) <= 16
        return a.dtype in _C_MOVE_TYPES and b.dtype == 7 and rank_ok
    if node.op_type in ("Max", "Min"):
        return a.dtype == b.dtype == _FLOAT
    return a.dtype == b.dtype and a.dtype in _C_COMPARE_TYPES


_C_REDUCES = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18}  # -> the opset axes became an input


def _c_reduce_applies(node: Node, opset: int | None) -> bool:
    """X known float32 of known shape (rank <= 16); the axes an attribute or a constant int64 input (never computed
    at run time), one run of neighbouring axes once extents of 1 are set aside (or none: every axis, or X itself
    with noop_with_empty_axes)."""
    graph = node.graph
    value = graph.values.get(node.inputs[0]) if graph is not None and node.inputs and node.inputs[0] else None
    if value is None or value.dtype != _FLOAT or value.shape is None or len(value.shape) > _C_MAX_RANK:
        return False
    if opset is None or opset >= _C_REDUCES[node.op_type]:
        name = node.inputs[1] if len(node.inputs) > 1 else ""
        tensor = constant_initializer(graph, name)  # an overridable one is the run's: numpy reads it
        if name and (tensor is None or tensor.dtype != 7):
            return False
        axes = [] if tensor is None else [int(a) for a in np.asarray(tensor.numpy()).reshape(-1)]
    else:
        axes = list(node.attr("axes", None) or [])
    rank, shape = len(value.shape), value.shape
    if len(axes) > _C_MAX_RANK or any(not -rank <= a < rank for a in axes):
        return False  # the numpy kernel says what is wrong
    marked = sorted({a % rank for a in axes} or set(range(rank)))
    runs = [i for i in marked if not (isinstance(shape[i], int) and shape[i] == 1)]
    between = [i for i in range(runs[0], runs[-1] + 1) if i not in marked] if runs else []
    return all(isinstance(shape[i], int) and shape[i] == 1 for i in between)


_C_CAST_TYPES = frozenset({1, 2, 3, 6, 7, 9, 11})  # float, uint8, int8, int32, int64, bool, double


def _c_cast_applies(node: Node) -> bool:
    """The input of a known element type and `to` among float, double, int8, uint8, int32, int64 and bool, but not
    float / double to int8 / uint8 (C leaves values past the type's range undefined; numpy's rule stays)."""
    graph = node.graph
    value = graph.values.get(node.inputs[0]) if graph is not None and node.inputs and node.inputs[0] else None
    to = node.attr("to", None)
    if value is None or value.dtype not in _C_CAST_TYPES or not isinstance(to, int) or to not in _C_CAST_TYPES:
        return False
    return not (value.dtype in (1, 11) and to in (2, 3))


def _c_norm_applies(node: Node) -> bool:
    """float32, the last axis; outputs mean / inv_std_var (1, 2) not named (a C kernel of this ABI cannot
    tell a named output from an omitted one, so it writes only Y and the sum, output 3, which must then be
    named when the node lists it)."""
    if not _float32_input(node) or _named(node, 1) or _named(node, 2):
        return False
    if node.op_type == "SimplifiedLayerNormalization":
        return int(node.attr("axis", -1)) == -1 and len(node.outputs) <= 3
    return len(node.outputs) <= 3 or (len(node.outputs) == 4 and _named(node, 3))


def _c_affine_norm_applies(node: Node) -> bool:
    """Every present input known float32 (BatchNormalization's statistics too: the kernel reads them as float32),
    only output Y named; BatchNormalization in inference mode (training_mode 0, spatial 1) with all five inputs."""
    graph = node.graph
    if graph is None or not node.inputs or not node.inputs[0] or any(node.outputs[1:]):
        return False
    if any(graph.values.get(n) is None or graph.values[n].dtype != _FLOAT for n in node.inputs if n):
        return False
    if node.op_type == "LayerNormalization":  # Scale and B of exactly the normalized size where shapes are known
        if len(node.inputs) < 2 or not node.inputs[1]:
            return False
        x = graph.values[node.inputs[0]]
        if x.shape is None or not all(isinstance(d, int) for d in x.shape):
            return True  # the kernel checks the sizes at run time
        axis = int(node.attr("axis", -1))
        if not -len(x.shape) <= axis < len(x.shape):
            return False
        size = math.prod(x.shape[axis % len(x.shape):])
        params = [graph.values[n] for n in node.inputs[1:3] if n]
        return all(p.shape is not None and math.prod(p.shape) == size and len(p.shape) <= len(x.shape) for p in params)
    return (len(node.inputs) == 5 and all(node.inputs) and not int(node.attr("training_mode", 0))
            and int(node.attr("spatial", 1)) == 1)


def _c_gqa_applies(node: Node) -> bool:
    """float32; the attributes of `_C_GQA_ATTRS` at those values; float KV cache; present key and value
    named; no output 3 (qk); no inputs past sin_cache (position_ids, attention_bias, head_sink, ...); both
    caches when do_rotary=1."""
    if not _float32_input(node) or not (_named(node, 1) and _named(node, 2)) or _named(node, 3):
        return False
    for name, want in _C_GQA_ATTRS.items():
        if node.attr(name, want) != want:
            return False
    if any(str(node.attr(n, "NONE")).upper() != "NONE" for n in ("k_quant_type", "v_quant_type")):
        return False
    n, nkv = int(node.attr("num_heads", 0)), int(node.attr("kv_num_heads", 0))
    if n <= 0 or nkv <= 0 or n % nkv or any(node.inputs[9:]):
        return False
    rotary_caches = len(node.inputs) > 8 and bool(node.inputs[7]) and bool(node.inputs[8])
    return not int(node.attr("do_rotary", 0)) or rotary_caches


__all__ = ["C_CONV_ACTIVATIONS", "c_kernel_applies"]
