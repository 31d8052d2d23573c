"""Memory planning quality.

Table A reuses `ort_memplan.bench.run`: per case, every algorithm's planned peak / the lower bound
(the most bytes live at one step; no plan can beat it). `online` is ONNX Runtime's pattern planner
and `greedy_by_size` TensorFlow Lite's, so those two columns are the peers.

Table B builds a real session (CPU EP; L1 fusions applied, kernels' declared workspace) and plans
its graph three more ways with `ort_memplan.plan_graph` (auto): activations alone plus a separate
workspace arena as large as the largest slot (what a runtime that keeps workspace out of the
activation pattern needs), activations and workspace packed together, and packed without in-place reuse.
"""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Mapping
from typing import Any

from _models import dims_for, light_models, shared_models, zoo_decoders
from _table import Section, Table, fmt_bytes, fmt_ratio, fmt_seconds

import ort_graph
import ort_memplan
from ort_graph import zoo
from ort_memplan import bench as mpbench
from ort_session import InferenceSession

SHORT = {"auto": "auto", "online": "online(ORT)", "greedy_by_size": "size(TFLite)", "greedy_by_breadth": "breadth",
         "greedy_by_area": "area", "greedy_by_duration": "duration", "greedy_by_first": "first", "skyline": "skyline"}


def _algorithm_table(rows: list[dict[str, Any]]) -> Table:
    algs = list(ort_memplan.ALGORITHMS)
    t = Table("A. planned peak / lower bound, per algorithm (1.000 = optimal)",
              ["case", "requests", "lower bound", *[SHORT.get(a, a) for a in algs], "auto peak",
               "auto saves vs ORT", "auto time"])
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_case.setdefault(r["case"], {})[r["algorithm"]] = r
    for case, per in by_case.items():
        first = next(iter(per.values()))
        auto, online = per.get("auto"), per.get("online")
        saved = online["peak"] - auto["peak"] if auto and online else None
        t.add(case, first["requests"], fmt_bytes(first["lower_bound"]),
              *[fmt_ratio(per[a]["ratio"]) if a in per else "skip" for a in algs],
              fmt_bytes(auto["peak"]) if auto else "-", fmt_bytes(saved), fmt_seconds(auto["seconds"] if auto else None))
    t.notes.append("skip: skyline is quadratic and not run above 5k requests (auto skips it there too)")
    return t


def _largest_node_workspace_per_device(gplan: ort_memplan.GraphPlan) -> dict[str, int]:
    """Per device, the most workspace one node holds at once (all its slots are live together): what a separate
    workspace arena must hold."""
    per_node: dict[tuple[str, int], int] = {}
    for (node_index, _slot), req in gplan.slot_requests.items():
        key = (req.device, node_index)
        per_node[key] = per_node.get(key, 0) + ort_memplan.align_up(req.nbytes, req.alignment)
    out: dict[str, int] = {}
    for (device, _node), nbytes in per_node.items():
        out[device] = max(out.get(device, 0), nbytes)
    return out


def workspace_record(name: str, sess: InferenceSession) -> dict[str, Any]:
    """Plan the session's final graph with and without workspace packing and in-place reuse."""
    graph, order = sess.model.graph, sess.order
    device_by_ep = {p.name: p.device for p in sess.providers}
    device_of_node = {n.index: device_by_ep.get(sess.placement.ep_of.get(n.index), "cpu") for n in graph.nodes}

    def device_of(node: Any) -> str:
        return device_of_node[node.index]

    slots = dict(sess.memory.slots)
    joint = ort_memplan.plan_graph(graph, order, device_of, workspace=slots, inplace=True)
    alone = ort_memplan.plan_graph(graph, order, device_of, workspace={}, inplace=True)
    no_inplace = ort_memplan.plan_graph(graph, order, device_of, workspace=slots, inplace=False)
    arena = _largest_node_workspace_per_device(joint)
    separate = alone.plan.total_peak + sum(arena.values())
    return {"case": name, "nodes": len(graph.nodes), "workspace_slots": len(slots),
            "largest_workspace": max(slots.values(), default=0), "activation_peak": alone.plan.total_peak,
            "separate_total": separate, "packed_peak": joint.plan.total_peak,
            "packed_lower_bound": sum(joint.plan.lower_bound.values()), "saved_by_packing": separate - joint.plan.total_peak,
            "packed_no_inplace_peak": no_inplace.plan.total_peak,
            "saved_by_inplace": no_inplace.plan.total_peak - joint.plan.total_peak,
            "unknown_sizes": len(joint.activations.unknown_sizes)}


