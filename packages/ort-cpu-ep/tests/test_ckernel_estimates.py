"""The C library's Level-1 estimates shared by nodes that look alike (`_ckernels.shared_estimate`): one C call per
distinct (op, inputs, attributes, kernel threads), the same bytes as asking each node, and the sources' promise
that makes sharing sound (no estimate reads a node's name or its EP)."""

from __future__ import annotations

import pathlib
import re

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep._threads import intra_op_thread_scope

F = TensorProto.FLOAT
CSRC = pathlib.Path(__file__).resolve().parents[1] / "csrc"


def _convs() -> ort_graph.Model:
    """Four Convs: a and b alike (other names; large enough for two threads), c with strides 2, d on a smaller
    input; 4 output channels: im2col's per-thread buffers (the direct path takes 6 or more)."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["ya"], name="a", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w"], ["yb"], name="b", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w"], ["yc"], name="c", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["x2", "w"], ["yd"], name="d", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", F, [1, 3, 96, 96]),
                                               helper.make_tensor_value_info("x2", F, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info(y, F, None) for y in ("ya", "yb", "yc", "yd")], [w])
    model = ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    ort_graph.resolve_shapes(model)
    return model


def _counting(monkeypatch) -> list[str]:
    asked: list[str] = []
    real = ort_abi.estimate_workspace

    def estimate(entry, node, ep):
        asked.append(node.name)
        return real(entry, node, ep)

    monkeypatch.setattr(ort_abi, "estimate_workspace", estimate)
    return asked


def test_alike_nodes_share_one_c_estimate(library, monkeypatch) -> None:
    model = _convs()
    ep = CpuExecutionProvider(model.graph, model.opset_imports)
    nodes = {n.name: n for n in model.graph.nodes}
    want = {name: ort_abi.estimate_workspace(ep.entry(n), n, ep) for name, n in nodes.items()}
    assert c_kernels.kernel_language(ep.entry(nodes["a"])) == "C"
    asked = _counting(monkeypatch)
    got = {name: ep.estimate(n) for name, n in nodes.items()}
    assert got == want  # the bytes each node's own call gives
    assert asked == ["a", "c", "d"]  # b looks like a to the estimate: not asked again
    assert len({want["a"], want["c"], want["d"]}) == 3  # strides and the input shape are in the key


def test_the_kernel_threads_are_part_of_the_key(library, monkeypatch) -> None:
    model = _convs()
    ep = CpuExecutionProvider(model.graph, model.opset_imports)
    nodes = {n.name: n for n in model.graph.nodes}
    asked = _counting(monkeypatch)
    with intra_op_thread_scope(1):
        one = ep.estimate(nodes["a"])
    with intra_op_thread_scope(2):
        two = ep.estimate(nodes["b"])
        alone = ort_abi.estimate_workspace(ep.entry(nodes["b"]), nodes["b"], ep)
    assert asked[:2] == ["a", "b"] and two == alone
    assert one != two  # the C Conv counts a buffer per thread


_NAME_OR_EP = re.compile(r"\b(Node_GetName|Ep_Get\w+|KernelInfo_GetEp)\b")


def test_no_c_estimate_reads_the_node_name_or_the_ep() -> None:
    """What makes sharing sound: were a kernel of the library to read the node's name or its EP, alike nodes could
    need different bytes. Adding such a call means adding what it reads to `ort_abi.node_query_key` first."""
    sources = sorted(CSRC.glob("*.[ch]"))
    assert sources, f"no C sources at {CSRC}: the tests run from a checkout, which has them"
    found = [f"{p.name}: {m.group(1)}" for p in sources for m in _NAME_OR_EP.finditer(p.read_text())]
    assert found == []
