"""/health (JSON: the model, how it decodes, its limits and load) and /metrics (Prometheus' text format: queue
depth, time to first token, tokens/s, KV blocks and positions in use, preemptions, device bytes in use and peak vs budget)."""

from __future__ import annotations

from typing import Any

import numpy as np
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ._engine import Engine


async def health(engine: Engine, body: dict[str, Any]) -> Response:
    s, runner = engine.scheduler, engine.runner
    ok = s.error is None
    return JSONResponse({"status": "ok" if ok else "error", "error": s.error, "model": engine.name,
                         "decoding": runner.mode, "decoding_reason": runner.reason, "max_batch": runner.pool.slots,
                         "kv_block": runner.pool.block, "kv_blocks": runner.pool.blocks,
                         "kv_blocks_in_use": runner.pool.blocks_in_use(),
                         "ctx_size": runner.ctx, "prefill_chunk": runner.chunk, "queue_depth": s.queue_depth(),
                         "max_queue": s.max_queue, "active": runner.pool.in_use(),
                         "devices": engine.session.device_memory()}, status_code=200 if ok else 503)


def _metric(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
    lines += [f"# HELP ort_serve_{name} {help_text}", f"# TYPE ort_serve_{name} {kind}"]
    lines += [f"ort_serve_{name}{labels} {value:.9g}" for labels, value in samples]


def metrics_text(engine: Engine) -> str:
    s, pool, m = engine.scheduler, engine.runner.pool, engine.scheduler.metrics
    lines: list[str] = []
    _metric(lines, "queue_depth", "gauge", "requests waiting for a KV slot", [("", s.queue_depth())])
    _metric(lines, "requests_active", "gauge", "requests holding a KV slot", [("", pool.in_use())])
    _metric(lines, "requests_total", "counter", "requests admitted to the queue", [("", m.requests)])
    _metric(lines, "requests_refused_total", "counter", "requests refused, by reason",
            [(f'{{reason="{k}"}}', v) for k, v in sorted(m.refused.items())] or [('{reason="queue_full"}', 0)])
    _metric(lines, "requests_finished_total", "counter", "requests ended, by finish reason",
            [(f'{{reason="{k}"}}', v) for k, v in sorted(m.finished.items())])
    _metric(lines, "prompt_tokens_total", "counter", "prompt tokens prefilled", [("", m.prompt_tokens)])
    _metric(lines, "generated_tokens_total", "counter", "tokens generated", [("", m.generated_tokens)])
    _metric(lines, "decode_steps_total", "counter", "batched decode steps run", [("", m.decode_steps)])
    _metric(lines, "decode_step_sequences_total", "counter", "sequences decoded over those steps (/ steps: the mean "
            "batch)", [("", m.decoded_tokens)])
    ttft = np.asarray(m.ttft, np.float64)
    quantiles = [(f'{{quantile="{q}"}}', float(np.quantile(ttft, q)) if ttft.size else float("nan"))
                 for q in (0.5, 0.9, 0.99)]
    _metric(lines, "time_to_first_token_seconds", "summary", "from arrival to the first token (the last 1000)",
            quantiles)
    lines += [f"ort_serve_time_to_first_token_seconds_sum {float(ttft.sum()):.9g}",
              f"ort_serve_time_to_first_token_seconds_count {ttft.size}"]
    _metric(lines, "tokens_per_second", "gauge", "tokens generated per second over the last 64 steps",
            [("", m.tokens_per_second())])
    _metric(lines, "kv_blocks_in_use", "gauge", f"KV pool blocks ({pool.block} positions each) held by sequences",
            [("", pool.blocks_in_use())])
    _metric(lines, "kv_blocks_total", "gauge", "KV pool blocks (--kv-blocks)", [("", pool.blocks)])
    _metric(lines, "kv_positions_in_use", "gauge", "KV positions filled across the sequences", [("", sum(pool.lengths))])
    _metric(lines, "preemptions_total", "counter", "running sequences preempted for a KV block (resumed by "
            "recompute)", [("", m.preemptions)])
    runner = engine.runner
    _metric(lines, "model_run_seconds_total", "counter", "seconds in the session's runs (prefill chunks and decode "
            "steps)", [("", runner.run_s)])
    _metric(lines, "kv_copy_seconds_total", "counter", "seconds gathering the steps' pasts from the KV blocks and "
            "scattering their new positions back", [("", runner.copy_s)])
    if runner.resident is not None:
        _metric(lines, "kv_device_steps_total", "counter", "decode steps fed the last step's past on the device "
                "(--kv-on-device)", [("", runner.resident.steps)])
        _metric(lines, "kv_device_syncs_total", "counter", "device pasts copied back into the host pool when the "
                "batch changed", [("", runner.resident.syncs)])
    _metric(lines, "recomputed_tokens_total", "counter", "tokens prefilled again after a preemption",
            [("", m.recomputed_tokens)])
    devices = engine.session.device_memory()
    for key, name, what in (("in_use", "device_bytes_in_use", "device bytes allocated now"),
                            ("peak", "device_peak_bytes", "device bytes allocated at most since initialization"),
                            ("capacity", "device_budget_bytes", "the device budget the plan is held to")):
        samples = [(f'{{device="{d}"}}', v[key]) for d, v in sorted(devices.items()) if v.get(key) is not None]
        if samples:
            _metric(lines, name, "gauge", what, samples)
    return "\n".join(lines) + "\n"


async def metrics(engine: Engine, body: dict[str, Any]) -> Response:
    return PlainTextResponse(metrics_text(engine), media_type="text/plain; version=0.0.4")
