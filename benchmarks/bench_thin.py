"""Thin decoders: many thin layers, many small ops, where the host cost per node decides. The `ort_graph.zoo`
genai-layout decoder (`zoo.genai_decoder_proto`) shaped like a real 135M-parameter LLM (30 layers, hidden 576,
9 heads / 3 KV heads of 64, intermediate 1536, vocab 49152), its MatMuls packed to int4 (block 32, zero points,
accuracy_level 4, as the onnxruntime-genai builder's CPU int4 exports carry) and in fp32; prefill of 128 tokens
and one decode step with 512 past tokens; this project's session against onnxruntime's InferenceSession (the same
model, same inputs, same process), at 1 and 2 intra-op threads, interleaved (see `_table.interleaved_times`).
Tokens/s: prefill tokens / s, or decode steps / s.

Where onnxruntime-genai is installed, a second table drives its generator (`_genai_peer`: the same model in a
builder-layout folder) for a prefill of 128 tokens and GENAI_STEPS greedy decode steps, and ours and onnxruntime's
session through the same loop (the past grows by one token a step, as genai's does), in interleaved rounds.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from typing import Any

import attrs
import numpy as np
import onnxruntime as ort
from _int4 import quantize_int4
from _table import Section, Table, fmt_ratio, fmt_seconds, interleaved_times, median
from bench_llm import PRE_ALLOCATE, ort_session

from ort_graph import zoo
from ort_session import InferenceSession

THIN = zoo.DecoderConfig(layers=30, hidden=576, heads=9, kv_heads=3, intermediate=1536, vocab=49152,
                         max_positions=1024)
PHASES = (("prefill 128", 128, 0), ("decode p512", 1, 512))
KINDS = (("int4 acc4", 4), ("fp32", None))  # (label, accuracy_level or None for fp32 weights)
TARGETS = {"decode": 1.0, "prefill": 0.9}  # issue 26: tokens/s ours / peer


GENAI_STEPS = 16  # decode steps after the prefill in the generator table
# BENCH_THIN_ROWS="fp32 prefill,int4 decode": only the session rows whose "kind phase" label holds every word of one
# comma-separated filter, and neither the oversubscribed row nor the generator table (a partial, quicker run)
ROWS_ENV = "BENCH_THIN_ROWS"


def _rows_filter() -> list[list[str]] | None:
    raw = os.environ.get(ROWS_ENV, "").strip()
    return [f.split() for f in raw.split(",") if f.strip()] if raw else None


def _wanted(label: str, phase: str, filters: list[list[str]] | None) -> bool:
    return filters is None or any(all(w in f"{label} {phase}" for w in f) for f in filters)
BUSY = 2  # busy processes of the oversubscribed row


def _oversubscribed(quick: bool) -> list[dict[str, Any]]:
    """The int4 decode step at 2 threads with BUSY processes spinning on the cores (ours vs onnxruntime)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(BUSY)]
    try:
        rows = _case("int4 acc4", 4, "decode p512", 1, 512, quick, thread_counts=(2,))
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    return [{**r, "case": r["case"] + " oversubscribed", "busy": BUSY} for r in rows]



def _genai_note() -> str:
    installed = importlib.util.find_spec("onnxruntime_genai") is not None
    return ("the onnxruntime-genai generator is the peer of the next table" if installed
            else "onnxruntime-genai is not installed: no generator table (pip install onnxruntime-genai)")


