"""Weight streaming: predicted time per run of each strategy (all-CPU, llama.cpp-style partial offload,
with streamed layers) at device budgets of 10-100% of the decoder's weights, next to what a streamed run
on the simulated GPU really did.

Predicted times come from ort-partition's cost model (`sess.plan.to_dict()["streaming"]`), with the
simulated GPU's stand-in speeds (`ort_partition.SIMULATED_DEVICE`: 25 GB/s host->device) and this
machine's CPU as measured by the probe. "device (sim)" is the simulated GPU's own timeline of that run:
copies on the copy stream at the stand-in bandwidth, each layer's modelled compute on the compute stream,
the copy of the next streamed layer overlapping the current layer's compute; "serial (sim)" is the same
work back to back (what synchronous copies would take). "run" is the wall time of one streamed run on the
simulated GPU, whose kernels are the CPU's numpy kernels behind staging copies: it checks the plan is
executed (copies and bytes equal the plan, the allocator's peak within the budget) but it is not a GPU's
speed. A budget too small for two slots of the largest layer streams nothing ("-"). Broken guarantees are
FAIL lines (a device timeline slower than the prediction is one: the cost model must not be optimistic)."""

from __future__ import annotations

import time
import warnings
from typing import Any

from _table import Section, Table, fmt_bytes, fmt_seconds

from ort_graph import zoo
from ort_session import InferenceSession

PROVIDERS = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]


def _session(cfg: zoo.DecoderConfig, dims: dict[str, int], budget: int) -> InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(zoo.decoder(cfg), {"free_dimension_overrides": dims, "budgets": f"gpu:{budget}",
                                                   "session.weight_streaming": "on"}, providers=PROVIDERS)


def run(quick: bool = False) -> Section:
    sec = Section("streaming")
    cfg = zoo.DecoderConfig(layers=6, hidden=128, heads=4, kv_heads=2, vocab=512, intermediate=344) if quick \
        else zoo.DEMO_CONFIG
    sequences = [64] if quick else [1, 64, 512]
    weights = sum(t.nbytes for t in zoo.decoder(cfg).graph.initializers.values())
    fractions = [0.1, 0.3, 0.5, 1.0] if quick else [0.1, 0.2, 0.3, 0.5, 0.75, 1.0]
    for seq in sequences:
        dims = {"batch": 1, "sequence": seq, "past_sequence": 0}
        feeds = zoo.decoder_inputs(cfg, 1, seq, 0)
        table = Table(f"decoder l{cfg.layers} h{cfg.hidden}, sequence {seq}, weights {fmt_bytes(weights)}",
                      ["budget", "resident", "streamed", "cpu", "all-CPU", "partial offload", "with streaming",
                       "device (sim)", "serial (sim)", "run (wall)", "copied/run", "peak/budget"])
        for fraction in fractions:
            budget = int(weights * fraction)
            sess = _session(cfg, dims, budget)
            plan = sess.placement.streaming
            record: dict[str, Any] = {"sequence": seq, "fraction": fraction, "budget": budget}
            if plan is None:
                table.add(f"{fraction:.0%}", sess.placement.layers_on_device, 0, "-", "-", "-", "-", "-", "-", "-", "-",
                          "-")
                sec.records.append(record)
                sess.close()
                continue
            choices = list(plan.choice.values())
            t0 = time.perf_counter()
            sess.run(None, feeds)
            wall = time.perf_counter() - t0
            stats, copies = sess.last_run_stats, plan.copies()
            peak = sess.device_memory()["simgpu"]["peak"]
            if peak > budget:
                sec.failures.append(f"streaming seq {seq} at {fraction:.0%}: device peak {peak} > budget {budget}")
            if (stats.streamed_copies, stats.streamed_bytes) != (copies["count"], copies["bytes"]):
                sec.failures.append(f"streaming seq {seq} at {fraction:.0%}: copied {stats.streamed_copies} / "
                                    f"{stats.streamed_bytes} B, planned {copies['count']} / {copies['bytes']} B")
            t, device = plan.times, stats.streaming_timeline or {}
            if device.get("seconds", 0.0) > t["with streaming"] * (1 + 1e-9):
                sec.failures.append(f"streaming seq {seq} at {fraction:.0%}: the simulated device took "
                                    f"{device['seconds']:.3g} s, the cost model predicted {t['with streaming']:.3g} s")
            table.add(f"{fraction:.0%}", choices.count("resident"), choices.count("streamed"), choices.count("cpu"),
                      fmt_seconds(t["all-CPU"]), fmt_seconds(t["partial offload"]), fmt_seconds(t["with streaming"]),
                      fmt_seconds(device.get("seconds", 0.0)), fmt_seconds(device.get("serial_seconds", 0.0)),
                      fmt_seconds(wall), fmt_bytes(stats.streamed_bytes), f"{peak / budget:.2f}")
            record.update(times=dict(t), run_seconds=wall, streamed_bytes=stats.streamed_bytes, peak=peak,
                          device_timeline=device)
            sec.records.append(record)
            sess.close()
        sec.tables.append(table)
    sec.notes.append("predicted: cost model with the simulated GPU's stand-in speeds and this CPU's probe; "
                     "device/serial (sim): the simulated GPU's timeline with copies overlapping compute / back to "
                     "back; run (wall): numpy kernels behind staging copies, not a GPU's speed")
    return sec
