"""Kernel workspace slots as one-step blocks, run-long blocks, and the joint plan of activations and workspace.

A kernel declares slots `(node_index, slot_id) -> bytes`. Each slot becomes a request live only
at its node's step, with a synthetic negative id (-1, -2, ...) that can never collide with a
value id (>= 0), so the planner packs workspace into activation memory that is dead at that step (or, on a device where
that plan is the larger, gives the workspace an arena of its own: `_layout`).

A run-long block `key -> (device, bytes)` (e.g. a weight-streaming slot) is live from the first step
to the last, with the next negative ids after the workspace slots: it is placed in its device's arena
beside the activations, so the device's planned peak covers it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from ._bound import lower_bound
from ._buffers import Allocator, ExecutionBuffers
from ._errors import InvalidRequestError, LookupMissError
from ._graph import Activations, activation_lifetimes
from ._layout import plan_with_workspace
from ._types import DEFAULT_ALIGNMENT, AllocationRequest, MemoryPlan

if TYPE_CHECKING:
    from ort_graph import Graph, Node

SlotKey = tuple[int, int]


def workspace_requests(slots: Mapping[SlotKey, int], node_steps: Mapping[int, int],
                       node_devices: Sequence[str], *, alignment: int = DEFAULT_ALIGNMENT,
                       ) -> dict[SlotKey, AllocationRequest]:
    """One request per slot, live at its node's step only, with ids -1, -2, ... in key order."""
    out: dict[SlotKey, AllocationRequest] = {}
    for k, key in enumerate(sorted(slots)):
        node_index, slot_id = key
        nbytes = slots[key]
        step = node_steps.get(node_index)
        if step is None:
            raise InvalidRequestError(
                f"workspace slot {key!r} names node index {node_index!r}, which is not in the execution "
                "order; declare workspace only for nodes that run")
        if not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidRequestError(f"workspace slot {key!r} asks for {nbytes!r} bytes; pass an int >= 0")
        out[key] = AllocationRequest(-(k + 1), nbytes, step, step, node_devices[step], alignment)
    return out


def run_long_requests(blocks: Mapping[str, tuple[str, int]], steps: int, first_id: int, *,
                      alignment: int = DEFAULT_ALIGNMENT) -> dict[str, AllocationRequest]:
    """One request per run-long block, live at every step (0 .. steps - 1), with ids first_id, first_id - 1, ..."""
    out: dict[str, AllocationRequest] = {}
    for k, key in enumerate(blocks):
        device, nbytes = blocks[key]
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise InvalidRequestError(f"run-long block {key!r} asks for {nbytes!r} bytes; pass an int >= 0")
        if steps <= 0:
            raise InvalidRequestError(f"run-long block {key!r} needs at least one step in the execution order; "
                                      "the order is empty")
        out[key] = AllocationRequest(first_id - k, nbytes, 0, steps - 1, device, alignment)
    return out


