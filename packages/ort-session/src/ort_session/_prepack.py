"""Constant-weight pre-packing at initialization (ort_abi `declare_prepacked` / `prepack_weight`, ABI version 5).

Before the budget check, each kernel says how many bytes it packs for each of its inputs that is a constant
initializer (`prepacked_bytes`); those bytes count as the node's weights on its device (plan weight totals, budget
checks, `ortrun plan`). Once the plan fits, `prepack_weights` packs them, before any run. Only host memory is
packed (nodes on a device with its own allocator declare nothing here). An overridable initializer (listed in
graph.input, IR >= 4: `ort_graph.constant_initializer`) can be fed at run time, so it is not constant and is not
packed; before IR 4 every initializer is constant and may be packed.

An initializer stays resident beside its packed copies (the plan counts both) unless it is `releasable`, as
onnxruntime releases an initializer every consumer pre-packed: each of its consumers declares packing it and
computes without it once packed (`releases_packed`: ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS), each on the host, with
at least the original's bytes; and nothing else reads it (not a graph input or output, no subgraph, not streamed).
Its bytes are then not the plan's weights; after packing the session drops it (`Tensor.release`) and the consumers
get no value for it. One that a consumer did not pack after all stays (within the plan: the packed copy it dropped
was at least as large).
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


def prepack_weights(graph: Any, order: Sequence[Node], kernels: Mapping[int, Any], packed: Packed,
                    release: Mapping[str, tuple[tuple[int, int], ...]] | None = None) -> set[str]:
    """Pack every declared input (in node order), before any run, and drop each `release` initializer (`releasable`)
    as soon as every consumer kept its packed copy (never all originals and all copies at once); the names dropped. A
    kernel's failure raises ort_abi.PrePackError naming the node."""
    kept: set[tuple[int, int]] = set()
    waiting = {name: len({i for i, _ in positions}) for name, positions in (release or {}).items()}
    dropped = set()
    for node in order:
        for index, name in constant_inputs(graph, node):
            nbytes = packed.get((node.index, index), 0)
            if nbytes and ort_abi.prepack_weight(kernels[node.index], index, graph.initializers[name].numpy(), nbytes,
                                                 node=node.name):
                kept.add((node.index, index))
        for name in {n for n in node.inputs if n in waiting}:
            waiting[name] -= 1
            if not waiting[name] and all(p in kept for p in release[name]):
                graph.initializers[name].release()
                dropped.add(name)
    return dropped


def releases_packed(kernel: Any) -> bool:
    """Whether `kernel` computes without an input it packed (a C kernel's ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS)."""
    return bool(getattr(kernel, "releases_packed", False))


def releasable(graph: Any, packed: Packed, releases: Callable[[int], bool], host_nodes: set[int],
               streamed: set[str] | frozenset[str] = frozenset()) -> dict[str, tuple[tuple[int, int], ...]]:
    """Initializers that every consumer packs and nothing else reads -> their (node index, input index) positions;
    `releases(node index)`: `releases_packed` of the node's kernel."""
    inits = graph.initializers
    blocked = set(graph.inputs) | set(graph.outputs) | set(streamed)
    readers: dict[str, list[tuple[int, int]]] = {}
    for node in graph.nodes:
        for name in node.implicit_inputs():  # read inside a subgraph: not a packed input
            blocked.add(name)
        for index, name in enumerate(node.inputs):
            if name in inits:
                readers.setdefault(name, []).append((node.index, index))
    out: dict[str, tuple[tuple[int, int], ...]] = {}
    for name, positions in readers.items():
        if name in blocked:
            continue
        nbytes = inits[name].nbytes
        if all(packed.get(p, 0) >= nbytes and p[0] in host_nodes and releases(p[0]) for p in positions):
            out[name] = tuple(positions)
    return out


def released_per_device(graph: Any, release: Mapping[str, tuple[tuple[int, int], ...]],
                        device_of_node: Mapping[int, str]) -> dict[str, int]:
    """Bytes of the `releasable` initializers per device (their consumers': one host device)."""
    per: dict[str, int] = {}
    for name, positions in release.items():
        device = device_of_node[positions[0][0]]
        per[device] = per.get(device, 0) + graph.initializers[name].nbytes
    return per