def ours_session(model: bytes, threads: int, total: int) -> Any:
    """Ours on a planned, pre-allocated step: the genai layout's one dynamic dim (total_sequence_length) fixed."""
    options = {"intra_op_num_threads": threads, PRE_ALLOCATE: "1", "free_dimension_overrides": {
        "total_sequence_length": total}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _repeats(quick: bool, seq: int) -> int:
    return (2 if quick else 4) if seq > 1 else (10 if quick else 30)


def _case(label: str, level: int | None, phase: str, seq: int, past: int, quick: bool,
          thread_counts: tuple[int, ...] = (1, 2)) -> list[dict[str, Any]]:
    static = attrs.evolve(THIN, batch=1, sequence=seq, past_sequence=past)
    proto = zoo.genai_decoder_proto(static)
    model = (proto if level is None else quantize_int4(proto, 32, level)).SerializeToString()
    feeds = zoo.genai_decoder_inputs(static, 1, seq, past)
    out = []
    for threads in thread_counts:
        ours, theirs = ours_session(model, threads, seq + past), ort_session(model, threads)
        decode = seq == 1
        samples = interleaved_times({"ours": lambda s=ours: s.run(None, feeds),
                                     "ort": lambda s=theirs: s.run(None, feeds)}, _repeats(quick, seq),
                                    settle=3 if decode else 1, block=5 if decode else 1, pause=0.05)
        got, ref = ours.run(None, feeds)[0], theirs.run(None, feeds)[0]
        t_ours, t_ort = median(samples["ours"]), median(samples["ort"])
        out.append({"case": f"thin {label} {phase}", "phase": phase.split()[0], "threads": threads, "ours": t_ours,
                    "ort": t_ort, "ours_tok_s": seq / t_ours, "ort_tok_s": seq / t_ort,
                    "max_rel_diff": float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))})
        del ours, theirs
    return out


def run(quick: bool = False) -> Section:
    sec = Section("thin")
    peer = "onnxruntime"
    t = Table(f"thin decoder (135M shape: 30 layers, hidden 576) vs {peer}, same threads, tokens/s",
              ["case", "threads", "ours", "ours tok/s", peer, "peer tok/s", "tok/s ratio", "target", "max rel diff"])
    filters = _rows_filter()
    for label, level in KINDS:
        for phase, seq, past in PHASES:
            if not _wanted(label, phase, filters):
                continue
            for r in _case(label, level, phase, seq, past, quick):
                ratio = r["ours_tok_s"] / r["ort_tok_s"]
                target = TARGETS[r["phase"]]
                t.add(r["case"], r["threads"], fmt_seconds(r["ours"]), f"{r['ours_tok_s']:.1f}", fmt_seconds(r["ort"]),
                      f"{r['ort_tok_s']:.1f}", fmt_ratio(ratio, 2), f">= {target}{'' if ratio >= target else ' (miss)'}",
                      f"{r['max_rel_diff']:.1e}")
                sec.records.append({**r, "ratio": ratio, "target": target, "peer": peer})
    for r in _oversubscribed(quick) if filters is None else ():
        ratio = r["ours_tok_s"] / r["ort_tok_s"]
        t.add(r["case"], r["threads"], fmt_seconds(r["ours"]), f"{r['ours_tok_s']:.1f}", fmt_seconds(r["ort"]),
              f"{r['ort_tok_s']:.1f}", fmt_ratio(ratio, 2), "-", f"{r['max_rel_diff']:.1e}")
        sec.records.append({**r, "ratio": ratio, "peer": peer})
    t.notes.append(f"oversubscribed: the same decode step at 2 threads while {BUSY} busy processes (`while 1: pass`, "
                   "started and stopped by this bench) take cores: the C pool's workers must not collapse the step")
    t.notes.append(_genai_note())
    t.notes.append("genai layout (zoo.genai_decoder_proto): SkipSimplifiedLayerNormalization, packed qkv, "
                   "GroupQueryAttention with rotary caches, SiLU, the attention-mask subgraph; 9/3 heads of 64, "
                   "intermediate 1536, vocab 49152")
    t.notes.append("ours with session.pre_allocate_execution_buffers=1 (a planned, pre-allocated step, as the genai "
                   "generator's static buffers); ratio = ours tokens/s / peer tokens/s (issue 26 targets: decode >= 1.0, "
                   "prefill >= 0.9)")
    t.notes.append(f"onnxruntime {ort.__version__}; int4 weights packed by its quantize_matmul_4bits (block 32, "
                   "zero points), accuracy_level 4; thread rows on a shared machine are noisy")
    sec.tables.append(t)
    if filters is not None:
        t.notes.append(f"{ROWS_ENV}={os.environ[ROWS_ENV]!r}: only these rows (no oversubscribed row, no generator table)")
    elif importlib.util.find_spec("onnxruntime_genai") is not None:
        sec.tables.append(_genai_table(sec, quick))
    return sec


