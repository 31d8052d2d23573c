"""Helpers for the contrib-op tests: run one node (or a whole model) with our kernels and with onnxruntime."""

from __future__ import annotations

import types

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, helper

import ort_cpu_ep.ops as cpu
from ort_cpu_ep.ops import InputInfo, find
from ort_graph import Attr, Node, from_numpy_dtype

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"


def _attr_type(v: object) -> int:
    if isinstance(v, float):
        return AttributeProto.FLOAT
    if isinstance(v, str):
        return AttributeProto.STRING
    if isinstance(v, (list, tuple)):
        return AttributeProto.FLOATS if v and isinstance(v[0], float) else AttributeProto.INTS
    return AttributeProto.INT


def make_node(op: str, n_in: int, n_out: int, domain: str = MS, **attrs: object) -> Node:
    node = Node(0, f"test_{op}", op, domain, inputs=[f"i{i}" for i in range(n_in)],
                outputs=[f"o{i}" for i in range(n_out)])
    for k, v in attrs.items():
        node.attributes[k] = Attr(k, _attr_type(v), v)
    return node


def infos(inputs: list[np.ndarray | None]) -> list[InputInfo]:
    return [InputInfo(0, None, present=False) if a is None else
            InputInfo(from_numpy_dtype(a.dtype), tuple(a.shape)) if isinstance(a, np.ndarray) else InputInfo(0, None)
            for a in inputs]


def ours(op: str, inputs: list[np.ndarray | None], n_out: int, domain: str = MS, opset: int = 1,
         impl: object = None, **attrs: object) -> list[np.ndarray]:
    """Run one node with the registered CPU kernel (or `impl`); asserts the kernel claims the node first."""
    impl = impl if impl is not None else find(op, domain, opset)
    assert impl is not None, f"no kernel registered for {domain}::{op} at opset {opset}"
    node = make_node(op, len(inputs), n_out, domain, **attrs)
    node.inputs = ["" if a is None else f"i{i}" for i, a in enumerate(inputs)]
    decline = impl.supports(node, infos(inputs), opset)
    assert decline is None, decline
    with cpu.opset_scope({domain: opset} | ({} if domain == "" else {"": 22})):
        return impl.compute(node, list(inputs))


def decline_of(op: str, inputs: list[InputInfo], n_out: int = 1, domain: str = MS, opset: int = 1,
               impl: object = None, **attrs: object):
    impl = impl if impl is not None else find(op, domain, opset)
    node = make_node(op, len(inputs), n_out, domain, **attrs)
    node.inputs = [f"i{i}" if info.present else "" for i, info in enumerate(inputs)]
    return impl.supports(node, inputs, opset)


def onnxruntime_node(op: str, inputs: list[np.ndarray | None], n_out: int, domain: str = MS, opset: int = 1,
                     **attrs: object) -> list[np.ndarray]:
    """Run one node on onnxruntime's CPU EP (a one-node model, default domain opset 22 unless the op's)."""
    names, vis, feeds = [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        names.append(f"i{i}")
        feeds[f"i{i}"] = a
        vis.append(helper.make_tensor_value_info(f"i{i}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    outs = [f"o{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, domain=domain, **attrs)
    graph = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outs])
    opsets = [helper.make_opsetid("", opset if domain == "" else 22)]
    if domain:
        opsets.append(helper.make_opsetid(domain, opset))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _reference_node(node: Node, args: list, opsets: dict[str, int]) -> list[np.ndarray]:
    """Fallback for standard ops the CPU table lacks: onnx.reference on a one-node model."""
    from onnx.reference import ReferenceEvaluator

    from ort_graph._convert import node_to_proto

    proto = node_to_proto(node)
    names = [n for n in node.inputs if n]
    feeds = {n: a for n, a in zip(node.inputs, args) if n}
    graph = helper.make_graph([proto], "one", [onnx.ValueInfoProto(name=n) for n in names],
                              [onnx.ValueInfoProto(name=o) for o in node.outputs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    outs = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(o) for o in outs]


def run_model(model, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Run a whole ort_graph Model node by node in topological order with the CPU op table.

    Nodes whose op the table lacks fall back to onnx.reference; returns (outputs, {node name: 'cpu'|'reference'})."""
    from ort_graph import topological_order

    graph = model.graph
    opsets = {d: v for d, v in model.opset_imports.items()}
    values: dict[str, np.ndarray] = {name: t.numpy() for name, t in graph.initializers.items()}
    values.update(feeds)
    ran: dict[str, str] = {}
    for node in topological_order(graph):
        args = [values[n] if n else None for n in node.inputs]
        impl = find(node.op_type, node.domain, opsets.get(node.domain, 1))
        decline = impl.supports(node, infos(args), opsets.get(node.domain, 1)) if impl is not None else "none"
        if decline is None:
            outs = impl.compute(node, args)
            ran[node.name] = "cpu"
        else:
            assert node.domain in ("", "ai.onnx"), f"contrib node {node.name!r} not claimed: {decline}"
            outs = _reference_node(node, args, opsets)
            ran[node.name] = "reference"
        for name, val in zip(node.outputs, outs):
            if name:
                values[name] = np.asarray(val)
    return {name: values[name] for name in graph.outputs}, ran


def reference_node(op: str, inputs: list[np.ndarray | None], n_out: int, domain: str = "", opset: int = 22,
                   **attrs: object) -> list[np.ndarray]:
    """Run one node with onnx.reference (the ONNX spec's reference implementation)."""
    from onnx.reference import ReferenceEvaluator

    names = ["" if a is None else f"i{i}" for i, a in enumerate(inputs)]
    feeds = {n: a for n, a in zip(names, inputs) if n}
    node = helper.make_node(op, names, [f"o{i}" for i in range(n_out)], domain=domain, **attrs)
    graph = helper.make_graph([node], "g", [onnx.ValueInfoProto(name=n) for n in feeds],
                              [onnx.ValueInfoProto(name=f"o{i}") for i in range(n_out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def kit() -> types.SimpleNamespace:
    """The helpers above, for test modules (importlib mode gives them no import path to this file)."""
    return types.SimpleNamespace(ours=ours, ort=onnxruntime_node, decline_of=decline_of, infos=infos,
                                 make_node=make_node, MS=MS, cpu=cpu,
                                 run_model=run_model, reference=reference_node)
