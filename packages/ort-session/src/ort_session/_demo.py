"""`ortrun demo`: the whole story on the built-in demo decoder — a budgeted placement, the memory
plan, a pre-allocated run, and its check against onnxruntime."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

import ort_graph
from ort_graph import zoo

from ._session import InferenceSession

BUDGET_MIB = 12
DIMS = {"batch": 1, "sequence": 16, "past_sequence": 0}


def _cuda_status() -> tuple[bool, str]:
    probe = InferenceSession(zoo.decoder(zoo.DecoderConfig(layers=1, kv_cache=False)),
                             {"free_dimension_overrides": {"batch": 1, "sequence": 2}}, providers=["CUDAExecutionProvider"])
    on_cuda = [n for n in probe.model.graph.nodes if n.ep == "CUDAExecutionProvider"]
    declines = probe.placement.result.declines
    return bool(on_cuda), (declines[0].reason if declines else "")


def demo(kernel_libraries: Sequence[str] = (), options: Mapping[str, str] | None = None) -> int:
    """`kernel_libraries` and `options` (`ortrun demo --kernel-library PATH --option KEY=VALUE`) join the
    demo's own session options (theirs win)."""
    model = zoo.demo_decoder()
    weights = sum(t.nbytes for t in model.graph.initializers.values())
    print(f"Demo model: a {zoo.DEMO_CONFIG.layers}-layer Llama-style decoder (hidden {zoo.DEMO_CONFIG.hidden}, "
          f"{len(model.graph.nodes)} nodes, {weights / 2**20:.1f} MiB of fp32 weights), "
          f"batch {DIMS['batch']}, {DIMS['sequence']} tokens.\n")
    have_cuda, why = _cuda_status()
    if have_cuda:
        providers, budget = ["CUDAExecutionProvider", "CPUExecutionProvider"], f"cuda:{BUDGET_MIB}MiB"
    else:
        print("No CUDA device here, so CUDAExecutionProvider declines at initialization:\n  " + why + "\n"
              "The demo uses SimulatedGPUExecutionProvider instead: a device whose memory the host cannot read "
              "(its kernels run through explicit staging copies), held to the same budget, with the same placement, "
              "copies and memory plan.\n")
        providers, budget = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"], f"gpu:{BUDGET_MIB}MiB"
    print(f"1. Placement with only a budget ({budget}): auto-fit puts as many whole layers as fit on the device.\n")
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = InferenceSession(model, {"budgets": budget, "free_dimension_overrides": DIMS,
                                        "session.pre_allocate_execution_buffers": "1",
                                        "kernel_libraries": list(kernel_libraries), **dict(options or {})},
                                providers=providers)
    init = time.perf_counter() - t
    print("   Memory plan, what each device allocates (weights + liveness-planned activations and workspace, one "
          "buffer per device, allocated once at initialization):\n")
    print(sess.plan.memory_table())
    print(f"\n   auto-fit: {sess.placement.layers_on_device} of {zoo.DEMO_CONFIG.layers} layers on the device; "
          f"{len(sess.copies)} boundary copies inserted; planned in {init:.2f} s.\n")
    print("2. Why: per layer, its resident weights and auto-fit's cost sums (per-node sums without liveness reuse, "
          "the count each layer was placed by; the plan above is what is allocated):\n")
    print(sess.plan.report.table(cost_view=True))
    for w in caught:
        print(f"   warning: {w.message}")
    device_total = next(d for d in sess.plan.devices().values() if d["budget"] is not None)
    print(f"\n   device total {device_total['total'] / 2**20:.2f} MiB <= budget {device_total['budget'] / 2**20:.2f} MiB: "
          f"{'yes' if device_total['total'] <= device_total['budget'] else 'NO'}\n")
    print("3. Run on the pre-allocated buffers, checked against onnxruntime on the same inputs:\n")
    feeds = zoo.decoder_inputs(zoo.DEMO_CONFIG, DIMS["batch"], DIMS["sequence"], DIMS["past_sequence"])
    sess.run(None, feeds)  # warm-up
    times = []
    for _ in range(5):
        t = time.perf_counter()
        outs = sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    stats = sess.last_run_stats
    from ._cli_commands import _onnxruntime

    ort = _onnxruntime()
    ref_sess = ort.InferenceSession(ort_graph.to_proto(zoo.demo_decoder()).SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    ref = ref_sess.run(sess.output_names, feeds)
    worst = max(float(np.max(np.abs(a - b))) if a.size else 0.0 for a, b in zip(outs, ref))
    print(f"   {len(outs)} outputs, logits {list(outs[0].shape)}; median run {np.median(times) * 1e3:.1f} ms; "
          f"{stats.nodes_run} kernels; {stats.allocations} allocations during the run "
          f"(layout: {stats.layout}).")
    ok = worst < 1e-3
    print(f"   max |ours - onnxruntime| over all outputs = {worst:.2e}: {'PASS' if ok else 'FAIL'}")
    for device, use in sess.device_memory().items():  # measured by the device's allocator, not planned
        cap = use["capacity"]
        held = cap is None or use["peak"] <= cap
        ok = ok and held
        print(f"   {device} memory measured by its allocator: peak {use['peak'] / 2**20:.2f} MiB "
              f"(weights {use['weights'] / 2**20:.2f} MiB uploaded once + the pre-allocated buffer) of capacity "
              f"{'unlimited' if cap is None else f'{cap / 2**20:.2f} MiB'}: {'held' if held else 'EXCEEDED'}")
    print()
    print("Next: `ortrun plan MODEL --budget cuda:6GiB`, `ortrun run MODEL --check`, `ortrun kernels`.")
    return 0 if ok else 1
