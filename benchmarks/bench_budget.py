"""Budget fidelity: how much of a device budget the placement uses, and whether it ever exceeds it.

A third table holds the host to its plan the same way: the CPU provider with pre-allocated buffers, and
the host bytes traced during a run (`measure_host_allocations`) next to the planned peak.

For budgets from 10% to 100% of what the whole decoder needs on the device (weights + planned
activation peak with every node there), a session with `budgets="gpu:<bytes>"` on the simulated GPU
auto-fits whole layers; the bytes it places there are the weights + planned peak from
`sess.plan.to_dict()["devices"]`. They must never exceed the budget: a loud FAIL line if they do.
Each session then runs once, and "measured" is the device allocator's peak over initialization and
that run (weights uploaded, the run's arena, any scratch): what the device really held. The
allocator is held to the budget, so a run that needed more would fail; the column shows the margin.

The peer is the estimate llama.cpp-style tools use to choose `n_gpu_layers`: per layer, its weight
bytes + a fixed overhead (here that layer's KV cache at the planned context, the part they
reserve per layer), then as many layers as fit. For its layer count we build the same placement
with a layer rule (`gpu(layers.[0-N]/)`) and report the bytes that placement really needs (the
planner's peak), so "over" means that placement would run out of memory. "best" is the largest
layer count whose real bytes fit, found the same way (bisection over rule placements).

A second table does the same for a CNN without layer names (`features.N/Conv`, `classifier/Gemm`):
auto-fit places a segment of the topological order there (node granularity). Its peer is ONNX
Runtime's accountant (nodes in topological order until the per-node cost sum would exceed the
budget, `node_level_cutoff`), whose placement is built and planned the same way: "refused" when
initialization refuses it because the real plan (boundary copies, liveness) needs more than the budget.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import attrs
from _table import Section, Table, fmt_bytes, fmt_ratio

import ort_memplan
from ort_graph import zoo
from ort_session import InferenceSession

DEVICE_EP = "SimulatedGPUExecutionProvider"
_LAYER = re.compile(r"layers\.(\d+)\.")


def _configs(quick: bool) -> dict[str, tuple[zoo.DecoderConfig, int]]:
    """name -> (config with symbolic dims, sequence length for free_dimension_overrides)."""
    demo = zoo.DEMO_CONFIG
    deep = zoo.DecoderConfig(layers=32, hidden=128, heads=4, kv_heads=2, vocab=512, intermediate=344)
    out = {"demo-l8-h256 s64": (demo, 64)}
    if not quick:
        out["demo-l8-h256 s512"] = (demo, 512)
        out["deep-l32-h128 s256"] = (deep, 256)
    return out


@attrs.define
class Decoder:
    """One benchmark model: its serialized bytes (a fresh graph per session) and dimension overrides."""

    name: str
    cfg: zoo.DecoderConfig
    sequence: int
    data: bytes = attrs.field(repr=False)

    @property
    def dims(self) -> dict[str, int]:
        return {"batch": 1, "sequence": self.sequence, "past_sequence": 0}

    def session(self, options: dict[str, Any]) -> InferenceSession:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return InferenceSession(self.data, {**options, "free_dimension_overrides": self.dims}, providers=[DEVICE_EP])


def device_bytes(sess: InferenceSession) -> tuple[int, dict[str, Any]]:
    """Weights + planned peak on the simulated GPU (0 when nothing was placed there), and its entry."""
    d = sess.plan.to_dict()["devices"]
    entry = next((v for v in d.values() if v["ep"] == DEVICE_EP), None)
    return (entry["total"] if entry else 0), (entry or {})


def measured_peak(sess: InferenceSession, dec: Decoder) -> int:
    """Run once; the simulated GPU allocator's peak bytes since initialization (0: nothing placed there)."""
    sess.run(None, zoo.decoder_inputs(dec.cfg, 1, dec.sequence, 0))
    use = sess.device_memory().get("simgpu")
    return int(use["peak"]) if use else 0


def layer_weights(dec: Decoder) -> dict[int, int]:
    """File bytes of each decoder layer's weights, by the layer number in the initializer name."""
    from ort_graph import load

    out: dict[int, int] = {}
    for name, t in load(dec.data).graph.initializers.items():
        m = _LAYER.search(name)
        if m:
            out[int(m.group(1))] = out.get(int(m.group(1)), 0) + t.nbytes
    return out


