"""A control-flow body compiled once and run every iteration: what `_interp.run_graph` settles per call (the
topological order, last uses, each node's kernel, the weights' arrays) is settled here once per body and
opsets, and the runs of consecutive nodes that have C kernels are computed by the step runner (`_body_c`).

`BodyPlans` belongs to one control-flow node's kernel (`_ControlFlow.bind`: made at the first run, kept with the
kernel; the C kernels are created then and released with it). `BodyPlans.open(workspace)` is one node run:
it takes the arena from the node's declared workspace (`_bodies.body_bytes` counts it) and holds one StepRun
per body across the iterations. The numpy interpreter (`run_graph`) stays the reference: a body without C
steps, or a run whose arena or pool context is not to be had, computes the same values through the numpy
kernels here.

Where the time went before (Loop of 100 x (Identity, Mul, Add, Relu) on [1, 64], cProfile, 1 thread, about 28 us
an iteration on a loaded machine): a topological sort of the body and its last uses every iteration (~25%), the
value dict, the weights decoded and the kernel looked up per node (~35%), the numpy calls with their errstate
scopes (~25%), context variables and the rest (~15%). Compiled, its 4 nodes are one C call and an iteration
about 14 us, most of it the Loop's and the plan's host work around that call (feeds, describing 2 inputs,
copying the carried value out of the arena).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ort_abi import check_run, raised_by_run_checks
from ort_graph import Graph, Node

from ._bodies import _WEIGHTS, SubgraphNodeError, describe_body
from ._body_c import CBodyRun, CLayout, CRange, arena_view, c_layout, make_table
from ._errors import CpuOpError
from ._registry import _OUTPUT, _WORKSPACE, WorkspaceProvider, find

IF_MIN_C_STEPS = 8  # see BodyPlans.min_c_steps


class _Step:
    __slots__ = ("compute", "frees", "node", "reads", "weight")

    def __init__(self, node: Node, compute: Any, reads: list[str], weight: Any) -> None:
        self.node, self.compute, self.reads, self.weight, self.frees = node, compute, reads, weight, ()


class BodyPlan:
    """One body (`graph`) under `opsets`: its steps in order (`_Step` or `CRange`), what each frees after it,
    the weights by name (tensor identity, decoded array) and the C layout (None: every step in numpy)."""

    def __init__(self, graph: Graph, opsets: Mapping[str, int], use_c: bool) -> None:
        from ._interp import _order, node_opset

        self.graph, self.opsets = graph, dict(opsets)
        self.label = describe_body(graph)
        order = _order(graph)
        self.weights = [(name, id(t), t.numpy()) for name, t in graph.initializers.items()]
        self.layout: CLayout | None = c_layout(graph, order, opsets) if use_c else None
        self.table = make_table(self.layout) if self.layout is not None else None
        keep = set(graph.outputs)
        last: dict[str, int] = {}
        for i, node in enumerate(order):
            for name in list(node.inputs) + node.implicit_inputs():
                if name:
                    last[name] = i
        self._last_read, self._made_at = last, {o: i for i, n in enumerate(order) for o in n.outputs if o}
        self._in_place: dict[tuple, frozenset[int]] = {}
        c_steps = self.layout.steps if self.layout is not None else {}
        self.steps: list[Any] = []
        i = 0
        while i < len(order):
            if i in c_steps:
                j = i
                while j in c_steps:
                    j += 1
                self.steps.append(self._range(order, i, j, last, keep))
                frees = [n for k in range(i, j) for n in _reads(order[k]) if last.get(n, -1) < j and n not in keep]
                self.steps[-1].frees = tuple(dict.fromkeys(frees))
                i = j
                continue
            node = order[i]
            impl = find(node.op_type, node.domain, node_opset(node, opsets))
            if impl is None:
                raise CpuOpError(f"no CPU kernel for {node.qualified_op!r} at opset {node_opset(node, opsets)} in "
                                 f"{self.label}; run this node on another execution provider")
            weight = node.attr("value") if node.op_type == "Constant" else None
            step = _Step(node, impl.bind(node, node_opset(node, opsets)), _reads(node), weight)
            step.frees = tuple(n for n in dict.fromkeys(step.reads) if n and last.get(n) == i and n not in keep)
            self.steps.append(step)
            i += 1

    def _range(self, order: list[Node], i: int, j: int, last: Mapping[str, int], keep: set[str]) -> CRange:
        made = {o for k in range(i, j) for o in order[k].outputs if o}
        reads = [n for k in range(i, j) for n in order[k].inputs if n and n not in made]
        exports = [n for n in made if n in keep or last.get(n, -1) >= j]
        made_here = {o for n in order for o in n.outputs if o}
        stable = {n for n in reads if n not in made_here and n not in self.graph.inputs}
        return CRange(self.layout, i, j - i, list(dict.fromkeys(reads)), exports, stable)

    def release(self) -> None:
        if self.layout is not None:
            self.layout.release()

    def in_place(self, pairs: tuple[tuple[str, int], ...]) -> frozenset[int]:
        """Of `pairs` (body input, index of the output fed back to it next iteration: a Loop's or Scan's carried
        state), the output indices that may stay views of the C arena across the handoff: the output is made by a
        C step after every read of the input (its block is only overwritten once the input is dead), is one
        output only, and the input is not itself an output."""
        found = self._in_place.get(pairs)
        if found is None:
            outs, blocks = self.graph.outputs, self.layout.blocks if self.layout is not None else {}
            found = frozenset(k for name, k in pairs if outs[k] in blocks and outs.count(outs[k]) == 1
                              and name not in outs and self._last_read.get(name, -1) < self._made_at[outs[k]])
            self._in_place[pairs] = found
        return found

    def scope(self, outer: Mapping[str, Any]) -> dict[str, Any]:
        """The values every run of the body starts from: the outer scope's and the weights' arrays."""
        values: dict[str, Any] = dict(outer)
        given = _WEIGHTS.get()
        for name, ident, arr in self.weights:
            w = given.get(ident) if given is not None else None
            values[name] = arr if w is None else w
        return values

    def run(self, feeds: Mapping[str, Any], outer: Mapping[str, Any], c_run: CBodyRun | None,
            base: dict[str, Any] | None = None, views: frozenset[int] = frozenset()) -> list[Any]:
        """The body's outputs (in `graph.outputs` order) for `feeds` (by input name) and the outer scope's values
        (`base`: `scope(outer)` made before, for this node run). Outputs at `views` that C made stay arena views
        (`in_place`); the others leave the arena as copies."""
        values = self.scope(outer) if base is None else base.copy()
        values.update(feeds)
        graph = self.graph
        for name in graph.inputs:
            if name not in values:
                raise CpuOpError(f"graph {graph.name!r} needs inputs {[n for n in graph.inputs if n not in values]!r}; "
                                 "pass them in feeds")
        for step in self.steps:
            if type(step) is CRange:
                check_run(step.nodes[0].label)
                if c_run is not None:
                    self._c(step, values, c_run)
                else:
                    for node in step.nodes:
                        self._numpy(node, values)
            else:
                check_run(step.node.label)  # a terminated run stops between two nodes of a body too
                self._one(step, values)
            for name in step.frees:
                values.pop(name, None)
        try:
            outs = [values[name] for name in graph.outputs]
        except KeyError as e:
            raise CpuOpError(f"graph {graph.name!r} output {e.args[0]!r} was never computed") from None
        if c_run is not None:  # the arena is the next iteration's: what leaves the body is copied out of it
            owns = c_run.owns
            outs = [v if k in views or not owns(v) else np.array(v) for k, v in enumerate(outs)]
        return outs

    def _one(self, step: _Step, values: dict[str, Any]) -> None:
        node = step.node
        w = None
        if step.weight is not None:
            given = _WEIGHTS.get()
            w = given.get(id(step.weight)) if given is not None else None
        try:
            if w is not None:
                outs = [w]
            else:
                args = [values[n] if n else None for n in step.reads]
                outs = step.compute(args)
        except SubgraphNodeError as e:  # from a body nested in this node's: name this node too
            raise e.within(self.label) from e.cause
        except Exception as e:
            if raised_by_run_checks(e):
                raise
            if isinstance(e, KeyError) and e.args and e.args[0] in step.reads:
                e = CpuOpError(f"node {node.name!r} reads {e.args[0]!r}, which no node, input or initializer "
                               "defines; check the graph")
            raise SubgraphNodeError(node, e, [self.label]) from e
        _store(node, outs, values)

    def _numpy(self, node: Node, values: dict[str, Any]) -> list[Any]:
        from ._interp import run_node

        try:
            outs = run_node(node, values, self.opsets)
        except Exception as e:
            if raised_by_run_checks(e):
                raise
            raise SubgraphNodeError(node, e, [self.label]) from e
        _store(node, outs, values)
        return outs

    def _c(self, rng: CRange, values: dict[str, Any], c_run: CBodyRun) -> None:
        try:
            c_run.compute(rng, values, self._numpy)
        except SubgraphNodeError:
            raise
        except Exception as e:
            if raised_by_run_checks(e):
                raise
            node = next((n for n in rng.nodes if getattr(e, "node", None) in (n.name, n.label)), rng.nodes[0])
            raise SubgraphNodeError(node, e, [self.label]) from e


def _reads(node: Node) -> list[str]:
    return list(node.inputs) + node.implicit_inputs()


def _store(node: Node, outs: list[Any], values: dict[str, Any]) -> None:
    if len(outs) < sum(1 for o in node.outputs if o):
        raise SubgraphNodeError(node, CpuOpError(f"{node.qualified_op} kernel returned {len(outs)} outputs, node "
                                                 f"{node.name!r} expects {len(node.outputs)}"), [describe_body(node.graph)])
    for name, val in zip(node.outputs, outs):
        if name:
            values[name] = np.asarray(val) if isinstance(val, np.generic) else val


class BodyPlans:
    """The plans of one control-flow node's bodies, per body and opsets, made at first use and kept."""

    def __init__(self, node: Node, use_c: bool = True) -> None:
        self.node, self.use_c = node, use_c
        # a node run through the step runner has a fixed cost (a pool context held, the arena bound, the reads
        # described: measured ~60 us for the speech bench's If, one Mul) that a Loop or Scan spreads over its
        # iterations; an If runs its branch once, so its C steps take the runner only where there are enough
        # of them to win it back (each saves a few us against its numpy kernel)
        self.min_c_steps = IF_MIN_C_STEPS if node.op_type == "If" else 1
        self._plans: dict[tuple, BodyPlan] = {}
        self._last: tuple[int, Any, BodyPlan] | None = None  # (graph id, opsets dict, plan): the common case
        # per body, the C run of the last node run, closed (holding no arena): the next node run takes it again
        # over its own arena (`StepRun.restart`) instead of building one
        self.idle: dict[int, CBodyRun] = {}

    def plan(self, graph: Graph) -> BodyPlan:
        from ._interp import current_opsets

        opsets = current_opsets()
        last = self._last
        if last is not None and last[0] == id(graph) and last[1] is opsets:
            return last[2]
        key = (id(graph), tuple(sorted(opsets.items())))
        found = self._plans.get(key)
        if found is None:
            found = self._plans[key] = BodyPlan(graph, opsets, self.use_c)
        self._last = (id(graph), opsets, found)
        return found

    def arena_bytes(self) -> int:
        return max((p.layout.nbytes for p in self._plans.values() if p.layout is not None), default=0)

    def release(self) -> None:
        for run in self.idle.values():
            run.drop()
        self.idle.clear()
        for p in self._plans.values():
            p.release()
        self._plans.clear()
        self._last = None


