"""The placement report: per layer and device, nodes and bytes (weights, activations, workspace), every
decline with its reason and every budget stop — as data, as a table, and as JSON."""

from __future__ import annotations

import json
from typing import Any

import attrs

from ._layers import GroupKey, group_label, node_group
from ._loops import BudgetStop
from ._placement import Placement
from ._units import format_bytes


@attrs.frozen
class ReportRow:
    group: str  # "layer 3", "embed_tokens", "final_norm", "lm_head", ...
    layer: int | None
    ep: str
    nodes: int
    weight_bytes: int
    activation_bytes: int
    workspace_bytes: int
    workspace_estimated: int  # nodes whose workspace came from a Level-1 estimate
    workspace_heuristic: int  # nodes costed with the 1.5x heuristic
    workspace_measured: int  # nodes costed from the measured profile
    unknown_outputs: int  # outputs of unknown size (counted as 0 bytes)

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.activation_bytes + self.workspace_bytes

    @property
    def workspace_kind(self) -> str:
        kinds = [k for k, n in (("estimated", self.workspace_estimated), ("heuristic", self.workspace_heuristic),
                                ("measured", self.workspace_measured)) if n]
        return "+".join(kinds) if kinds else "-"

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["total_bytes"] = self.total_bytes
        d["workspace_kind"] = self.workspace_kind
        return d


@attrs.frozen
class DeviceTotals:
    ep: str
    nodes: int
    weight_bytes: int
    activation_bytes: int
    workspace_bytes: int
    budget: int | None

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.activation_bytes + self.workspace_bytes

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["total_bytes"] = self.total_bytes
        return d


@attrs.frozen
class PlacementReport:
    rows: tuple[ReportRow, ...]
    devices: tuple[DeviceTotals, ...]
    declines: tuple[Any, ...]
    stops: tuple[BudgetStop, ...]

    @classmethod
    def from_placement(cls, placement: Placement) -> PlacementReport:
        eps = list(dict.fromkeys([*placement.loops, *placement.assignments.values()]))
        first_seen: dict[GroupKey, int] = {}
        cells: dict[tuple[GroupKey, str], list[Any]] = {}
        for node, ep in placement.assignments.items():
            key = node_group(node)
            first_seen[key] = min(first_seen.get(key, node.index), node.index)  # file order
            cells.setdefault((key, ep), []).append(node)
        rows: list[ReportRow] = []
        for (key, ep), nodes in sorted(cells.items(), key=lambda kv: (first_seen[kv[0][0]], eps.index(kv[0][1]))):
            costs = [placement.costs[n] for n in nodes if n in placement.costs]
            rows.append(ReportRow(
                group=group_label(key), layer=key if isinstance(key, int) else None, ep=ep, nodes=len(nodes),
                weight_bytes=sum(c.weights for c in costs), activation_bytes=sum(c.activations for c in costs),
                workspace_bytes=sum(c.workspace for c in costs),
                workspace_estimated=sum(c.workspace_source == "estimate" for c in costs),
                workspace_heuristic=sum(c.workspace_source == "heuristic" for c in costs),
                workspace_measured=sum(c.workspace_source == "measured" for c in costs),
                unknown_outputs=sum(c.unknown_outputs for c in costs),
            ))
        devices = tuple(
            DeviceTotals(ep=ep, nodes=sum(r.nodes for r in rows if r.ep == ep),
                         weight_bytes=sum(r.weight_bytes for r in rows if r.ep == ep),
                         activation_bytes=sum(r.activation_bytes for r in rows if r.ep == ep),
                         workspace_bytes=sum(r.workspace_bytes for r in rows if r.ep == ep),
                         budget=placement.budgets.get(ep))
            for ep in eps
        )
        return cls(rows=tuple(rows), devices=devices, declines=tuple(placement.declines),
                   stops=tuple(placement.stops.values()))

    # -- views --------------------------------------------------------------------------------
    def rows_for(self, group: str) -> list[ReportRow]:
        return [r for r in self.rows if r.group == group]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [r.to_dict() for r in self.rows],
            "devices": [d.to_dict() for d in self.devices],
            "declines": [_decline_dict(d) for d in self.declines],
            "budget_stops": [{**attrs.asdict(s), "reason": s.reason} for s in self.stops],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def table(self, cost_view: bool = False) -> str:
        """Per group and device: nodes, weights and the per-node cost sums. `cost_view` labels the sums as
        what they are beside a memory plan (auto-fit's count, without liveness reuse) and leaves the budget out
        of the totals: the plan, not this sum, is what is allocated and held to the budget."""
        sums = ("act. sum", "ws sum", "cost sum (no reuse)") if cost_view else ("activations", "workspace", "total")
        head = ("group", "device", "nodes", "weights", sums[0], sums[1], "(kind)", sums[2])
        body = [(r.group, r.ep, str(r.nodes), format_bytes(r.weight_bytes), format_bytes(r.activation_bytes),
                 format_bytes(r.workspace_bytes), r.workspace_kind, format_bytes(r.total_bytes)) for r in self.rows]
        foot = [("sum" if cost_view else "total", d.ep, str(d.nodes), format_bytes(d.weight_bytes),
                 format_bytes(d.activation_bytes), format_bytes(d.workspace_bytes), "", format_bytes(d.total_bytes)
                 + (f" / budget {format_bytes(d.budget)}" if d.budget is not None and not cost_view else ""))
                for d in self.devices]
        widths = [max(len(row[i]) for row in [head, *body, *foot]) for i in range(len(head))]

        def line(row: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) if i < 2 or i == 6 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

        out = [line(head), "  ".join("-" * w for w in widths), *(line(r) for r in body),
               "  ".join("-" * w for w in widths), *(line(r) for r in foot)]
        if self.stops:
            out.append("")
            out.extend(s.reason for s in self.stops)
        if self.declines:
            out.append("")
            out.extend(declines_by_reason(self.declines))
        return "\n".join(line_.rstrip() for line_ in out)


