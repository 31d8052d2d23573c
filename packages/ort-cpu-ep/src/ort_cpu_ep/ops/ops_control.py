"""Control flow: If, Loop, Scan. Subgraphs run with the sequential interpreter; the kernels receive
the node's implicit (outer-scope) inputs after the explicit ones.

Every iteration asks the run's checks first (`ort_abi.check_run`: a terminated run stops here, inside a Loop
of 2**40 iterations or a nested body, not after it), and Loop and Scan report the bytes their scan outputs
have accumulated (`ort_abi.check_growth`) so that a run's memory bound refuses an output that grows without a
static bound before it is exceeded. One body node's numpy call is not interruptible: the checks run between
nodes and iterations."""

from __future__ import annotations

import numpy as np

from ort_abi import check_growth, check_run
from ort_graph import Graph, Node, to_numpy_dtype

from ._bodies import body_bytes, body_weight_scope, host_weights, split_inputs
from ._body_plan import BodyPlans, BodyRuns
from ._registry import _WORKSPACE, Decline, OpImpl, register
from ._util import norm_axis


class _ControlFlow(OpImpl):
    """The common part of If / Loop / Scan: inputs split into explicit, outer-scope values and the bodies'
    weights (`_bodies`); the bodies' memory declared as the node's workspace; their weights read once."""

    implicit_inputs = True

    def workspace_bytes(self, node, input_shapes):
        nbytes = body_bytes(node)
        return [(0, nbytes)] if nbytes else []

    def bind(self, node, opset):
        cached: list = []  # decoded at the first run without device copies (a node on the CPU), then kept
        plans = BodyPlans(node)  # the bodies compiled, their C kernels created, at the first run; kept with the kernel
        declared: list = []
        ne, implicit = len(node.inputs), node.implicit_inputs()  # walked once (it visits every body node)
        end = ne + len(implicit)

        def run(inputs):
            explicit, outer, weights = inputs[:ne], dict(zip(implicit, inputs[ne:end])), inputs[end:]
            if not weights and not cached:
                cached.append(host_weights(node))
            if not declared:
                declared.append(body_bytes(node))
            with body_weight_scope(node, weights, None if weights else cached[0]), \
                    BodyRuns(plans, _WORKSPACE.get(), declared[0]) as bodies:
                return self.run(node, explicit, outer, bodies)

        return run

    def compute(self, node, inputs):
        explicit, outer, weights = split_inputs(node, inputs)
        plans = BodyPlans(node)
        try:
            with body_weight_scope(node, weights, None), BodyRuns(plans, None, body_bytes(node)) as bodies:
                return self.run(node, explicit, outer, bodies)
        finally:
            plans.release()

    def run(self, node: Node, inputs: list, outer: dict, bodies: BodyRuns) -> list:
        raise NotImplementedError


def _empty_like_output(g: Graph, name: str) -> np.ndarray:
    v = g.values.get(name)
    dt = to_numpy_dtype(v.dtype) if v is not None and v.dtype else np.dtype(np.float32)
    shape = v.shape if v is not None and v.shape is not None and all(isinstance(d, int) for d in v.shape) else ()
    return np.zeros((0, *shape), dtype=dt)


def _nbytes(x: object) -> int:
    if isinstance(x, list):
        return sum(_nbytes(e) for e in x)
    return int(getattr(x, "nbytes", 0))


def _run(g: Graph, feeds: dict, outer: dict) -> list:
    from ._interp import run_graph

    out = run_graph(g, feeds, outer)
    return [out[o] for o in g.outputs]


@register("If", since=1)
class If(_ControlFlow):
    def run(self, node, inputs, outer, bodies):
        cond = bool(np.asarray(inputs[0]).reshape(-1)[0])
        g = node.attr("then_branch") if cond else node.attr("else_branch")
        return bodies.run(g, {}, outer)


@register("Loop", since=1)
class Loop(_ControlFlow):
    def run(self, node, inputs, outer, bodies):
        body: Graph = node.attr("body")
        ne = len(node.inputs)
        m = inputs[0]
        trip = None if m is None else int(np.asarray(m).reshape(-1)[0])
        cond = True if inputs[1] is None else bool(np.asarray(inputs[1]).reshape(-1)[0])
        carried = list(inputs[2:ne])
        n_carried = len(carried)
        n_scan = len(body.outputs) - 1 - n_carried
        scans: list[list] = [[] for _ in range(n_scan)]
        names = body.inputs
        # the iteration number: one array written in place (described to C once) unless the body returns it
        counter = np.zeros((), np.int64) if names[0] not in body.outputs else None
        # state fed back to the body (cond included) may stay a view of its C arena where liveness allows
        carry = tuple((name, k) for k, name in enumerate(names[1:2 + n_carried]))
        cond_in: object = np.array(cond)
        i = held = 0
        while (trip is None or i < trip) and cond:
            check_run(node.label)
            if counter is None:
                it = np.array(i, dtype=np.int64)
            else:
                counter[()] = i
                it = counter
            feeds = {names[0]: it, names[1]: cond_in}
            feeds.update(zip(names[2:], carried))
            outs = bodies.run(body, feeds, outer, carry)
            c = outs[0]
            cond = bool(c.reshape(-1)[0] if type(c) is np.ndarray else np.asarray(c).reshape(-1)[0])
            cond_in = c if type(c) is np.ndarray and c.dtype == np.bool_ and c.ndim == 0 else np.array(cond)
            carried = outs[1:1 + n_carried]
            for k in range(n_scan):
                scans[k].append(outs[1 + n_carried + k])
                held += _nbytes(outs[1 + n_carried + k])
            if n_scan:
                check_growth(node.label, held)
            i += 1
        carried = bodies.detach(body, carried)
        scan_out = []
        for k in range(n_scan):
            if scans[k] and isinstance(scans[k][0], list):
                scan_out.append(scans[k])
            elif scans[k]:
                scan_out.append(np.stack(scans[k]))
            else:
                scan_out.append(_empty_like_output(body, body.outputs[1 + n_carried + k]))
        return carried + scan_out


