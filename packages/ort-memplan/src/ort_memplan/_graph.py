"""Graph adapter: activation lifetimes from an ort_graph Graph and a sequential execution order.

Step t is the t-th node of the order. A node's outputs are live from its step to the step of
their last reader (subgraph readers count at their parent's step). Graph inputs are live from
step 0; graph outputs stay live until the last step, so their bytes are never reused.
Initializers are weights, not activations, and are left out. Values whose size is not static
are listed in `unknown_sizes` (they need a dynamic allocation), never silently dropped.

In-place reuse: an elementwise or reshape-like node may write its output over an input that
dies at its step (as ONNX Runtime's may-in-place kernels and ggml's allocator do) when the
input is an activation of at least the output's size on the same device, and neither is a
graph input, graph output or initializer. The two values then share one request (one block).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from . import _bound
from ._errors import InvalidRequestError, SizeOverflowError
from ._types import DEFAULT_ALIGNMENT, MAX_BYTES, AllocationRequest, align_up

if TYPE_CHECKING:  # ort_graph is only needed for the types; the adapter reads plain attributes
    from ort_graph import Graph, Node

UNARY_INPLACE = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Elu", "Erf", "Exp",
    "Floor", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal",
    "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan",
    "Tanh", "ThresholdedRelu", "Celu", "Clip", "Cast", "Dropout", "FastGelu", "QuickGelu", "BiasGelu",
})
BINARY_INPLACE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "And", "Or", "Xor", "PRelu", "Sum", "Mean",
    "Where", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
})
ALIAS_INPLACE = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})  # input 0 only


def may_inplace(node: Node) -> tuple[int, ...]:
    """Positions of the inputs `node`'s first output may overwrite (empty: none)."""
    if node.domain not in ("", "ai.onnx", "com.microsoft"):
        return ()
    if node.op_type == "Cast" and not _same_bytes(node):
        return ()  # a narrowing cast written over its input races on a GPU (element i overwrites input i/2)
    if node.op_type in ALIAS_INPLACE or node.op_type in UNARY_INPLACE:
        return (0,)
    if node.op_type in BINARY_INPLACE:
        return tuple(range(len(node.inputs)))
    return ()


def _same_bytes(node: Node) -> bool:
    """Input 0 and output 0 have the same known byte size (for a Cast: the same element size)."""
    values = getattr(node.graph, "values", {}) if node.graph is not None else {}
    src = values.get(node.inputs[0]) if node.inputs else None
    dst = values.get(node.outputs[0]) if node.outputs else None
    nb = (getattr(src, "nbytes", None), getattr(dst, "nbytes", None))
    return nb[0] is not None and nb[0] == nb[1]


@attrs.define(frozen=True)
class Activations:
    """Activation requests of one execution order, with the bookkeeping to map them back.

    `value_ids` maps every planned value to its request id (in-place aliases share the id of the
    value they overwrite); `names` maps a request id to a readable name; `inplace` maps an output
    to the input whose block it reuses. `lower_bound` is computed on the requests as planned,
    `lower_bound_without_inplace` (and `plain_requests`) as if no value were written in place; both
    are computed when first read (auto-fit's trials never read them).
    """

    requests: tuple[AllocationRequest, ...]
    value_ids: Mapping[str, int]
    names: Mapping[int, str]
    unknown_sizes: tuple[str, ...]
    inplace: Mapping[str, str]
    node_steps: Mapping[int, int]
    node_names: tuple[str, ...]
    node_devices: tuple[str, ...]
    # (name, nbytes, first, last, device) of every value before in-place merging, and their alignment
    _blocks: tuple[tuple[str, int, int, int, str], ...] = attrs.field(default=(), repr=False, alias="blocks")
    _alignment: int = attrs.field(default=DEFAULT_ALIGNMENT, repr=False, alias="alignment")

    @functools.cached_property
    def plain_requests(self) -> tuple[AllocationRequest, ...]:
        """One request per value, as if none were written in place (made when first read)."""
        return tuple(AllocationRequest(i, nb, f, la, dev, self._alignment)
                     for i, (_, nb, f, la, dev) in enumerate(self._blocks))

    @functools.cached_property
    def lower_bound(self) -> Mapping[str, int]:
        return _bound.lower_bound(self.requests)

    @functools.cached_property
    def lower_bound_without_inplace(self) -> Mapping[str, int]:
        return _bound.lower_bound(self.plain_requests)

    @property
    def steps(self) -> int:
        return len(self.node_names)


