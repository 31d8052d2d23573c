"""Constant-weight pre-packing at initialization (ort_abi `declare_prepacked` / `prepack_weight`, ABI version 5).

Before the budget check, each kernel says how many bytes it packs for each of its inputs that is a constant
initializer (`prepacked_bytes`); those bytes count as the node's weights on its device (plan weight totals, budget
checks, `ortrun plan`). Once the plan fits, `prepack_weights` packs them, before any run. The initializers stay
resident (a consumer that does not pack, or a few-row product that streams the original, still reads them): the
plan counts both. Only host memory is packed (nodes on a device with its own allocator declare nothing here).
An overridable initializer (listed in graph.input, IR >= 4: `ort_graph.constant_initializer`) can be fed at run
time, so it is not constant and is not packed; before IR 4 every initializer is constant and may be packed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ort_abi
from ort_graph import Node, constant_initializer

Packed = dict[tuple[int, int], int]  # (node index, input index) -> bytes


def constant_inputs(graph: Any, node: Node) -> list[tuple[int, str]]:
    """(input index, name) of the node's inputs that are initializers no feed can replace."""
    return [(i, name) for i, name in enumerate(node.inputs) if constant_initializer(graph, name) is not None]


def node_prepacked(graph: Any, node: Node, kernel: Any) -> tuple[tuple[int, int], ...]:
    """(input index, bytes) of each constant input `kernel` declares it packs for `node`."""
    if not callable(getattr(kernel, "declare_prepacked", None)):
        return ()
    consts = constant_inputs(graph, node)
    if not consts:
        return ()
    shapes = ort_abi.workspace_input_shapes(node)
    found = ((index, ort_abi.declare_prepacked(kernel, shapes, index, node=node.name)) for index, _ in consts)
    return tuple((index, nbytes) for index, nbytes in found if nbytes)


def prepacked_bytes(order: Sequence[Node], declared: Callable[[Node], tuple[tuple[int, int], ...]],
                    host_nodes: set[int]) -> Packed:
    """What each node on the host declares it packs (`declared(node)`: node_prepacked of its kernel, or a
    trial's cache of it), per constant input."""
    return {(node.index, index): nbytes for node in order if node.index in host_nodes
            for index, nbytes in declared(node)}


def packed_per_device(packed: Packed, device_of_node: Mapping[int, str]) -> dict[str, int]:
    per: dict[str, int] = {}
    for (node_index, _), nbytes in packed.items():
        device = device_of_node[node_index]
        per[device] = per.get(device, 0) + nbytes
    return per


def prepack_weights(graph: Any, order: Sequence[Node], kernels: Mapping[int, Any], packed: Packed) -> int:
    """Pack every declared input (in node order), before any run; the bytes the kernels kept. A kernel's failure
    raises ort_abi.PrePackError naming the node."""
    kept = 0
    for node in order:
        for index, name in constant_inputs(graph, node):
            nbytes = packed.get((node.index, index), 0)
            if nbytes and ort_abi.prepack_weight(kernels[node.index], index, graph.initializers[name].numpy(), nbytes,
                                                 node=node.name):
                kept += nbytes
    return kept