def declines_by_reason(declines: Any, examples: int = 3) -> list[str]:
    """Declines grouped by what was rejected (same provider, rejection, accepted input and remedy), each
    group once with its node count, its op types and a few node names: 432 nodes declined for one missing
    driver are one line, not 432."""
    groups: dict[tuple[str, str, str, str], list[Any]] = {}
    for d in declines:
        key = (d.ep, getattr(d, "rejected", "") or d.reason, getattr(d, "accepts", ""), getattr(d, "remedy", ""))
        groups.setdefault(key, []).append(d)
    out = [f"declines ({len(declines)} nodes, {len(groups)} reason{'s' if len(groups) != 1 else ''}):"]
    for (ep, rejected, accepts, remedy), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        if len(members) == 1:
            out.append(f"  {members[0].reason}")
            continue
        ops = sorted({getattr(d, "op", "?") for d in members})
        shown = ", ".join(repr(getattr(d, "node", "?")) for d in members[:examples])
        more = f" and {len(members) - examples} more" if len(members) > examples else ""
        text = f"  {len(members)} nodes ({', '.join(ops[:8])}{', ...' if len(ops) > 8 else ''}; {shown}{more}): {ep} "
        text += f"rejected {rejected}" if getattr(members[0], "rejected", "") else rejected
        if accepts:
            text += f"; accepts {accepts}"
        if remedy:
            text += f"; remedy: {remedy}"
        out.append(text)
    return out


def _decline_dict(d: Any) -> dict[str, Any]:
    if hasattr(d, "to_dict"):
        return d.to_dict()
    return {"node": getattr(d, "node", None), "ep": getattr(d, "ep", None), "reason": d.reason}


def placement_report(placement: Placement) -> PlacementReport:
    return PlacementReport.from_placement(placement)
