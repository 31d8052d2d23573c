"""Runtime: this project's CPU EP against onnxruntime's CPU provider, same model, same inputs, same
process. Median wall time per `run`, the four contenders run in interleaved rounds after one
warm-up round (machine noise hits them alike); onnxruntime both with 1 intra-op thread
and with its default thread count (our numpy kernels use the BLAS library's own threads, which we
do not pin). Allocations per run (`sess.last_run_stats.allocations`: buffers and unplanned outputs
the runtime allocates) for the static plan, with `session.pre_allocate_execution_buffers`, and for
a decoder run with dynamic shapes (the traced, cached pattern; second and later runs).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnxruntime as ort
from _models import light_models, static_decoder
from _speech import speech_feeds, speech_model
from _table import Section, Table, fmt_ratio, fmt_seconds, interleaved_times, median

from ort_graph import zoo
from ort_session import PRE_ALLOCATE, InferenceSession

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(float16)": np.float16, "tensor(bool)": np.bool_}


def ort_session(model: bytes | str, threads: int | None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads is not None:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def random_feeds(sess: ort.InferenceSession, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for a model whose inputs have static shapes (the light CNNs)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        if not all(isinstance(d, int) for d in i.shape):
            raise ValueError(f"input {i.name!r} has shape {i.shape!r}; give feeds for models with symbolic dims")
        dtype = _ORT_TYPES[i.type]
        feeds[i.name] = (rng.standard_normal(i.shape) if np.dtype(dtype).kind == "f" else np.zeros(i.shape)).astype(dtype)
    return feeds


def _ours(model: Any, options: Mapping[str, Any]) -> InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, dict(options), providers=["CPUExecutionProvider"])


def measure(name: str, model: bytes | str, feeds: dict[str, np.ndarray], dims: Mapping[str, int], repeats: int,
            dynamic: bool = False) -> dict[str, Any]:
    """One row: median times of ours (static plan, pre-allocated) and onnxruntime (1 thread, default),
    run in interleaved rounds; allocations per run; the largest output difference."""
    rec: dict[str, Any] = {"case": name, "repeats": repeats}
    ours = _ours(model, {"free_dimension_overrides": dict(dims)})
    contenders: dict[str, Any] = {"ours": lambda: ours.run(None, feeds)}
    try:
        pre = _ours(model, {"free_dimension_overrides": dict(dims), PRE_ALLOCATE: "1"})
        contenders["ours_pre"] = lambda: pre.run(None, feeds)
    except Exception as e:  # e.g. a model whose shapes are not all static: say why
        pre = None
        rec["pre_error"] = f"{type(e).__name__}: {e}"
    ort_1t, ort_default = ort_session(model, 1), ort_session(model, None)
    contenders["ort_1t"] = lambda: ort_1t.run(None, feeds)
    contenders["ort_default"] = lambda: ort_default.run(None, feeds)
    # a 50 ms pause before each turn: onnxruntime's default (all-core) pool, or our OpenMP workers, left spinning by
    # the previous contender otherwise take a core from the next (measured: the demo prefill 21 ms right after
    # onnxruntime's default session, 7.8 ms alone)
    samples = interleaved_times(contenders, repeats, pause=0.05)
    for key, xs in samples.items():
        rec[key], rec[f"{key}_min"] = median(xs), min(xs)
    rec["allocations"] = ours.last_run_stats.allocations
    rec["layout"] = ours.last_run_stats.layout
    if pre is not None:
        rec["allocations_pre"] = pre.last_run_stats.allocations
    if dynamic:
        dyn = _ours(model, {})
        dyn.run(None, feeds)  # first run with this shape key: traced
        dyn.run(None, feeds)
        rec["allocations_dynamic"] = dyn.last_run_stats.allocations
        rec["layout_dynamic"] = dyn.last_run_stats.layout
    got, ref = ours.run(None, feeds), ort_1t.run(None, feeds)
    rec["max_abs_diff"] = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                              for a, b in zip(got, ref, strict=True) if np.asarray(a).size)
    return rec


def _cases(quick: bool, sec: Section) -> list[dict[str, Any]]:
    cfg = zoo.DEMO_CONFIG
    proto = zoo.decoder_proto(cfg).SerializeToString()
    out = []
    for label, seq, past in (("demo decoder prefill s64", 64, 0), ("demo decoder decode p128", 1, 128)):
        if quick and past:
            continue
        feeds = zoo.decoder_inputs(static_decoder(cfg, seq, past), 1, seq, past)
        out.append(measure(label, proto, feeds, {"batch": 1, "sequence": seq, "past_sequence": past},
                           3 if quick else 10, dynamic=True))
    # a streaming speech model's call (silero-VAD-like: Conv1d STFT front end, If on the sample rate, 2 LSTMs with
    # state in and out): one 512-sample window, as a VAD runs every 32 ms of 16 kHz audio
    out.append(measure("speech-like (LSTM, If) 512-sample window", speech_model().SerializeToString(), speech_feeds(), {},
                       10 if quick else 50))
    light, why = light_models(quick)
    if why:
        sec.notes.append(f"light CNN models skipped: {why}")
    for name, path in light.items():
        feeds = random_feeds(ort_session(str(path), 1))
        out.append(measure(name, str(path), feeds, {}, 1 if quick else 3))
    return out


def run(quick: bool = False) -> Section:
    sec = Section("runtime")
    t = Table("CPU runtime vs onnxruntime CPU EP (median wall time per run; same inputs, same process)",
              ["model", "ours", "ours pre-alloc", "ORT 1 thread", "ORT default", "ours/ORT 1t", "ours/ORT dflt",
               "allocs/run", "pre-alloc", "dynamic", "max |diff|"])
    for r in _cases(quick, sec):
        t.add(r["case"], fmt_seconds(r["ours"]), fmt_seconds(r.get("ours_pre")), fmt_seconds(r["ort_1t"]),
              fmt_seconds(r["ort_default"]), fmt_ratio(r["ours"] / r["ort_1t"], 1), fmt_ratio(r["ours"] / r["ort_default"], 1),
              r["allocations"], r.get("allocations_pre", "n/a"), r.get("allocations_dynamic", "-"),
              f"{r['max_abs_diff']:.1e}")
        if "pre_error" in r:
            sec.notes.append(f"{r['case']}: pre-allocation refused: {r['pre_error'][:200]}")
        sec.records.append(r)
    t.notes.append("allocs/run: static plan, buffers a run had to allocate (the host buffer the last run left is reused: "
                   "enable_cpu_mem_arena) + outputs not planned; pre-alloc: "
                   "session.pre_allocate_execution_buffers=1; dynamic: no dimension overrides, second run (cached pattern)")
    t.notes.append(f"onnxruntime {ort.__version__}; 'ORT default' uses its default intra-op thread count")
    sec.tables.append(t)
    return sec

