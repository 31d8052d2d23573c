"""Honest claims under dtype mutation: retype the float32 inputs/outputs of single-node ONNX cases to
other float types; every node the library still claims must run and produce the declared dtypes."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import ort_graph
from ort_cpu_ep.conformance import _to_value, claim, node_cases
from ort_cpu_ep.ops import run_graph

SUBSET = (r"^test_(add_bcast|div_example|pow_bcast_array|relu|gelu_default_1|erf|sigmoid|tanh|softplus|clip_example|"
          r"matmul_3d|gemm_all_attributes|softmax_axis_0|logsoftmax_axis_1|layer_normalization_3d_axis1|"
          r"batchnorm_example|instancenorm_example|conv_with_strides_padding|convtranspose_pads|maxpool_2d_pads|"
          r"averagepool_2d_pads|globalaveragepool|lrn|reduce_mean_default_axes_keepdims_example|reduce_max_.*_example|"
          r"argmax_default_axis_example|topk|cumsum_1d|where_example|resize_upsample_scales_linear|"
          r"gridsample|attention_4d|einsum_batch_matmul|hardmax_example|mean_example|max_example|"
          r"prelu_broadcast|leakyrelu|selu|elu|celu_expanded|mish|swish|hardswish|rms_normalization_2d_axis1)$")


def _mutated(proto: onnx.ModelProto, dst: int) -> onnx.ModelProto | None:
    p = copy.deepcopy(proto)
    changed = False
    for vi in list(p.graph.input) + list(p.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == T.FLOAT:
            vi.type.tensor_type.elem_type = dst
            changed = True
    if not changed:
        return None
    try:
        p = onnx.shape_inference.infer_shapes(p, strict_mode=True)
        onnx.checker.check_model(p)
    except Exception:  # noqa: BLE001 - the retyped model is not valid ONNX: nothing to check
        return None
    return p


@pytest.mark.parametrize("dst", [T.FLOAT16, T.DOUBLE, T.BFLOAT16])
def test_claimed_nodes_run_with_other_float_types(dst):
    checked = 0
    for case in node_cases(SUBSET):
        if len(case.model.graph.node) != 1:
            continue
        p = _mutated(case.model, dst)
        if p is None:
            continue
        model = ort_graph.from_proto(p)
        if claim(model):
            continue
        feeds = {}
        for vi, v in zip(p.graph.input, case.data_sets[0][0]):
            v = _to_value(v)
            feeds[vi.name] = v.astype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        with np.errstate(all="ignore"):
            out = run_graph(model.graph, feeds, opsets=model.opset_imports)
        for vi in p.graph.output:
            want = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            assert out[vi.name].dtype == want, (case.name, vi.name, out[vi.name].dtype, want)
        checked += 1
    assert checked >= 20
