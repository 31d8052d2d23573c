"""`node_query_key`: what the host API's node queries answer, except the node's name, as a key."""

from __future__ import annotations

import numpy as np
from onnx import helper

import ort_abi
import ort_graph


def test_attribute_kinds_and_unkeyed_values() -> None:
    def node(value, kind=helper.AttributeProto.INT):
        return ort_graph.Node(0, "n", "Op", attributes={"k": ort_graph.Attr("k", kind, value)})

    keys = {ort_abi.node_query_key(node(v)) for v in (1, 1.0, True, [1], (1,), "1")}
    assert len(keys) == 6  # the typed getters answer each differently
    assert ort_abi.node_query_key(node(np.ones(2, np.float32), helper.AttributeProto.TENSOR)) is None
    assert ort_abi.node_query_key(node(np.int64(1))) is None
