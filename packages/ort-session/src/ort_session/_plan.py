"""`session.plan`: the placement report and the memory plan, known before any run.

JSON layout (stable; documented in the README):
{
  "model": str, "placement_mode": "rules" | "auto-fit" | "budget" | "priority",
  "granularity": "layers" | "nodes",   # the unit placed: whole layers (rules, auto-fit by layers) or nodes
  "nodes":   [{"name", "op", "layer", "ep", "reason"}],       # reason: why this EP (or "")
  "devices": {device: {"ep", "weights", "peak_activations", "workspace", "lower_bound", "total", "budget",
                       "streaming_slots", "prepacked_weights", "released_weights"}},
                       # streaming_slots: only with streamed layers; prepacked_weights: bytes of weights the kernels
                       # packed at initialization (inside "weights"); released_weights: initializers every consumer
                       # packed, not held beside their packed copies (not in "weights")
  "layers":  [placement report rows: group, layer, ep, nodes, weight/activation/workspace bytes],
  "declines": [{"ep", "node", "op", "domain", "opset", "rejected", "accepts", "remedy", "reason"}],
  "recheck": {"ok": bool, "planned_overruns": [str],              # weights + planned peak > budget
              "cost_sum_overruns": [{"ep", "budget", "total", "overrun"}]},  # per-node cost sum, no reuse
  "shapes": {"static", "symbolic", "unknown", "warnings"},
  "copies": {"count", "unknown_sizes", "to_device", "to_host", "device_to_device",
             "streamed": {"count", "bytes", "layers", "slot_bytes", "slots",   # streamed: weight streaming;
                          "pinned_host_bytes"}},  # host memory pinned for staging the copies (CUDA), else 0
  "streaming": {"mode", "device", "ep", "copies", "predicted_seconds_per_run": {strategy: s},   # only with
                "layers": [{"layer", "choice", "resident_s", "streamed_s", "cpu_s"}],      # streamed layers
                "device_speeds", "cpu"}
}
"""

from __future__ import annotations

from typing import Any

import ort_graph
import ort_partition
from ort_graph import Model
from ort_partition import format_bytes


