"""Device copies at the final provider boundaries.

A value produced on one device and read on another gets one copy node per reading device, owned by
the reading device's provider (so the memory plan counts the copy where it lives). Graph inputs and
outputs live on the host: inputs read by a device node are copied to it, and graph outputs produced
on a device are copied back. Names derive from the value (`<value>/MemcpyFromHost`); where the model already
uses that name (names are the model's, untrusted) or two devices copy one value, a `#<n>` suffix keeps them
unique."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from ort_graph import Graph, Node

HOST = "cpu"


@attrs.frozen
class CopyRecord:
    value: str
    src: str
    dst: str
    node: str


def _copy_op(src: str, dst: str) -> str:
    if src == HOST:
        return "MemcpyFromHost"
    if dst == HOST:
        return "MemcpyToHost"
    return "MemcpyDeviceToDevice"


def insert_copies(graph: Graph, device_of_ep: Mapping[str, str], host_ep: str,
                  memory_types: Callable[[Node], tuple[tuple[int, ...], tuple[int, ...]]] | None = None
                  ) -> list[CopyRecord]:
    """Insert copy nodes where a value crosses devices; sets each new node's `ep`. `memory_types(node)`
    gives the (input, output) positions a device kernel keeps in host memory: those are read or made
    on the host, so they need no copy to (or from) the device."""
    types = memory_types or (lambda node: ((), ()))
    # each node's device, computed once (the loop below asks for it per value it reads)
    devices = {id(n): device_of_ep.get(n.ep or host_ep, HOST) for n in graph.nodes}

    def device(node: Node | None) -> str:
        if node is None:
            return HOST
        found = devices.get(id(node))
        return found if found is not None else device_of_ep.get(node.ep or host_ep, HOST)

    ep_of_device = {d: ep for ep, d in device_of_ep.items()}
    ep_of_device.setdefault(HOST, host_ep)
    records: list[CopyRecord] = []
    originals = list(graph.nodes)
    added: list[tuple[Node | None, Node]] = []  # (producer, copy) in the order the copies were made
    graph_outputs = set(graph.outputs)  # copies change no output of this graph
    taken = set(graph.values)  # value names; node names are checked apart (a copy node shares its output's)
    node_names = {n.name for n in graph.nodes if n.name}
    for name in list(graph.values):
        value = graph.values[name]
        if name in graph.initializers and name not in graph.inputs:
            continue  # weights are placed with the node that reads them; an overridable one is copied as an input is
        producer = value.producer
        src = device(producer)
        if src == HOST and all(c.graph is not graph or device(c) == HOST for c in value.consumers):
            continue  # made and read on the host: nothing crosses
        if producer is not None and src != HOST:
            position = producer.outputs.index(name)
            if position in types(producer)[1]:
                src = HOST
        readers: dict[str, list[tuple[Node, int]]] = {}
        for consumer in value.consumers:
            if consumer.graph is not graph:
                continue
            consumer_device = device(consumer)  # a host consumer reads on the host whatever its memory types
            host_inputs = types(consumer)[0] if consumer_device != HOST else ()
            for position, i in enumerate(consumer.inputs):
                if i == name:
                    dst = HOST if position in host_inputs else consumer_device
                    readers.setdefault(dst, []).append((consumer, position))
            if consumer.attributes and name in consumer.implicit_inputs():
                readers.setdefault(consumer_device, []).append((consumer, -1))
        wants_host_copy = src != HOST and name in graph_outputs
        for dst, reads in readers.items():
            if dst == src:
                continue
            op = _copy_op(src, dst)
            out = _fresh(taken, f"{name}/{op}" if dst == HOST or src == HOST else f"{name}/{op}/{dst}")
            copy = _add_copy(graph, name, out, op, ep_of_device[dst], producer, added, node_names)
            for consumer, position in reads:
                if position < 0:  # read inside the consumer's subgraphs: they read the copy instead
                    for sub in consumer.subgraphs:
                        sub.rename_outer_reference(name, out)
                else:
                    inputs = list(consumer.inputs)
                    inputs[position] = out
                    consumer.inputs = inputs
            records.append(CopyRecord(name, src, dst, copy.name))
        if wants_host_copy:
            staged = _fresh(taken, f"{name}/on_{src}")
            producer.outputs = [staged if o == name else o for o in producer.outputs]
            value.producer = None
            for consumer in value.consumers:
                consumer.inputs = [staged if i == name else i for i in consumer.inputs]
            copy = _add_copy(graph, staged, name, "MemcpyToHost", host_ep, producer, added, node_names)
            records.append(CopyRecord(name, src, HOST, copy.name))
    if records:
        graph.nodes[:] = _positioned(originals, added)
        graph.relink()
    return records


def _positioned(originals: list[Node], added: list[tuple[Node | None, Node]]) -> list[Node]:
    """The node list with each copy right after its producer (a graph input's copy first), the copy made
    last nearest: what inserting each one at its producer's position + 1 gives, in one pass."""
    front: list[Node] = []
    after: dict[int, list[Node]] = {}
    for producer, copy in reversed(added):
        (front if producer is None else after.setdefault(id(producer), [])).append(copy)
    out = front
    for node in originals:
        out.append(node)
        out.extend(after.get(id(node), ()))
    return out


def _fresh(taken: set[str], base: str) -> str:
    """`base`, or `base#<n>` with the smallest n not in `taken` (names the graph uses); reserved."""
    name, n = base, 1
    while name in taken:
        name, n = f"{base}#{n}", n + 1
    taken.add(name)
    return name


def _add_copy(graph: Graph, src: str, dst: str, op: str, ep: str, producer: Node | None,
              added: list[tuple[Node | None, Node]], node_names: set[str]) -> Node:
    """A copy node appended to the graph (`insert_copies` puts it after its producer at the end)."""
    v = graph.values[src] if src in graph.values else graph.values[dst]
    node = graph.add_node(op, [src], [dst], name=_fresh(node_names, f"{src}/{op}"))
    added.append((producer, node))
    node.ep = ep
    for end in (graph.value(src), graph.value(dst)):
        if end.shape is None:
            end.dtype, end.shape = v.dtype, v.shape
    return node
