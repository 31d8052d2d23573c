"""One prepared GPU check for ort-cuda-ep (< 3 minutes on an H200).

    python packages/ort-cuda-ep/gpu_check.py [--quick] [--json results.json]

1. discovers the device and compiles every kernel for its arch (NVRTC, cached);
2. runs the GPU tests (packages/ort-cuda-ep/tests/test_gpu.py: outputs vs numpy / onnxruntime CPU,
   declared workspace == used, planned vs scratch);
3. times each kernel on device-resident data with CUDA events and prints it against the
   memory-bandwidth limit (bytes moved / peak bandwidth), MatMul also in TFLOP/s;
4. times the demo decoder end to end, every layer on CUDA (device-resident, pre-allocated) vs the CPU EP,
   with the device's measured peak against its budget;
5. streams the demo decoder's layers through two device slots at 40% of its weights (vs the CPU EP; not
   with --quick).
Exits non-zero when the device is missing or a test fails. Benchmarks print numbers only.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent


def _events(driver):
    def make():
        err, ev = driver.cuEventCreate(0)
        assert int(err) == 0, err
        return ev

    return driver, make


def bench(rt, fn, iters: int) -> float:
    """Median milliseconds of fn() over `iters` runs, timed with CUDA events on the null stream."""
    driver, make = _events(rt._driver)
    start, stop = make(), make()
    fn()
    rt.synchronize()
    times = []
    for _ in range(iters):
        driver.cuEventRecord(start, 0)
        fn()
        driver.cuEventRecord(stop, 0)
        driver.cuEventSynchronize(stop)
        err, ms = driver.cuEventElapsedTime(start, stop)
        times.append(float(ms))
    driver.cuEventDestroy(start)
    driver.cuEventDestroy(stop)
    return float(np.median(times))


def session_timings(big: bool) -> list[dict]:
    """The demo decoder end to end: every layer on CUDA (pre-allocated, device-resident) vs the CPU EP,
    prefill and one decode step, with the device's measured peak against its budget."""
    import warnings

    from ort_graph import zoo

    try:
        from ort_session import InferenceSession
    except ImportError:
        print("sessions: skipped (ort-session is not installed)")
        return []
    rows = []
    cases = (("prefill s64", 1, 64, 0), ("decode p128", 1, 1, 128)) if big else (("decode p8", 1, 1, 8),)
    print("sessions (demo decoder, median of 10 runs after 3 warm-ups):")
    for name, b, s, past in cases:
        dims = {"batch": b, "sequence": s, "past_sequence": past}
        feeds = zoo.decoder_inputs(zoo.DEMO_CONFIG, b, s, past)
        row = {"case": name}
        for label, providers, budget in (("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"], "cuda:1GiB"),
                                         ("cpu", ["CPUExecutionProvider"], None)):
            opts = {"free_dimension_overrides": dims, "session.pre_allocate_execution_buffers": "1"}
            if budget:
                opts["budgets"] = budget
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sess = InferenceSession(zoo.demo_decoder(), opts, providers=providers)
            for _ in range(3):
                sess.run(None, feeds)
            times = []
            for _ in range(10):
                t = time.perf_counter()
                sess.run(None, feeds)
                times.append((time.perf_counter() - t) * 1e3)
            row[f"{label}_ms"] = float(np.median(times))
            row[f"{label}_allocations"] = sess.last_run_stats.allocations
            if label == "cuda":
                row["cuda_nodes"] = sum(n.ep == "CUDAExecutionProvider" for n in sess.model.graph.nodes)
                row["copies"] = len(sess.copies)
                row["device_memory"] = sess.device_memory().get("cuda:0")
            sess.close()
        print(f"  {name:<12} CUDA {row['cuda_ms']:7.2f} ms ({row['cuda_nodes']} nodes, {row['copies']} copies, "
              f"{row['cuda_allocations']} allocations, peak {row['device_memory']['peak']} B of "
              f"{row['device_memory']['capacity']})   CPU {row['cpu_ms']:7.2f} ms")
        rows.append(row)
    return rows


