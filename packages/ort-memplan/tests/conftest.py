"""Fixtures: small hand-built graphs for the adapter tests (value shapes set by hand, float32)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_graph import Graph, Tensor


def build(nodes: list[tuple[str, str, list[str], list[str]]], shapes: dict[str, tuple],
          inputs: list[str], outputs: list[str], inits: tuple[str, ...] = ("w",)) -> Graph:
    """nodes: (name, op_type, inputs, outputs); shapes: value name -> shape (float32)."""
    g = Graph()
    g.inputs = list(inputs)
    g.outputs = list(outputs)
    for name in inits:
        g.initializers[name] = Tensor.from_numpy(name, np.zeros((256, 256), np.float32))
    for name, shape in shapes.items():
        v = g.value(name)
        v.dtype = TensorProto.FLOAT
        v.shape = shape
    for name, op, ins, outs in nodes:
        g.add_node(op, ins, outs, name=name)
    return g


def chain() -> Graph:
    """NonZero u (dynamic) from x; x -> MatMul a -> Relu b -> MatMul c -> Add(c, x) d -> MatMul y -> Relu z.

    x, c, d, y, z are 1 KiB; a and b 2 KiB. File order is the execution order (steps 0..6).
    """
    row, wide = (1, 256), (1, 512)
    return build(
        [("dyn0", "NonZero", ["x"], ["u"]),
         ("mm1", "MatMul", ["x", "w"], ["a"]),
         ("relu2", "Relu", ["a"], ["b"]),
         ("mm3", "MatMul", ["b", "w"], ["c"]),
         ("add4", "Add", ["c", "x"], ["d"]),
         ("mm5", "MatMul", ["d", "w"], ["y"]),
         ("relu6", "Relu", ["y"], ["z"])],
        {"x": row, "a": wide, "b": wide, "c": row, "d": row, "y": row, "z": row, "u": (2, "n")},
        ["x"], ["y", "z"])


@pytest.fixture
def graph_builder():
    return build


@pytest.fixture
def chain_graph() -> Graph:
    return chain()