def _workspace_table(records: list[dict[str, Any]]) -> Table:
    t = Table("B. workspace packed into the activation plan, and in-place reuse (auto; CPU EP session graph)",
              ["model", "nodes", "ws slots", "largest ws", "act peak", "act + ws arena", "packed peak", "packing saves",
               "packed/LB", "no in-place", "in-place saves"])
    for r in records:
        if "error" in r:
            t.add(r["case"], *["n/a"] * 10)
            t.notes.append(f"n/a {r['case']}: no session: {r['error'][:160]}")
            continue
        lb = r["packed_lower_bound"]
        saved_pct = f" ({100 * r['saved_by_packing'] / r['separate_total']:.0f}%)" if r["separate_total"] else ""
        t.add(r["case"], r["nodes"], r["workspace_slots"], fmt_bytes(r["largest_workspace"]), fmt_bytes(r["activation_peak"]),
              fmt_bytes(r["separate_total"]), fmt_bytes(r["packed_peak"]), fmt_bytes(r["saved_by_packing"]) + saved_pct,
              fmt_ratio(r["packed_peak"] / lb if lb else None), fmt_bytes(r["packed_no_inplace_peak"]),
              fmt_bytes(r["saved_by_inplace"]))
    t.notes.append("act + ws arena: activations planned alone + one workspace arena holding the most any node's slots need "
                   "at once (workspace kept apart)")
    t.notes.append("packed: workspace slots planned as one-step blocks inside the activation plan (this project)")
    return t


def _session_record(name: str, model: Any, dims: Mapping[str, int]) -> dict[str, Any]:
    try:
        m = model if isinstance(model, ort_graph.Model) else ort_graph.load(model)
        sess = InferenceSession(m, {"free_dimension_overrides": dims_for(m, dims)}, providers=["CPUExecutionProvider"])
        return workspace_record(name, sess)
    except Exception as e:  # a model this runtime cannot load or plan: reported, not fatal
        return {"case": name, "error": f"{type(e).__name__}: {e}"}


def run(quick: bool = False) -> Section:
    sec = Section("memory planning quality")
    sizes = (1_000,) if quick else (1_000, 10_000, 100_000)
    rows = mpbench.run(sizes, zoo=False, light_models=False)
    for r in rows:
        r["kind"] = "random"
    graph_models: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths: dict[str, pathlib.Path] = {}
        for name, cfg in zoo_decoders(quick).items():
            paths[name] = zoo.write_decoder(pathlib.Path(tmp) / f"{len(paths)}.onnx", cfg, external_data=False)
            graph_models[name] = zoo.decoder(cfg)
        light, why = light_models(quick)
        if why:
            sec.notes.append(f"light CNN models skipped: {why}")
        shared, why_shared = shared_models(quick)
        if why_shared:
            sec.notes.append(f"real exports skipped: {why_shared}")
        for kind, group in (("zoo", paths), ("light", light), ("export", shared)):
            for name, path in group.items():
                try:
                    got = mpbench.run((), zoo=False, light_models=False, models={name: path})
                except Exception as e:
                    sec.notes.append(f"{name}: ort_memplan.bench failed: {type(e).__name__}: {e}")
                    continue
                for r in got:
                    r["kind"] = kind
                rows += got
                if kind != "zoo":
                    graph_models[name] = path
    sec.tables.append(_algorithm_table(rows))
    records = [_session_record(name, model, mpbench.DEFAULT_DIMS) for name, model in graph_models.items()]
    sec.tables.append(_workspace_table(records))
    worst = mpbench.summary(rows)
    sec.notes.append("worst peak/LB over all cases: " + ", ".join(f"{SHORT.get(k, k)} {v:.3f}" for k, v in worst.items()))
    sec.records = [{"table": "algorithms", **r} for r in rows] + [{"table": "workspace", **r} for r in records]
    return sec
