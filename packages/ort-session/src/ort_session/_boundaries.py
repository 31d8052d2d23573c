"""Device copies at the final provider boundaries.

A value produced on one device and read on another gets one copy node per reading device, owned by
the reading device's provider (so the memory plan counts the copy where it lives). Graph inputs and
outputs live on the host: inputs read by a device node are copied to it, and graph outputs produced
on a device are copied back. Names derive from the value (`<value>/MemcpyFromHost`)."""

from __future__ import annotations

from collections.abc import Mapping

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


def insert_copies(graph: Graph, device_of_ep: Mapping[str, str], host_ep: str) -> list[CopyRecord]:
    """Insert copy nodes where a value crosses devices; sets each new node's `ep`."""
    def device(node: Node | None) -> str:
        return HOST if node is None else device_of_ep.get(node.ep or host_ep, HOST)

    ep_of_device = {d: ep for ep, d in device_of_ep.items()}
    ep_of_device.setdefault(HOST, host_ep)
    records: list[CopyRecord] = []
    for name in list(graph.values):
        value = graph.values[name]
        if name in graph.initializers:
            continue  # weights are placed with the node that reads them
        src = device(value.producer)
        readers: dict[str, list[Node]] = {}
        for consumer in value.consumers:
            if consumer.graph is not graph:
                continue
            readers.setdefault(device(consumer), []).append(consumer)
        wants_host_copy = name in graph.outputs and src != HOST
        for dst, nodes in readers.items():
            if dst == src:
                continue
            op = _copy_op(src, dst)
            out = f"{name}/{op}" if dst == HOST or src == HOST else f"{name}/{op}/{dst}"
            copy = _add_copy(graph, name, out, op, ep_of_device[dst], value.producer)
            for consumer in nodes:
                consumer.inputs = [out if i == name else i for i in consumer.inputs]
            records.append(CopyRecord(name, src, dst, copy.name))
        if wants_host_copy:
            staged = f"{name}/on_{src}"
            producer = value.producer
            producer.outputs = [staged if o == name else o for o in producer.outputs]
            value.producer = None
            for consumer in value.consumers:
                consumer.inputs = [staged if i == name else i for i in consumer.inputs]
            copy = _add_copy(graph, staged, name, "MemcpyToHost", host_ep, producer)
            records.append(CopyRecord(name, src, HOST, copy.name))
    if records:
        graph.relink()
    return records


def _add_copy(graph: Graph, src: str, dst: str, op: str, ep: str, producer: Node | None) -> Node:
    v = graph.values[src] if src in graph.values else graph.values[dst]
    position = graph.nodes.index(producer) + 1 if producer is not None else 0
    node = graph.add_node(op, [src], [dst], name=f"{src}/{op}", position=position)
    node.ep = ep
    for end in (graph.value(src), graph.value(dst)):
        if end.shape is None:
            end.dtype, end.shape = v.dtype, v.shape
    return node