def kv_bytes_per_layer(dec: Decoder) -> int:
    cfg = dec.cfg
    return 2 * cfg.kv_heads * cfg.head_dim * dec.sequence * 4


def llama_style_layers(weights: dict[int, int], overhead: int, budget: int) -> int:
    """As many leading layers as fit when each costs its weights + `overhead`."""
    used, n = 0, 0
    for layer in sorted(weights):
        used += weights[layer] + overhead
        if used > budget:
            break
        n += 1
    return n


def _real_bytes(dec: Decoder) -> Callable[[int], int]:
    cache: dict[int, int] = {0: 0}

    def real(n: int) -> int:
        if n not in cache:
            sess = dec.session({"session.name_based_layer_assignment": f"gpu(layers.[0-{n - 1}]/)"})
            cache[n] = device_bytes(sess)[0]
        return cache[n]

    return real


def best_layers(real: Callable[[int], int], layers: int, budget: int) -> int:
    lo, hi = 0, layers  # real(lo) <= budget; bytes grow with the layer count
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if real(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def cnn_proto(channels: tuple[int, ...] = (3, 16, 32, 64, 64), size: int = 32, classes: int = 100) -> bytes:
    """A small CNN named torchvision-style (`features.N/...`): no decoder layers to place by."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "image"
    for i, (a, b) in enumerate(zip(channels, channels[1:])):
        w = numpy_helper.from_array((rng.standard_normal((b, a, 3, 3)) * 0.1).astype(np.float32), f"features.{i}.weight")
        inits += [w, numpy_helper.from_array(np.zeros(b, np.float32), f"features.{i}.bias")]
        nodes += [helper.make_node("Conv", [x, w.name, f"features.{i}.bias"], [f"features.{i}/conv"],
                                   name=f"features.{i}/Conv", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"features.{i}/conv"], [f"features.{i}/relu"], name=f"features.{i}/Relu")]
        x = f"features.{i}/relu"
        if i % 2 == 1:
            nodes.append(helper.make_node("MaxPool", [x], [f"features.{i}/pool"], name=f"features.{i}/MaxPool",
                                          kernel_shape=[2, 2], strides=[2, 2]))
            x = f"features.{i}/pool"
    inits += [numpy_helper.from_array((rng.standard_normal((classes, channels[-1])) * 0.1).astype(np.float32),
                                      "classifier.weight"),
              numpy_helper.from_array(np.zeros(classes, np.float32), "classifier.bias")]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pool"], name="avgpool/GlobalAveragePool"),
              helper.make_node("Flatten", ["pool"], ["flat"], name="avgpool/Flatten"),
              helper.make_node("Gemm", ["flat", "classifier.weight", "classifier.bias"], ["logits"],
                               name="classifier/Gemm", transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                          ["batch", channels[0], size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _layerless_session(data: bytes, options: dict[str, Any]) -> InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(data, {**options, "free_dimension_overrides": {"batch": 1}}, providers=[DEVICE_EP])


def _nodes_on_device(sess: InferenceSession) -> int:
    return sum(1 for n in sess.model.graph.nodes if n.ep == DEVICE_EP and not n.op_type.startswith("Memcpy"))


def run_layerless(sec: Section, quick: bool) -> None:
    """Budget fidelity on a graph without layer names: node granularity against ONNX Runtime's accountant."""
    import numpy as np

    t = Table("budget fidelity without layer names: a CNN (features.N/Conv), node granularity",
              ["model", "budget", "bytes", "ours nodes", "ours bytes", "ours use", "measured", "ORT nodes",
               "ORT bytes", "verdict"])
    data = cnn_proto()
    name = "cnn-c64 32x32"
    full_sess = _layerless_session(data, {})
    full, _ = device_bytes(full_sess)
    total_nodes = _nodes_on_device(full_sess)
    feeds = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    for frac in ((0.1, 0.5, 1.0) if quick else tuple(i / 10 for i in range(1, 11))):
        budget = int(full * frac)
        sess = _layerless_session(data, {"budgets": f"gpu:{budget}"})
        ours, entry = device_bytes(sess)
        sess.run(None, feeds)
        use = sess.device_memory().get("simgpu")
        measured = int(use["peak"]) if use else 0
        try:
            peer = _layerless_session(data, {"budgets": f"gpu:{budget}", "node_level_cutoff": True})
            ort_nodes, ort_bytes = f"{_nodes_on_device(peer)}/{total_nodes}", fmt_bytes(device_bytes(peer)[0])
        except ort_memplan.BudgetExceededError:
            ort_nodes, ort_bytes = "refused", "-"
        verdict = "ok"
        if ours > budget or measured > budget:
            verdict = "FAIL"
            sec.failures.append(f"{name} at {frac:.0%} budget: placed {ours} bytes (measured peak {measured}) on "
                                f"{DEVICE_EP}, over the budget of {budget} bytes")
        t.add(name, f"{frac:.0%}", fmt_bytes(budget), f"{_nodes_on_device(sess)}/{total_nodes}", fmt_bytes(ours),
              fmt_ratio(ours / budget), fmt_bytes(measured), ort_nodes, ort_bytes, verdict)
        sec.records.append({"model": name, "fraction": frac, "budget": budget, "full": full,
                            "granularity": sess.placement.granularity, "ours_nodes": _nodes_on_device(sess),
                            "ours_bytes": ours, "ours_use": ours / budget, "measured_peak": measured,
                            "ours_device": entry, "ort_accountant_nodes": ort_nodes})
    t.notes.append("ours: auto-fit at node granularity, one segment of the topological order verified by the exact "
                   "plan check; ORT: the accountant's prefix (per-node cost sum, no boundary copies); 'refused': "
                   "initialization refused that placement because its real plan is over the budget")
    sec.tables.append(t)


HOST_EP = "CPUExecutionProvider"


def _host_configs(quick: bool) -> dict[str, tuple[zoo.DecoderConfig, int]]:
    out = {"demo-l8-h256 s64": (zoo.DEMO_CONFIG, 64),
           "l2-h1024 s128": (zoo.DecoderConfig(layers=2, hidden=1024, heads=16, kv_heads=8, vocab=1024), 128)}
    if not quick:
        out["demo-l8-h256 s512"] = (zoo.DEMO_CONFIG, 512)
        out["l2-h2048 s512"] = (zoo.DecoderConfig(layers=2, hidden=2048, heads=16, kv_heads=8, vocab=1024), 512)
    return out


def run_host(sec: Section, quick: bool) -> None:
    """Host fidelity: the CPU provider with pre-allocated buffers, numpy data buffers kernels allocate during a
    run (`measure_host_allocations`: the counting numpy allocator, else tracemalloc's numpy domain) against the
    plan, and the node whose kernel held the most."""
    t = Table("host fidelity: CPU provider, pre-allocated buffers; numpy bytes allocated during a run / planned peak",
              ["model", "planned peak", "traced", "traced / plan", "largest at", "copied outputs", "copied bytes",
               "verdict"])
    measures = set()
    for name, (cfg, seq) in _host_configs(quick).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = InferenceSession(zoo.decoder_proto(cfg).SerializeToString(),
                                    {"free_dimension_overrides": {"batch": 1, "sequence": seq, "past_sequence": 0},
                                     "session.pre_allocate_execution_buffers": "1", "measure_host_allocations": True},
                                    providers=[HOST_EP])
        feeds = zoo.decoder_inputs(cfg, 1, seq, 0)
        sess.run(None, feeds)  # the first run fills lazily built caches
        sess.run(None, feeds)
        stats = sess.last_run_stats
        dev = sess.plan.to_dict()["devices"]["cpu"]
        planned = dev["peak_activations"] + dev["workspace"]
        ratio = stats.traced_bytes / planned
        measures.add(stats.traced_by)
        top = max(stats.traced_nodes.items(), key=lambda kv: kv[1], default=("-", 0))
        t.add(name, fmt_bytes(planned), fmt_bytes(stats.traced_bytes), fmt_ratio(ratio),
              f"{top[0]} ({fmt_bytes(top[1])})" if top[1] else "-", stats.copied_outputs,
              fmt_bytes(stats.copied_bytes), "ok" if ratio <= 0.1 else "over 10%")
        sec.records.append({"model": name, "ep": HOST_EP, "planned_peak": planned, "traced_bytes": stats.traced_bytes,
                            "traced_by": stats.traced_by, "traced_nodes": stats.traced_nodes,
                            "traced_over_plan": ratio, "copied_outputs": stats.copied_outputs,
                            "copied_bytes": stats.copied_bytes})
    t.notes.append(f"traced ({' / '.join(sorted(measures))}): the peak of numpy data buffers allocated during the "
                   "run's node loop (the pre-allocated buffer, weights and feeds existed before it): kernels' fresh "
                   "results and temporaries not in the plan; Python objects are not counted")
    t.notes.append("largest at: the node whose kernel held the most numpy bytes above what was live when it started")
    t.notes.append("copied outputs: results a kernel computed outside the block it was given, then copied in "
                   "(`ortrun kernels`, column output); the target is traced <= 10% of the planned peak")
    sec.tables.append(t)


def run(quick: bool = False) -> Section:
    sec = Section("budget fidelity")
    t = Table("budget fidelity: bytes placed on the budgeted device (weights + planned peak) / budget",
              ["model", "budget", "bytes", "ours layers", "ours bytes", "ours use", "measured", "llama layers",
               "llama bytes", "llama use", "best layers", "verdict"])
    fractions = (0.1, 0.5, 1.0) if quick else tuple(i / 10 for i in range(1, 11))
    for name, (cfg, seq) in _configs(quick).items():
        dec = Decoder(name, cfg, seq, zoo.decoder_proto(cfg).SerializeToString())
        full, _ = device_bytes(dec.session({}))
        weights = layer_weights(dec)
        overhead = kv_bytes_per_layer(dec)
        real = _real_bytes(dec)
        for frac in fractions:
            budget = int(full * frac)
            sess = dec.session({"budgets": f"gpu:{budget}"})
            ours, entry = device_bytes(sess)
            ours_layers = sess.placement.layers_on_device or 0
            measured = measured_peak(sess, dec)
            n_llama = llama_style_layers(weights, overhead, budget)
            llama = real(n_llama)
            best = best_layers(real, cfg.layers, budget)
            verdict = "ok"
            if ours > budget or measured > budget:
                verdict = "FAIL"
                sec.failures.append(f"{name} at {frac:.0%} budget: placed {ours} bytes (measured peak {measured}) on "
                                    f"{DEVICE_EP}, over the budget of {budget} bytes")
            elif llama > budget:
                verdict = "llama over"
            by_nodes = " (nodes)" if sess.placement.granularity == "nodes" else ""
            t.add(name, f"{frac:.0%}", fmt_bytes(budget), f"{ours_layers}/{cfg.layers}{by_nodes}", fmt_bytes(ours),
                  fmt_ratio(ours / budget), fmt_bytes(measured), f"{n_llama}/{cfg.layers}", fmt_bytes(llama), fmt_ratio(llama / budget),
                  best, verdict)
            sec.records.append({"model": name, "fraction": frac, "budget": budget, "full": full,
                                "ours_layers": ours_layers, "ours_bytes": ours, "ours_use": ours / budget,
                                "measured_peak": measured,
                                "ours_device": entry, "recheck": sess.plan.to_dict()["recheck"],
                                "llama_layers": n_llama, "llama_bytes": llama, "llama_use": llama / budget,
                                "llama_overhead_per_layer": overhead, "best_layers": best})
    t.notes.append("budget: % of the bytes the whole model needs on the device; use = bytes / budget (must be <= 1)")
    t.notes.append("(nodes): not even one layer fits, so auto-fit placed a segment of nodes instead (node granularity)")
    t.notes.append("measured: the device allocator's peak over initialization and one run (weights + the run's "
                   "arena + scratch); the allocator is held to the budget")
    t.notes.append("llama: layers by (layer weights + per-layer KV cache) summed to the budget; llama bytes = what that "
                   "placement really needs; 'llama over' = it would not fit")
    t.notes.append("best: most whole layers whose real bytes fit the budget (rule placements, bisection)")
    sec.tables.append(t)
    run_layerless(sec, quick)
    run_host(sec, quick)
    return sec