def activation_lifetimes(graph: Graph, order: Sequence[Node], device_of: Callable[[Node], str], *,
                         inplace: bool = True, alignment: int = DEFAULT_ALIGNMENT,
                         input_device: str | None = None,
                         value_devices: Mapping[str, str] | None = None) -> Activations:
    """Requests for the activations of `graph` run in `order`, one device per node by `device_of`.
    Graph inputs live on `input_device` (a session's host, where feeds arrive) when given, else on
    the device of their first reader. `value_devices` overrides the device of node outputs by name
    (a device kernel's output in host memory, as ONNX Runtime's CPU output memory type)."""
    value_devices = value_devices or {}
    order = list(order)
    steps = len(order)
    end = max(steps - 1, 0)
    devices = [str(device_of(n)) for n in order]
    node_steps: dict[int, int] = {}
    for t, node in enumerate(order):
        if node.index in node_steps:
            raise InvalidRequestError(f"node {node.name!r} (index {node.index!r}) appears twice in the "
                                      "execution order; pass each node once")
        node_steps[node.index] = t
    outputs = set(graph.outputs)
    inits = graph.initializers
    last_use, first_reader = _reads(graph, order)

    def size_of(name: str) -> int | None:
        v = graph.values.get(name)
        nb = None if v is None else v.nbytes
        if nb is not None and nb + alignment > MAX_BYTES and align_up(nb, alignment) > MAX_BYTES:
            raise SizeOverflowError(
                f"value {name!r} (shape {v.shape!r}, dtype {v.dtype!r}) needs {nb!r} bytes, more than the "  # type: ignore[union-attr]
                f"{MAX_BYTES!r} (int64) any plan can address; its shape is wrong or unresolved: fix the "
                "model's shape (or the dims/max shapes it was resolved with) so the value fits in memory")
        return nb

    # (name, nbytes, first, last, device) in planning order: graph inputs, then node outputs
    blocks: list[tuple[str, int, int, int, str]] = []
    unknown: list[str] = []
    for name in graph.inputs:
        if name in inits:
            continue
        nb = size_of(name)
        if nb is None:
            unknown.append(name)
            continue
        reader = first_reader.get(name)
        dev = input_device or (devices[reader] if reader is not None else (devices[0] if devices else "cpu"))
        last = end if name in outputs else last_use.get(name, 0)
        blocks.append((name, nb, 0, last, dev))
    for t, node in enumerate(order):
        for o in node.outputs:
            if not o:
                continue
            nb = size_of(o)
            if nb is None:
                unknown.append(o)
                continue
            last = end if o in outputs else max(last_use.get(o, t), t)
            blocks.append((o, nb, t, last, value_devices.get(o, devices[t])))

    index = {b[0]: i for i, b in enumerate(blocks)}
    alias: dict[str, str] = {}
    if inplace:
        alias = _find_inplace(graph, order, blocks, index, last_use, outputs)
    # merge alias chains into one request (root = the value first written)
    root_of: dict[str, str] = {}
    for b in blocks:
        name = b[0]
        src = alias.get(name)
        root_of[name] = root_of[src] if src is not None else name
    merged: dict[str, list[int]] = {}
    members: dict[str, list[str]] = {}
    for name, nb, f, la, _dev in blocks:
        r = root_of[name]
        if r not in merged:
            merged[r] = [nb, f, la]
            members[r] = [name]
        else:
            m = merged[r]
            m[0], m[2] = max(m[0], nb), max(m[2], la)
            members[r].append(name)
    requests = tuple(AllocationRequest(index[r], nb, f, la, blocks[index[r]][4], alignment)
                     for r, (nb, f, la) in merged.items())
    names = {index[r]: (r if len(ms) == 1 else f"{r} (+{len(ms) - 1} in place)") for r, ms in members.items()}
    return Activations(
        requests=requests, blocks=tuple(blocks), alignment=alignment, value_ids={b[0]: index[root_of[b[0]]] for b in blocks}, names=names,
        unknown_sizes=tuple(unknown), inplace=alias, node_steps=node_steps,
        node_names=tuple(n.name for n in order), node_devices=tuple(devices))