def _genai_table(sec: Section, quick: bool) -> Table:
    """Ours / onnxruntime-genai's generator / onnxruntime's session, the same generation (`_genai_peer`)."""
    from _genai_peer import GenaiPeer, loop_times, ours_generation_session

    steps = 8 if quick else GENAI_STEPS
    t = Table(f"thin decoder generation vs onnxruntime-genai: prefill 128, {steps} greedy steps (past 128 ..), tokens/s",
              ["case", "threads", "phase", "ours tok/s", "genai tok/s", "ort tok/s", "ours/genai", "ours/ort",
               "same tokens"])
    cfg = THIN
    prompt = np.random.default_rng(0).integers(3, cfg.vocab, 128)
    for label, level in KINDS:
        proto = zoo.genai_decoder_proto(cfg)
        model = (proto if level is None else quantize_int4(proto, 32, level)).SerializeToString()
        for threads in (1, 2):
            ours = ours_generation_session(model, threads, prompt.size, steps)
            theirs = ort_session(model, threads)
            ort_names = [o.name for o in theirs.get_outputs()]
            rounds: dict[str, list[tuple[float, float, list[int]]]] = {"ours": [], "genai": [], "ort": []}
            with GenaiPeer(model, cfg, threads, prompt, steps) as genai:
                for _ in range(2 if quick else 4):  # the first round warms up each side and is dropped
                    rounds["genai"].append(genai.generation())
                    rounds["ours"].append(loop_times(lambda f, s=ours: s.run(None, f), ours.output_names, cfg, prompt,
                                                     steps))
                    rounds["ort"].append(loop_times(lambda f, s=theirs: s.run(None, f), ort_names, cfg, prompt, steps))
            same = rounds["ours"][-1][2] == rounds["genai"][-1][2]
            for k, phase in enumerate(("prefill", "decode")):
                n = prompt.size if phase == "prefill" else 1
                tok = {side: n / median([r[k] for r in rs[1:]]) for side, rs in rounds.items()}
                t.add(f"thin {label}", threads, phase, f"{tok['ours']:.1f}", f"{tok['genai']:.1f}", f"{tok['ort']:.1f}",
                      fmt_ratio(tok["ours"] / tok["genai"], 2), fmt_ratio(tok["ours"] / tok["ort"], 2),
                      "yes" if same else "no")
                sec.records.append({"case": f"thin {label} generation {phase}", "threads": threads, "phase": phase,
                                    "ours_tok_s": tok["ours"], "genai_tok_s": tok["genai"], "ort_tok_s": tok["ort"],
                                    "ratio": tok["ours"] / tok["genai"], "peer": "onnxruntime-genai",
                                    "same_tokens": same})
            del ours, theirs
    t.notes.append("genai: og.Generator on the same model in a builder-layout folder (genai_config.json: intra-op "
                   "threads as the row, past_present_share_buffer off so that its past grows as ours does, greedy); "
                   "decode tok/s = 1 / the median step (model run + greedy pick); prefill = append_tokens")
    t.notes.append("ours: planned once for the largest step (generation_max_shapes), pre-allocated; ort: its "
                   "InferenceSession in the same loop. Same tokens: ours and genai picked the same greedy tokens "
                   "(int4 acc4 rounds differently: random weights leave near ties)")
    import onnxruntime_genai as og

    t.notes.append(f"onnxruntime-genai {og.__version__}, onnxruntime {ort.__version__}; medians of the rounds after "
                   "the first; a shared machine: read the ratios")
    return t