class BodyRuns:
    """One run of the node: each body's plan and held StepRun over the arena (the node's workspace block)."""

    def __init__(self, plans: BodyPlans, workspace: WorkspaceProvider | None, declared: int | None) -> None:
        self.plans, self._workspace, self._declared = plans, workspace, declared
        self._runs: dict[int, tuple[BodyPlan, CBodyRun | None, Mapping[str, Any], dict[str, Any]]] = {}

    def run(self, graph: Graph, feeds: Mapping[str, Any], outer: Mapping[str, Any],
            carried: tuple[tuple[str, int], ...] = ()) -> list[Any]:
        """`graph`'s outputs for `feeds`. `carried`: (body input, output index) pairs of state the caller feeds
        back next iteration; those `BodyPlan.in_place` allows come back as arena views (`detach` them before they
        leave the node)."""
        found = self._runs.get(id(graph))
        if found is None or found[2] is not outer:
            plan = found[0] if found is not None else self.plans.plan(graph)
            c_run = found[1] if found is not None else self._open(plan)
            found = self._runs[id(graph)] = (plan, c_run, outer, plan.scope(outer))
        plan, c_run = found[0], found[1]
        views = plan.in_place(carried) if carried and c_run is not None else frozenset()
        return plan.run(feeds, outer, c_run, found[3], views)

    def detach(self, graph: Graph, values: list[Any]) -> list[Any]:
        """`values` with any view of `graph`'s C arena copied out (what leaves the node after carried views)."""
        found = self._runs.get(id(graph))
        c_run = found[1] if found is not None else None
        return values if c_run is None else [np.array(v) if c_run.owns(v) else v for v in values]

    def _open(self, plan: BodyPlan) -> CBodyRun | None:
        layout = plan.layout
        if (layout is None or plan.table is None or self._declared is None or layout.nbytes > self._declared
                or len(layout.steps) < self.plans.min_c_steps):
            return None  # no C steps, or an arena the node did not declare: the numpy kernels
        # the node's workspace block in a session run (asked once a body has C steps); outside one a fresh array
        block = self._workspace(0, self._declared) if self._workspace is not None else None
        arena = arena_view(block, layout.nbytes)
        if arena is None:
            return None
        idle = self.plans.idle.pop(id(plan.graph), None)
        if idle is not None:
            if idle.layout is layout and idle.reopen(arena):
                return idle
            idle.drop()
        run = CBodyRun(layout, plan.table, arena)
        if not run.usable:
            run.drop()
            return None
        return run

    def close(self) -> None:
        for key, (_plan, run, _outer, _base) in self._runs.items():
            if run is None:
                continue
            if key not in self.plans.idle:  # for the next node run (a nested node's: the next outer iteration's)
                run.close()
                self.plans.idle[key] = run
            else:
                run.drop()
        self._runs.clear()

    def __enter__(self) -> BodyRuns:
        # the values of a body are not planned: its nodes get fresh outputs and scratch, never the blocks and
        # workspace of the node that runs it (whose workspace provider this object took at its construction)
        self._tokens = _OUTPUT.set(None), _WORKSPACE.set(None)
        return self

    def __exit__(self, *exc: Any) -> None:
        out_token, ws_token = self._tokens
        _WORKSPACE.reset(ws_token)
        _OUTPUT.reset(out_token)
        self.close()


__all__ = ["BodyPlan", "BodyPlans", "BodyRuns"]