def _reads(graph: Any, order: Sequence[Node]) -> tuple[dict[str, int], dict[str, int]]:
    """(last step reading each value, first step reading it): initializers left out, subgraph readers at their
    parent's step; a value read before its producer runs is an error."""
    inits = graph.initializers
    producer_step: dict[str, int] = {}
    for t, node in enumerate(order):
        for o in node.outputs:
            if o:
                producer_step[o] = t
    last_use: dict[str, int] = {}
    first_reader: dict[str, int] = {}
    for t, node in enumerate(order):
        for name in [*node.inputs, *node.implicit_inputs()]:
            if not name or name in inits:
                continue
            p = producer_step.get(name)
            if p is not None and p > t:
                raise InvalidRequestError(
                    f"node {node.name!r} at step {t} reads {name!r} before its producer "
                    f"{order[p].name!r} runs at step {p}; pass a topological order "
                    "(ort_graph.topological_order)")
            last_use[name] = t
            first_reader.setdefault(name, t)
    return last_use, first_reader


def _find_inplace(graph: Any, order: list[Node], blocks: list[tuple[str, int, int, int, str]],
                  index: dict[str, int], last_use: dict[str, int], outputs: set[str]) -> dict[str, str]:
    def fits(x: str, out: str) -> bool:  # an activation of at least the output's size, on its device
        if x not in index or out not in index:
            return False
        _, out_nb, _, _, out_dev = blocks[index[out]]
        _, x_nb, _, _, x_dev = blocks[index[x]]
        return x_dev == out_dev and x_nb >= out_nb

    alias: dict[str, str] = {}
    taken: set[str] = set()
    for out, inputs in _inplace_options(graph, order, last_use, outputs, fits).items():
        x = next((x for x in inputs if x not in taken), None)
        if x is not None:
            alias[out] = x
            taken.add(x)
    return alias


def _inplace_options(graph: Any, order: Sequence[Node], last_use: Mapping[str, int], outputs: set[str],
                     fits: Callable[[str, str], bool]) -> dict[str, tuple[str, ...]]:
    """output -> the inputs it may overwrite, in the node's order: per node that may write its first output in
    place (`may_inplace`, not a graph output), each such input that dies at the node's step, is no graph input,
    output or initializer, and `fits`."""
    options: dict[str, tuple[str, ...]] = {}
    graph_inputs = set(graph.inputs)
    for t, node in enumerate(order):
        positions = may_inplace(node)
        if not positions or not node.outputs or not node.outputs[0] or node.outputs[0] in outputs:
            continue
        out = node.outputs[0]
        found = tuple(dict.fromkeys(
            x for x in (node.inputs[p] for p in positions if p < len(node.inputs))
            if x and x not in graph_inputs and x not in outputs and x not in graph.initializers
            and last_use.get(x) == t and fits(x, out)))
        if found:
            options[out] = found
    return options


def inplace_candidates(graph: Any, order: Sequence[Node],
                       device_of_value: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """output -> the inputs the static plan's in-place reuse could write it over, without sizes (values of symbolic
    shape): a run that traces its pattern writes an output over the first of them whose block holds it and that no
    other output took (ort-session's TracingLayout)."""
    last_use, _ = _reads(graph, order)
    return _inplace_options(graph, order, last_use, set(graph.outputs),
                            lambda x, out: device_of_value.get(x, "cpu") == device_of_value.get(out, "cpu"))