@register("Scan", since=9)
class Scan(_ControlFlow):
    def supports(self, node, inputs, opset):
        if node.attr("body") is None or node.attr("num_scan_inputs") is None:
            return Decline(rejected="Scan without body/num_scan_inputs", accepts="a well-formed Scan",
                           remedy="fix the model")
        return None

    def run(self, node, inputs, outer, bodies):
        body: Graph = node.attr("body")
        ne = len(node.inputs)
        m = node.attr("num_scan_inputs")
        n_state = ne - m
        state = list(inputs[:n_state])
        xs = list(inputs[n_state:ne])
        in_axes = node.attr("scan_input_axes") or [0] * m
        in_dirs = node.attr("scan_input_directions") or [0] * m
        xs = [np.moveaxis(x, norm_axis(a, x.ndim), 0) for x, a in zip(xs, in_axes)]
        xs = [x[::-1] if d else x for x, d in zip(xs, in_dirs)]
        steps = xs[0].shape[0] if xs else 0
        n_out = len(body.outputs) - n_state
        ys: list[list] = [[] for _ in range(n_out)]
        held = 0
        for t in range(steps):
            check_run(node.label)
            feeds = dict(zip(body.inputs[:n_state], state))
            feeds.update(zip(body.inputs[n_state:], (x[t] for x in xs)))
            outs = bodies.run(body, feeds, outer)
            state = outs[:n_state]
            for k in range(n_out):
                ys[k].append(outs[n_state + k])
                held += _nbytes(outs[n_state + k])
            if n_out:
                check_growth(node.label, held)
        out_axes = node.attr("scan_output_axes") or [0] * n_out
        out_dirs = node.attr("scan_output_directions") or [0] * n_out
        results = []
        for k in range(n_out):
            y = np.stack(ys[k]) if ys[k] else _empty_like_output(body, body.outputs[n_state + k])
            if out_dirs[k]:
                y = y[::-1]
            results.append(np.ascontiguousarray(np.moveaxis(y, 0, norm_axis(out_axes[k], y.ndim))))
        return state + results


@register("Scan", since=8, until=8)
class Scan8(OpImpl):
    """Scan-8: batched scan (axis 0 batch, axis 1 sequence); sequence_lens must be omitted."""

    implicit_inputs = True

    def supports(self, node, inputs, opset):
        if node.inputs and node.inputs[0]:
            return Decline(rejected="Scan-8 sequence_lens input", accepts="sequence_lens omitted (full lengths)",
                           remedy="upgrade the model to opset 9+ Scan")
        return None

    def compute(self, node, inputs):
        body: Graph = node.attr("body")
        _, outer, weights = split_inputs(node, inputs)
        with body_weight_scope(node, weights, None):
            return self._run8(node, body, inputs, outer)

    def _run8(self, node, body, inputs, outer):
        ne = len(node.inputs)
        m = node.attr("num_scan_inputs")
        n_state = ne - 1 - m
        states = list(inputs[1:1 + n_state])
        xs = list(inputs[1 + n_state:ne])
        dirs = node.attr("directions") or [0] * m
        n_out = len(body.outputs) - n_state
        batch = (states[0] if states else xs[0]).shape[0]
        final: list[list] = [[] for _ in range(n_state)]
        scans: list[list] = [[] for _ in range(n_out)]
        for b in range(batch):
            st = [s[b] for s in states]
            seqs = [x[b][::-1] if d else x[b] for x, d in zip(xs, dirs)]
            ys: list[list] = [[] for _ in range(n_out)]
            for t in range(seqs[0].shape[0] if seqs else 0):
                check_run(node.label)
                feeds = dict(zip(body.inputs[:n_state], st))
                feeds.update(zip(body.inputs[n_state:], (s[t] for s in seqs)))
                outs = _run(body, feeds, outer)
                st = outs[:n_state]
                for k in range(n_out):
                    ys[k].append(outs[n_state + k])
            for k in range(n_state):
                final[k].append(st[k])
            for k in range(n_out):
                scans[k].append(np.stack(ys[k]) if ys[k] else _empty_like_output(body, body.outputs[n_state + k]))
        return [np.stack(f) for f in final] + [np.stack(s) for s in scans]