@attrs.define(frozen=True)
class GraphPlan:
    """One plan for a graph's activations and kernel workspace, per device, with lookups.

    `lower_bound` (on `plan`) counts in-place reuse; `lower_bound_without_inplace` is the bound
    the same activations and workspace would have if no value were written in place.
    """

    plan: MemoryPlan
    activations: Activations
    slot_requests: Mapping[SlotKey, AllocationRequest]
    names: Mapping[int, str]
    by_id: Mapping[int, AllocationRequest] = attrs.field(repr=False)
    red_zone: int = 0
    run_requests: Mapping[str, AllocationRequest] = attrs.field(factory=dict)
    # device -> "packed" (workspace in the activations' arena) or "separate" (a workspace arena after it)
    workspace_layout: Mapping[str, str] = attrs.field(factory=dict)

    @functools.cached_property
    def lower_bound_without_inplace(self) -> Mapping[str, int]:
        """Computed when first read (auto-fit's trials never read it)."""
        return lower_bound([*self.activations.plain_requests, *self.slot_requests.values(),
                            *self.run_requests.values()], self.red_zone)

    @property
    def requests(self) -> tuple[AllocationRequest, ...]:
        return (*self.activations.requests, *self.slot_requests.values(), *self.run_requests.values())

    @property
    def lower_bound(self) -> Mapping[str, int]:
        return self.plan.lower_bound

    def value_block(self, name: str) -> tuple[str, int, int]:
        """(device, offset, nbytes) of a planned value (an in-place output shares its input's block)."""
        rid = self.activations.value_ids.get(name)
        if rid is None:
            why = ("its size is unknown (dynamic shape)" if name in self.activations.unknown_sizes
                   else "it is not an activation of this order (initializer or unknown name?)")
            raise LookupMissError(f"value {name!r} has no planned block: {why}; allocate it dynamically")
        req = self.by_id[rid]
        return req.device, self.plan.offsets[rid], req.nbytes

    def largest(self, device: str, count: int = 3) -> list[tuple[str, int]]:
        """The `count` largest planned blocks on `device`, as (name, bytes), largest first: what to look at
        when its plan is over a budget (a value's name, "workspace of 'node' slot N", a run-long key)."""
        mine = sorted((r for r in self.requests if r.device == device), key=lambda r: (-r.nbytes, r.id))
        return [(self.names.get(r.id, str(r.id)), r.nbytes) for r in mine[:count]]

    def offset_of(self, name: str) -> int:
        return self.value_block(name)[1]

    def buffers(self, allocators: Mapping[str, Allocator], budgets: Mapping[str, int] | None = None,
                ) -> ExecutionBuffers:
        """Pre-allocated execution buffers for this plan (fails here if a budget is too small)."""
        return ExecutionBuffers(self.plan, allocators, requests=self.by_id, budgets=budgets, names=self.names)

    def workspace(self, node_index: int, slot_id: int) -> tuple[int, int]:
        """(offset, nbytes) of a declared workspace slot in its device's buffer."""
        req = self.slot_requests.get((node_index, slot_id))
        if req is None:
            raise LookupMissError(
                f"no workspace slot {(node_index, slot_id)!r} in the plan "
                f"({len(self.slot_requests)} slots declared); fall back to a scratch allocation")
        return self.plan.offsets[req.id], req.nbytes

    def run_block(self, key: str) -> tuple[str, int, int]:
        """(device, offset, nbytes) of a run-long block in its device's buffer."""
        req = self.run_requests.get(key)
        if req is None:
            raise LookupMissError(f"no run-long block {key!r} in the plan (planned: {sorted(self.run_requests)!r}); "
                                  "pass it to plan_graph(run_long=...)")
        return req.device, self.plan.offsets[req.id], req.nbytes


def plan_graph(graph: Graph, order: Sequence[Node], device_of: Callable[[Node], str], *,
               workspace: Mapping[SlotKey, int] | None = None, inplace: bool = True,
               algorithm: str = "auto", alignment: int = DEFAULT_ALIGNMENT, red_zone: int = 0,
               input_device: str | None = None, value_devices: Mapping[str, str] | None = None,
               run_long: Mapping[str, tuple[str, int]] | None = None) -> GraphPlan:
    """Plan activations (and declared workspace slots) of `graph` run in `order`, per device (graph
    inputs on `input_device` when given, see `activation_lifetimes`). `run_long`: blocks
    `key -> (device, bytes)` live for the whole run (first step to last), planned with the rest. Per device the
    workspace is packed with the activations or given its own arena, whichever is smaller (`_layout`;
    `workspace_layout` says which)."""
    acts = activation_lifetimes(graph, order, device_of, inplace=inplace, alignment=alignment,
                                input_device=input_device, value_devices=value_devices)
    slots = workspace_requests(workspace or {}, acts.node_steps, acts.node_devices, alignment=alignment)
    names = dict(acts.names)
    for (_node, slot_id), req in slots.items():
        names[req.id] = f"workspace of {acts.node_names[req.first]!r} slot {slot_id}"
    run_reqs = run_long_requests(run_long or {}, len(order), -(len(slots) + 1), alignment=alignment) \
        if run_long else {}
    for key, req in run_reqs.items():
        names[req.id] = key
    requests = [*acts.requests, *slots.values(), *run_reqs.values()]
    mplan, layout = plan_with_workspace([*acts.requests, *run_reqs.values()], list(slots.values()), algorithm,
                                        red_zone)
    return GraphPlan(plan=mplan, activations=acts, slot_requests=slots, names=names,
                     by_id={r.id: r for r in requests}, red_zone=red_zone, run_requests=run_reqs,
                     workspace_layout=layout)