def streamed_session(cfg=None, sequence: int = 64) -> dict:
    """5. A decoder (default: the demo decoder) with its weights at 2.5x the budget: streamed layers through
    two device slots (session.weight_streaming=on) vs the CPU EP: outputs equal, the device's peak within its
    budget, the copies per run equal to the plan, the copies asynchronous (on a stream of their own, from
    pinned staging buffers of the planned size), and the time per prefill run, next to the same run with
    every copy waited for as soon as it is issued (no overlap): `overlap_speedup` > 1 is the overlap the
    hardware gives. Not part of --quick (its recording driver computes nothing to compare); tests run it on
    the emulating driver with a small `cfg` (where the times mean nothing)."""
    import warnings

    from ort_graph import zoo

    try:
        from ort_session import InferenceSession
    except ImportError:
        print("streamed layers: skipped (ort-session is not installed)")
        return {}
    cfg = cfg or zoo.DEMO_CONFIG
    dims = {"batch": 1, "sequence": sequence, "past_sequence": 0}
    feeds = zoo.decoder_inputs(cfg, 1, sequence, 0)
    budget = int(sum(t.nbytes for t in zoo.decoder(cfg).graph.initializers.values()) * 0.4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = InferenceSession(zoo.decoder(cfg), {"free_dimension_overrides": dims}).run(None, feeds)
        sess = InferenceSession(zoo.decoder(cfg), {"free_dimension_overrides": dims, "budgets": f"cuda:{budget}",
                                                   "session.weight_streaming": "on"},
                                providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    plan = sess.placement.streaming
    if plan is None:
        print(f"streamed layers: FAIL, nothing streamed at budget {budget} B ({sess.placement.summary})")
        sess.close()
        return {"ok": False}
    streamer = sess._executor.streamer
    sess.run(None, feeds)
    times, serial_times = [], []
    for _ in range(5):  # interleaved: the overlapped run, then the same run with each copy waited for at once
        t = time.perf_counter()
        got = sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
        streamer.serialize_copies = True
        t = time.perf_counter()
        serial = sess.run(None, feeds)
        serial_times.append((time.perf_counter() - t) * 1e3)
        streamer.serialize_copies = False
    err = max(float(np.max(np.abs(a - b))) for out in (got, serial) for a, b in zip(out, want))
    use = sess.device_memory()["cuda:0"]
    stats, copies = sess.last_run_stats, plan.copies()
    asynchronous = streamer.copy is not None and streamer.copy.handle not in (0, None)
    pinned = streamer.pinned_bytes == copies["pinned_host_bytes"] > 0
    ok = err < 1e-3 and use["peak"] <= budget and (stats.streamed_copies, stats.streamed_bytes) == (
        copies["count"], copies["bytes"]) and asynchronous and pinned
    median, serial_median = float(np.median(times)), float(np.median(serial_times))
    row = {"ok": ok, "max_abs_err": err, "median_ms": median, "serial_median_ms": serial_median,
           "overlap_speedup": serial_median / median if median else None, "peak": use["peak"], "budget": budget,
           "streamed_layers": len(plan.layers), "streamed_bytes": stats.streamed_bytes,
           "pinned_host_bytes": streamer.pinned_bytes, "copy_stream": asynchronous, "predicted_s": dict(plan.times)}
    print(f"streamed layers: {'ok' if ok else 'FAIL'}: {sess.placement.summary}; max |err| {err:.2e}, peak "
          f"{use['peak']} B of {budget}, {stats.streamed_copies} copies / {stats.streamed_bytes} B per run on a copy "
          f"stream ({'yes' if asynchronous else 'NO'}) from {streamer.pinned_bytes} B of pinned staging, "
          f"{median:.1f} ms per prefill vs {serial_median:.1f} ms with each copy waited for at once "
          f"(predicted {plan.times['with streaming'] * 1e3:.1f} ms)")
    sess.close()
    return row


def main(argv: list[str] | None = None, ep=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="tiny benchmark shapes (a smoke run of this script)")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "gpu_check.json"))
    ap.add_argument("--skip-tests", action="store_true")
    args = ap.parse_args(argv)

    from ort_cuda_ep import CudaExecutionProvider, attention_recipe, gqa_recipe, matmul_nbits_recipe
    from ort_cuda_ep._launch import compute
    from ort_cuda_ep._ops import find_spec

    report: dict = {}
    ep = ep or CudaExecutionProvider()
    if not ep.can_run:
        print(f"no CUDA driver/device: {ep.unavailable_reason}")
        return 2
    p = ep.profile
    print(f"device: {ep.device.name} ({p.arch}, {p.sm_count} SMs, {p.memory_bytes / 2**30:.1f} GiB, "
          f"peak {p.memory_bandwidth / 1e9:.0f} GB/s), driver {ep.device.driver_version}")
    report["device"] = {"name": ep.device.name, "arch": p.arch, "sms": p.sm_count, "memory": p.memory_bytes,
                        "bandwidth": p.memory_bandwidth, "driver": ep.device.driver_version}

    t = time.perf_counter()
    compiled = ep.compile_all([p.arch])
    print(f"compiled {len(compiled)} kernel sources for {p.arch} in {time.perf_counter() - t:.2f}s "
          f"(cache: {sorted({c.from_cache or 'compiled' for c in compiled})})")

    rc = 0
    if not args.skip_tests:
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", str(HERE / "tests" / "test_gpu.py"),
                               str(HERE.parent.parent / "tests" / "integration" / "test_gpu_session.py"), "-q", "-m", "gpu",
                               "-p", "no:cacheprovider", "--rootdir", str(HERE.parent.parent)],
                              capture_output=True, text=True, timeout=150)
        tail = proc.stdout.strip().splitlines()[-15:]
        print("\n".join(["gpu tests:"] + ["  " + line for line in tail]))
        print(f"gpu tests took {time.perf_counter() - t:.1f}s, exit {proc.returncode}")
        report["tests"] = {"exit": proc.returncode, "summary": tail[-1] if tail else ""}
        rc = proc.returncode

    rt = ep.runtime
    rng = np.random.default_rng(0)
    big = not args.quick
    rows = []

    def dev(*shape, dtype=np.float32):
        return rt.to_device(rng.standard_normal(shape).astype(dtype) if np.dtype(dtype).kind == "f"
                            else rng.integers(0, 255, shape, dtype=dtype))

    class Reused:
        """Planned-style workspace for timing: one device buffer per size, reused across iterations."""

        def __init__(self):
            self.buffers: dict[int, object] = {}

        def preallocated(self, slot_id, nbytes):
            if nbytes not in self.buffers:
                self.buffers[nbytes] = rt.allocator.alloc(nbytes)
            return self.buffers[nbytes].ptr

        def scratch(self, nbytes):
            raise AssertionError("unreachable: preallocated always answers")

        def release(self):
            for buf in self.buffers.values():
                rt.allocator.free(buf)

    def run(name, op, domain, inputs, attrs, nbytes, flops=0, iters=20, n_outputs=1):
        """Times compute() with outputs and workspace allocated once (kernel time only)."""
        spec = find_spec(op, domain, 21 if not domain else 1)
        ws = Reused()
        pool: dict = {}
        seen: dict = {}  # requests per (shape, dtype) in the current call: outputs of one shape stay distinct
        real_empty = rt.empty

        def pooled_empty(shape, dtype=np.float32):
            key = (tuple(int(d) for d in shape), np.dtype(dtype).str)
            seen[key] = seen.get(key, 0) + 1
            key = (*key, seen[key])
            if key not in pool:
                pool[key] = real_empty(shape, dtype)
            return pool[key]

        def call():
            seen.clear()
            compute(rt, spec, name, inputs, attrs, ws, n_outputs)

        rt.empty = pooled_empty  # type: ignore[method-assign]
        try:
            ms = bench(rt, call, iters)
        finally:
            rt.empty = real_empty  # type: ignore[method-assign]
        for arr in pool.values():
            rt.release(arr)
        ws.release()
        gbs = nbytes / ms / 1e6
        row = {"kernel": name, "ms": ms, "GB/s": gbs, "bw_fraction": nbytes / ms / 1e-3 / p.memory_bandwidth,
               "bandwidth_bound_ms": nbytes / p.memory_bandwidth * 1e3}
        if flops:
            row["TFLOP/s"] = flops / ms / 1e9
        rows.append(row)
        print(f"  {name:<44} {ms:8.3f} ms  {gbs:8.1f} GB/s  {100 * row['bw_fraction']:5.1f}% of peak BW"
              f"  (limit {row['bandwidth_bound_ms']:.3f} ms)" + (f"  {row['TFLOP/s']:.1f} TFLOP/s" if flops else ""))

    print("kernel timings (median, device-resident data, outputs and workspace allocated once):")
    n = (64 << 20) if big else (1 << 16)
    a, b = dev(n), dev(n)
    run(f"Add {n} floats", "Add", "", [a, b], {}, 3 * 4 * n)
    run(f"Sigmoid {n} floats", "Sigmoid", "", [a], {}, 2 * 4 * n)
    for t in (a, b):
        rt.release(t)
    r, c = (32768, 4096) if big else (64, 1024)
    x, w = dev(r, c), dev(c)
    run(f"Softmax {r}x{c}", "Softmax", "", [x], {"axis": -1}, 2 * 4 * r * c)
    run(f"SimplifiedLayerNorm {r}x{c}", "SimplifiedLayerNormalization", "", [x, w], {"axis": -1, "epsilon": 1e-6},
        2 * 4 * r * c)
    rt.release(x)
    rt.release(w)
    for N, K in ((4096, 4096), (14336, 4096), (11008, 4096)) if big else ((256, 256),):
        bs = 32
        A1, A64 = dev(1, K), dev(64, K)
        B = dev(N, K // bs, bs // 2, dtype=np.uint8)
        S = rt.to_device(rng.random(N * K // bs).astype(np.float32) * 0.01)
        wbytes = N * K // 2 + N * K // bs * 4
        attrs = {"N": N, "K": K, "bits": 4, "block_size": bs}
        run(f"MatMulNBits GEMV M=1 N={N} K={K}", "MatMulNBits", "com.microsoft", [A1, B, S], attrs, wbytes + 4 * (K + N))
        ws_bytes = matmul_nbits_recipe(64, N, K, 4, bs).workspace_bytes
        run(f"MatMulNBits tiled M=64 N={N} K={K}", "MatMulNBits", "com.microsoft", [A64, B, S], attrs,
            wbytes + 2 * ws_bytes + 4 * 64 * (K + N), flops=2 * 64 * N * K, iters=10)
        A1h, A64h, Sh = dev(1, K, dtype=np.float16), dev(64, K, dtype=np.float16), dev(N * K // bs, dtype=np.float16)
        run(f"MatMulNBits fp16 GEMV M=1 N={N} K={K}", "MatMulNBits", "com.microsoft", [A1h, B, Sh], attrs,
            N * K // 2 + N * K // bs * 2 + 2 * (K + N))
        # the tiled path dequantizes B per tile in shared memory: no workspace (was 2*K*N for float16)
        name = f"MatMulNBits fp16 tiled M=64 N={N} K={K}"
        run(name, "MatMulNBits", "com.microsoft", [A64h, B, Sh], attrs, N * K // 2 + N * K // bs * 2 + 2 * 64 * (K + N),
            flops=2 * 64 * N * K, iters=10)
        report.setdefault("nbits_tiled_workspace", {})[name] = rt.counters.last[name]
        for t in (A1, A64, B, S, A1h, A64h, Sh):
            rt.release(t)
    M = 4096 if big else 128
    X, Y = dev(M, M), dev(M, M)
    run(f"MatMul {M}x{M}x{M}", "MatMul", "", [X, Y], {}, 3 * 4 * M * M, flops=2 * M**3, iters=5)
    rt.release(X)
    rt.release(Y)
    for B_, H, D, L in ((1, 32, 128, 8192), (1, 8, 128, 32768), (8, 32, 128, 4096)) if big else ((1, 2, 64, 2048),):
        q, k, v = dev(B_, 1, H * D), dev(B_, L, H * D), dev(B_, L, H * D)
        rec = attention_recipe(B_, 1, L, H, D, p.sm_count)
        run(f"MHA decode B={B_} H={H} D={D} L={L} ({rec.num_splits} splits)", "MultiHeadAttention", "com.microsoft",
            [q, k, v], {"num_heads": H}, 2 * 4 * B_ * L * H * D + rec.total_bytes * 2)
        qh, kh, vh = (rt.to_device(rt.to_host(t).astype(np.float16)) for t in (q, k, v))
        run(f"MHA fp16 decode B={B_} H={H} D={D} L={L}", "MultiHeadAttention", "com.microsoft", [qh, kh, vh],
            {"num_heads": H}, 2 * 2 * B_ * L * H * D + rec.total_bytes * 2)
        for t in (q, k, v, qh, kh, vh):
            rt.release(t)
    # data movement (bytes read + written) and bfloat16 compute
    Bm, S, H, D = (1, 2048, 32, 128) if big else (1, 16, 2, 64)
    x = dev(Bm, S, H, D)
    run(f"Transpose [B,S,H,D]->[B,H,S,D] S={S} H={H} D={D}", "Transpose", "", [x], {"perm": [0, 2, 1, 3]},
        2 * 4 * x.size)
    past, new = dev(Bm, H, S, D), dev(Bm, H, 1, D)
    run(f"Concat KV append past={S} H={H} D={D}", "Concat", "", [past, new], {"axis": 2}, 2 * 4 * (past.size + new.size))
    table = dev(32000 if big else 256, 4096 if big else 64)
    ids = rt.to_device(rng.integers(0, table.shape[0], (1, S), dtype=np.int64))
    run(f"Gather embedding rows={S} hidden={table.shape[1]}", "Gather", "", [table, ids], {"axis": 0},
        2 * 4 * S * table.shape[1] + 8 * S)
    run(f"Cast float32->float16 {x.size}", "Cast", "", [x], {"to": 10}, 6 * x.size)
    for t in (x, past, new, table, ids):
        rt.release(t)
    import ml_dtypes

    bf = ml_dtypes.bfloat16
    X, Y = dev(M, M, dtype=np.float32), dev(M, M, dtype=np.float32)
    Xb, Yb = (rt.to_device(rt.to_host(t).astype(bf)) for t in (X, Y))
    run(f"MatMul bf16 {M}x{M}x{M}", "MatMul", "", [Xb, Yb], {}, 3 * 2 * M * M, flops=2 * M**3, iters=5)
    run(f"Softmax bf16 {M}x{M}", "Softmax", "", [Xb], {"axis": -1}, 2 * 2 * M * M)
    for t in (X, Y, Xb, Yb):
        rt.release(t)
    # GroupQueryAttention, as the genai exports: packed QKV, rotary, BNSH past copied into present
    # (1, 1, 32, 8, 128, 4095): the seeds' fast-decode example, splits chosen by the 8 KV heads
    for B_, S_, H, Hkv, D, P in (((1, 1, 32, 8, 128, 4095), (1, 1, 32, 8, 128, 8191), (8, 1, 32, 8, 128, 4095),
                                  (1, 512, 32, 8, 128, 0))
                                 if big else ((1, 1, 4, 2, 16, 255),)):
        T = P + S_
        ang = np.arange(T)[:, None] * (1.0 / 10000 ** (np.arange(D // 2) / (D // 2)))[None, :]
        qkv = dev(B_, S_, (H + 2 * Hkv) * D, dtype=np.float16)
        pk, pv = dev(B_, Hkv, P, D, dtype=np.float16), dev(B_, Hkv, P, D, dtype=np.float16)
        seqlens = rt.to_device(np.full(B_, T - 1, np.int32))
        cos, sin = (rt.to_device(f(ang).astype(np.float16)) for f in (np.cos, np.sin))
        rec = gqa_recipe(B_, S_, P, H, D, p.sm_count, Hkv)
        moved = 2 * (B_ * S_ * (H + 2 * Hkv) * D + B_ * S_ * H * D + B_ * Hkv * D * (2 * P + 4 * T))
        run(f"GQA fp16 B={B_} S={S_} H={H}/{Hkv} D={D} T={T} ({rec.num_splits} splits)", "GroupQueryAttention",
            "com.microsoft", [qkv, None, None, pk, pv, seqlens, np.array(T, np.int32), cos, sin],
            {"num_heads": H, "kv_num_heads": Hkv, "do_rotary": 1}, moved + 2 * rec.total_bytes,
            flops=4 * B_ * H * S_ * T * D, iters=10, n_outputs=3)
        report.setdefault("gqa_workspace", {})[f"B={B_} S={S_} T={T}"] = {
            "splits": rec.num_splits, "recipe_bytes": rec.total_bytes, "used": rt.counters.last[rows[-1]["kernel"]]}
        for t_ in (qkv, pk, pv, seqlens, cos, sin):
            rt.release(t_)
    # Conv as an implicit GEMM (no workspace): a ResNet-style 3x3, a depthwise 3x3 and a 1x1, float16 too
    Bc, Hc = (8, 56) if big else (1, 12)
    for name, cin, cout, k, g, stride in (("3x3", 64, 64, 3, 1, 1), ("depthwise 3x3", 64, 64, 3, 64, 1),
                                           ("1x1 s2", 64, 128, 1, 1, 2)):
        for dt in (np.float32, np.float16):
            X, Wt = dev(Bc, cin, Hc, Hc, dtype=dt), dev(cout, cin // g, k, k, dtype=dt)
            oh = (Hc + 2 * (k // 2) - k) // stride + 1
            item = np.dtype(dt).itemsize
            run(f"Conv {name} {np.dtype(dt).name} N={Bc} C={cin} HW={Hc} OC={cout}", "Conv", "", [X, Wt],
                {"group": g, "strides": [stride, stride], "pads": [k // 2] * 4}, item * (X.size + Wt.size + Bc * cout * oh * oh),
                flops=2 * Bc * cout * oh * oh * (cin // g) * k * k, iters=10)
            report.setdefault("conv_workspace", {})[rows[-1]["kernel"]] = rt.counters.last[rows[-1]["kernel"]]
            rt.release(X)
            rt.release(Wt)
    # PackedAttention (projection into the one 256-byte-aligned root) and PackedMultiHeadAttention (none)
    from ort_cuda_ep._packed_recipe import packed_attention_recipe

    lens, Sp, Hp, Dp = ([128, 77, 200, 31] * 4, 256, 12, 64) if big else ([5, 3], 8, 2, 32)
    T_ = sum(lens)
    real = [b * Sp + s for b, n_ in enumerate(lens) for s in range(n_)]
    pads = [b * Sp + s for b, n_ in enumerate(lens) for s in range(n_, Sp)]
    off = rt.to_device(np.array(real + pads, np.int32).reshape(len(lens), Sp))
    cum = rt.to_device(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
    hid = Hp * Dp
    Xp, Wp, Bp = dev(T_, hid, dtype=np.float16), dev(hid, 3 * hid, dtype=np.float16), dev(3 * hid, dtype=np.float16)
    rec = packed_attention_recipe(T_, hid, hid, Hp, 2)
    attn_flops = 4 * Hp * Dp * sum(n_ * n_ for n_ in lens)
    run(f"PackedAttention fp16 T={T_} H={Hp} D={Dp} (root {rec.total_bytes} B)", "PackedAttention", "com.microsoft",
        [Xp, Wp, Bp, off, cum], {"num_heads": Hp}, 2 * (Xp.size + Wp.size + T_ * hid) + 2 * rec.total_bytes,
        flops=2 * T_ * hid * 3 * hid + attn_flops, iters=10)
    report["packed_attention_workspace"] = {"recipe_bytes": rec.total_bytes, "used": rt.counters.last[rows[-1]["kernel"]]}
    Qp = dev(T_, Hp, 3, Dp, dtype=np.float16)
    run(f"PackedMultiHeadAttention fp16 packed QKV T={T_} H={Hp} D={Dp}", "PackedMultiHeadAttention", "com.microsoft",
        [Qp, None, None, None, off, cum], {"num_heads": Hp}, 2 * (Qp.size + T_ * hid), flops=attn_flops, iters=10)
    for t_ in (off, cum, Xp, Wp, Bp, Qp):
        rt.release(t_)
    report["kernels"] = rows
    report["workspace_counters"] = {"planned": rt.counters.planned, "scratch": rt.counters.scratch}
    leaked = rt.allocator.bytes_in_use
    print(f"device bytes still allocated after the run: {leaked}")
    report["leaked_bytes"] = leaked
    report["sessions"] = session_timings(big)
    if big:  # the full check only: --quick is the recording driver's smoke run, which computes nothing
        report["streamed"] = streamed_session()
        if report["streamed"] and not report["streamed"]["ok"]:
            rc = rc or 1
    try:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"results written to {args.json}")
    except OSError as e:
        print(f"could not write {args.json}: {e}")
    ep.close()
    return rc or (1 if leaked else 0)


if __name__ == "__main__":
    sys.exit(main())
