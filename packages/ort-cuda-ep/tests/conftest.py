"""Model builders shared by this package's tests (one-node graphs with resolved shapes)."""

from __future__ import annotations

import types

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_graph import from_proto


def mha_model(batch, seq, kv, hidden=128, heads=2, extra_inputs=(), dtype=TensorProto.FLOAT, unidirectional=0):
    inputs = [helper.make_tensor_value_info(n, dtype, s) for n, s in
              (("q", [batch, seq, hidden]), ("k", [batch, kv, hidden]), ("v", [batch, kv, hidden]))]
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", *extra_inputs], ["o"], domain="com.microsoft",
                            num_heads=heads, unidirectional=unidirectional, name="/model/layers.0/attn/MultiHeadAttention")
    for e in extra_inputs:
        inputs.append(helper.make_tensor_value_info(e, dtype, [batch, kv]))
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("o", dtype, [batch, seq, hidden])])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return from_proto(mp)


def nbits_model(m, n=256, k=128, block=32):
    kb = k // block
    inits = [helper.make_tensor("B", TensorProto.UINT8, [n, kb, block // 2], np.zeros(n * kb * block // 2, np.uint8).tobytes(), raw=True),
             helper.make_tensor("scales", TensorProto.FLOAT, [n * kb], np.ones(n * kb, np.float32).tolist())]
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block, name="/model/layers.0/mlp/down_proj/MatMul_Q4")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])], inits)
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]))



@pytest.fixture
def models():
    return types.SimpleNamespace(mha=mha_model, nbits=nbits_model)