class SessionPlan:
    def __init__(self, model: Model, placement: Any, memory: Any, shape_report: Any, fusions: list,
                 providers: list[Any], recheck: Any, overruns: list[str]) -> None:
        self.model, self.placement, self.memory = model, placement, memory
        self.shape_report, self.fusions, self.providers, self.recheck = shape_report, fusions, providers, recheck
        self.overruns = overruns  # precise Level-2 check: weights + planned peak vs budget, per device
        self.report = ort_partition.placement_report(placement.result)

    def _reason(self, node: Any, ep: str) -> str:
        res = self.placement.result
        if ep != res.fallback:
            return ""
        why = [d.reason for d in res.declines if getattr(d, "node", None) in (node.name, node.label)]
        if why:
            return why[0]
        for stop in res.stops.values():
            if stop.node in (node.name, node.label):
                return stop.reason
            return f"{stop.ep} budget exhausted (stopped at node {stop.node!r})"
        return ""

    def devices(self) -> dict[str, dict[str, Any]]:
        totals = self.memory.device_totals()
        budgets = self.placement.result.budgets
        out = {}
        for p in self.providers:
            t = totals.get(p.device)
            if t is None:
                continue
            out[p.device] = {"ep": p.name, "weights": t["weights"],
                             "peak_activations": t["peak_activations_and_workspace"],
                             "workspace": t["largest_workspace"], "lower_bound": t["lower_bound"],
                             "total": t["total"], "budget": budgets.get(p.name),
                             # "packed": workspace shares the activations' arena; "separate": its own (smaller here)
                             "workspace_layout": t["workspace_layout"]}
            if t.get("streaming_slots"):  # weight streaming's slots (the key is absent without streamed layers)
                out[p.device]["streaming_slots"] = t["streaming_slots"]
            if t.get("prepacked_weights"):  # pre-packed constant weights, inside "weights" (absent without any)
                out[p.device]["prepacked_weights"] = t["prepacked_weights"]
            if t.get("released_weights"):  # initializers read from their packed copies alone: not in "weights"
                out[p.device]["released_weights"] = t["released_weights"]
        return out

    def copies(self) -> dict[str, Any]:
        """The boundary copy nodes a run executes, and the bytes they move per run, by direction (sizes
        unknown until run time are counted apart)."""
        out: dict[str, Any] = {"count": 0, "unknown_sizes": 0}
        g = self.model.graph
        for node in g.nodes:
            if node.op_type not in ("MemcpyFromHost", "MemcpyToHost", "MemcpyDeviceToDevice"):
                continue
            key = {"MemcpyFromHost": "to_device", "MemcpyToHost": "to_host"}.get(node.op_type, "device_to_device")
            entry = out.setdefault(key, {"count": 0, "bytes": 0})
            nbytes = g.values[node.inputs[0]].nbytes if node.inputs[0] in g.values else None
            out["count"] += 1
            entry["count"] += 1
            if nbytes is None:
                out["unknown_sizes"] += 1
            else:
                entry["bytes"] += nbytes
        streaming = self.placement.streaming
        if streaming is not None:  # streamed layers' weights, host -> device slots, every run
            out["streamed"] = streaming.copies()
            out["count"] += out["streamed"]["count"]
        return out

    def streaming_table(self) -> str:
        """Per layer: where it runs and the predicted seconds of each choice; then each strategy's total."""
        s = self.placement.streaming
        if s is None:
            return ""
        staging = (f", staged in {format_bytes(s.pinned_bytes)} of pinned host memory" if s.pinned
                   else ", copied from pageable host memory")
        lines = [f"weight streaming ({s.mode}) on {s.ep}: {s.slots} slots of {format_bytes(s.slot_bytes)}{staging}; device "
                 f"{s.speeds.name} (host->device {s.speeds.h2d_bandwidth / 1e9:.0f} GB/s), CPU "
                 f"{s.cpu.flops / 1e9:.1f} GFLOP/s, {s.cpu.memory_bandwidth / 1e9:.1f} GB/s",
                 f"{'layer':>6} {'choice':<9} {'resident':>10} {'streamed':>10} {'cpu':>10}  (predicted ms per run)"]
        for lid, choice in sorted(s.choice.items()):
            t = s.per_layer[lid]
            lines.append(f"{lid:>6} {choice:<9} {t['resident'] * 1e3:>10.3f} {t['streamed'] * 1e3:>10.3f} "
                         f"{t['cpu'] * 1e3:>10.3f}")
        lines.append("predicted per run (decoder layers): " + "; ".join(f"{k} {v * 1e3:.3f} ms"
                                                                         for k, v in s.times.items()))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        g = self.model.graph
        layer_of = {}
        for node in g.nodes:
            group = ort_partition.node_group(node)
            layer_of[node.index] = ort_partition.group_label(group)
        nodes = [{"name": n.name, "op": n.qualified_op, "layer": layer_of[n.index], "ep": n.ep,
                  "reason": self._reason(n, n.ep)} for n in g.nodes]
        rep = self.report.to_dict()
        return {
            "model": str(self.model.path) if self.model.path else g.name,
            "placement_mode": self.placement.mode,
            "granularity": self.placement.granularity,
            "nodes": nodes,
            "devices": self.devices(),
            "copies": self.copies(),
            "layers": rep.get("rows", []),
            "declines": rep.get("declines", []),
            "recheck": {"ok": not self.overruns, "planned_overruns": list(self.overruns),
                        "cost_sum_overruns": [
                {"ep": o.ep, "budget": o.budget, "total": o.total, "overrun": o.overrun} for o in self.recheck.overruns]},
            "shapes": {"static": self.shape_report.static, "symbolic": self.shape_report.symbolic,
                       "unknown": self.shape_report.unknown, "warnings": list(self.shape_report.warnings)},
            **({"streaming": self.placement.streaming.to_dict()} if self.placement.streaming is not None else {}),
        }

    def memory_table(self) -> str:
        lines = [f"{'device':<10} {'provider':<32} {'weights':>10} {'peak act+ws':>12} {'workspace':>10} "
                 f"{'total':>10} {'budget':>10}  peak/lower bound"]
        for device, d in self.devices().items():
            ratio = d["peak_activations"] / d["lower_bound"] if d["lower_bound"] else 1.0
            budget = format_bytes(d["budget"]) if d["budget"] is not None else "-"
            slots = f"  (total includes {format_bytes(d['streaming_slots'])} of streaming slots)" \
                if d.get("streaming_slots") else ""
            lines.append(f"{device:<10} {d['ep']:<32} {format_bytes(d['weights']):>10} "
                         f"{format_bytes(d['peak_activations']):>12} {format_bytes(d['workspace']):>10} "
                         f"{format_bytes(d['total']):>10} {budget:>10}  {ratio:.3f}{slots}")
        return "\n".join(lines)

    def to_table(self) -> str:
        unit = {"layers": "layer", "nodes": "node"}.get(self.placement.granularity, self.placement.granularity)
        head = f"placement ({self.placement.mode}, {unit} granularity)"
        if self.placement.summary:
            head += f": {self.placement.summary}"
        # what is allocated first: the memory plan per device; then the placement with the per-node cost sums
        # that explain auto-fit's choices (they count no liveness reuse, so they can exceed a budget the plan fits)
        parts = ["memory plan (what each device allocates; budgets are checked against this total):",
                 self.memory_table(), "", head + ":" if not self.placement.summary else head,
                 f"per {unit if unit == 'layer' else 'group'}: nodes and resident weights, then auto-fit's cost sums (per-node sums without liveness "
                 "reuse: why each part went where it did, not what is allocated)", self.report.table(cost_view=True)]
        c = self.copies()
        if c["count"]:
            moves = [f"{k.replace('_', ' ')}: {v['count']} moving {format_bytes(v['bytes'])}" for k, v in c.items()
                     if isinstance(v, dict)]
            unknown = f"; {c['unknown_sizes']} of unknown size" if c["unknown_sizes"] else ""
            parts += ["", f"boundary copies per run: {c['count']} ({'; '.join(moves)}{unknown})"]
        if self.placement.streaming is not None:
            parts += ["", self.streaming_table()]
        overruns = self.overruns
        if overruns:
            parts += [""] + overruns
        elif self.placement.result.budgets:
            parts += ["", "Level-2 re-check: every budgeted device fits its budget with the final memory plan"]
        for o in self.recheck.overruns:
            parts.append(f"  note: the per-node cost sum (no liveness reuse) on {o.ep} is {o.total} bytes, "
                         f"{o.overrun} over its budget; the memory plan above is what is allocated")
        unknown = self.memory.gplan.activations.unknown_sizes
        if unknown:
            hint = ort_graph.dynamic_dims_hint(self.model.graph) or "shape inference could not size them"
            parts += ["", f"note: {len(unknown)} activation(s) have no static size and are not in the plan ({hint}); "
                          "otherwise each new input shape is traced on its first run"]
        if self.shape_report.warnings:
            parts += ["", "shape warnings:"] + [f"  {w}" for w in self.shape_report.warnings]
        return "\n".join(parts)
