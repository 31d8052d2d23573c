"""Control-flow kernels and their bodies: the memory a body holds is what the kernel declares as workspace,
the bodies read the weights the session hands the kernel, and a failing inner node is named."""

import tracemalloc
import warnings

import numpy as np
import pytest

import ort_graph
from ort_cpu_ep.ops import find
from ort_cpu_ep.ops._bodies import SubgraphNodeError, body_bytes
from ort_graph import zoo

BOOKKEEPING = 16 * 1024  # Python's own objects while a body runs (dicts, array headers): not data


def _node(proto, name, dims):
    m = ort_graph.from_proto(proto)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_graph.resolve_shapes(m, dims)
    return m.graph, m.graph.node_by_name(name)


def _args(graph, node, feeds):
    values = {**{k: t.numpy() for k, t in graph.initializers.items()}, **feeds}
    return [values.get(n) if n else None for n in node.inputs] + [values[n] for n in node.implicit_inputs()]


CASES = {
    "if": (lambda: zoo.if_weights_proto(hidden=256), "/If", {"batch": 64}, {"cond": np.array(True)}),
    "loop": (lambda: zoo.loop_proto(hidden=256), "/Loop", {"batch": 64}, {}),
    "scan": (lambda: zoo.scan_proto(hidden=256), "/Scan", {"batch": 64, "sequence": 6}, {}),
    "nested": (lambda: zoo.nested_proto(hidden=256), "/Loop", {"batch": 64}, {}),
}
SHAPES = {"x": lambda d: (d["batch"], 256), "s0": lambda d: (d["batch"], 256),
          "xs": lambda d: (d["batch"], d["sequence"], 256)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bodys_measured_memory_stays_within_what_the_kernel_declares(name):
    make, node_name, dims, extra = CASES[name]
    graph, node = _node(make(), node_name, dims)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(SHAPES[n](dims)).astype(np.float32) for n in graph.inputs}
    args = _args(graph, node, {**feeds, **extra})
    impl = find(node.op_type, "", 17)
    ((_slot, declared),) = impl.workspace_bytes(node, [])
    assert declared == body_bytes(node) > 64 * 256 * 4
    run = impl.bind(node, 17)
    run(args)  # warm: first-use caches are not the body's memory
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        run(args)
        measured = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert measured <= declared + BOOKKEEPING, (measured, declared)


def test_the_bodies_read_the_weights_given_after_the_kernels_inputs():
    graph, node = _node(zoo.if_weights_proto(hidden=8), "/If", {"batch": 2})
    x = np.ones((2, 8), np.float32)
    impl = find("If", "", 17)
    inputs = [np.array(True), x]  # cond, then the outer-scope x
    own = impl.compute(node, inputs)[0]
    weights = [np.full((8, 8), 0.5, np.float32) for _ in ort_graph.body_weights(node)]
    given = impl.compute(node, inputs + weights)[0]
    np.testing.assert_allclose(given, np.full((2, 8), 4.0, np.float32))
    assert not np.allclose(own, given)


def test_a_failing_node_inside_a_body_is_named_with_the_enclosing_nodes():
    graph, node = _node(zoo.nested_proto(hidden=8), "/Loop", {"batch": 2})
    impl = find("Loop", "", 17)
    bad = np.ones((2, 3), np.float32)  # 3 columns against the branches' [8, 8] weights
    with pytest.raises(SubgraphNodeError, match=r"node '/Loop/body/If/then/MatMul' \(MatMul\) inside subgraph "
                                                r"'then' of node '/Loop/body/If' \(If\) inside subgraph 'loop_body' "
                                                r"of node '/Loop' \(Loop\) failed") as info:
        impl.compute(node, _args(graph, node, {"x": bad}))
    assert info.value.path == ("subgraph 'then' of node '/Loop/body/If' (If)",
                               "subgraph 'loop_body' of node '/Loop' (Loop)")
