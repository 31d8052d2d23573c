"""LLM decoders at realistic width, fp32 and int4 weights: this project's CPU EP (C kernels) against
onnxruntime's CPU provider, same model, same inputs, same process, the same intra-op thread count on both
sides (1 thread, and all physical cores).

Models: `ort_graph.zoo` Llama-style decoders (2 layers; hidden 2048, or 1024 with --quick), every MatMul
weight packed to 4 bits with block 32 and zero points by onnxruntime's own packing routine (`_int4`), at
accuracy_level 0 (fp32 compute) and 4 (int8 activations), and the same decoder in fp32. Phases: prefill of 128 tokens, and one decode
step with 512 past tokens. Ratios are ours / onnxruntime (median wall time per run, interleaved rounds).

Genai rows: the same sizes laid out as onnxruntime-genai's builder exports for CPU (`zoo.genai_decoder_proto`:
SkipSimplifiedLayerNormalization, packed qkv, com.microsoft GroupQueryAttention with rotary caches, SiLU,
the attention-mask subgraph), its MatMuls packed to int4 the same way at accuracy_level 4 (what the builder's
CPU int4 exports carry), and at accuracy_level 0 for the decode step (prefill at level 0 is the slow
fp32-activation path, left to the zoo rows above).
"""

from __future__ import annotations

import warnings
from typing import Any

import attrs
import numpy as np
import onnxruntime as ort
from _int4 import quantize_int4
from _table import Section, Table, fmt_ratio, fmt_seconds, interleaved_times, median

from ort_cpu_ep import c_kernels, physical_cores
from ort_graph import zoo
from ort_session import InferenceSession

PHASES = (("prefill 128", 128, 0), ("decode p512", 1, 512))
FP32_PHASES = (("prefill 512", 512, 0),)  # issue 19's host target: hidden-2048 fp32 prefill 512 within 1.1x


def _config(hidden: int) -> zoo.DecoderConfig:
    return zoo.DecoderConfig(layers=2, hidden=hidden, heads=hidden // 64, kv_heads=max(1, hidden // 512),
                             vocab=4096, intermediate=hidden * 3)


PRE_ALLOCATE = "session.pre_allocate_execution_buffers"


def ours_session(model: bytes, threads: int, pre_allocate: bool = False) -> Any:
    options: dict[str, Any] = {"intra_op_num_threads": threads}
    if pre_allocate:
        options[PRE_ALLOCATE] = "1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, options, providers=["CPUExecutionProvider"])


def ort_session(model: bytes, threads: int) -> Any:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _sessions(model: bytes, threads: int, pre_allocate: bool = False) -> tuple[Any, Any]:
    return ours_session(model, threads, pre_allocate), ort_session(model, threads)


def _measure(case: str, model: bytes, feeds: dict[str, np.ndarray], repeats: int,
             pre_allocate: bool = False) -> list[dict[str, Any]]:
    """One model at 1 thread and at all physical cores: ours and onnxruntime, interleaved."""
    out = []
    for threads in sorted({1, physical_cores()}):
        ours, theirs = _sessions(model, threads, pre_allocate)
        decode = repeats >= 10  # runs of a few ms: settle longer, time in blocks (see interleaved_times)
        samples = interleaved_times({"ours": lambda s=ours, f=feeds: s.run(None, f),
                                     "ort": lambda s=theirs, f=feeds: s.run(None, f)}, repeats,
                                    settle=3 if decode else 1, block=5 if decode else 1, pause=0.05 if decode else 0.0)
        got, ref = ours.run(None, feeds)[0], theirs.run(None, feeds)[0]
        out.append({"case": case, "threads": threads, "ours": median(samples["ours"]), "ort": median(samples["ort"]),
                    "max_rel_diff": float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))})
    return out


def _repeats(quick: bool, seq: int, prefill: int = 7) -> int:
    return (3 if quick else prefill) if seq > 1 else (10 if quick else 30)


def _cases(quick: bool) -> list[dict[str, Any]]:
    hidden = 1024 if quick else 2048
    cfg = _config(hidden)
    out = []
    for level in (None, 0, 4):
        for phase, seq, past in PHASES + (FP32_PHASES if level is None and not quick else ()):
            static = attrs.evolve(cfg, batch=1, sequence=seq, past_sequence=past)
            proto = zoo.decoder_proto(static)
            model = (proto if level is None else quantize_int4(proto, 32, level)).SerializeToString()
            kind = "fp32" if level is None else f"int4 acc{level}"
            out += _measure(f"h{hidden} {kind} {phase}", model, zoo.decoder_inputs(static, 1, seq, past),
                            _repeats(quick, seq))
            if level is None and seq == FP32_PHASES[0][1]:  # the buffers held between runs, as ORT's arena holds
                out += _measure(f"h{hidden} {kind} {phase} pre-allocated", model,
                                zoo.decoder_inputs(static, 1, seq, past), _repeats(quick, seq), pre_allocate=True)
    return out


GENAI_CASES = ((4, PHASES[0]), (4, PHASES[1]), (0, PHASES[1]))  # (accuracy_level, phase)


def _genai_cases(quick: bool) -> list[dict[str, Any]]:
    hidden = 1024 if quick else 2048
    cfg = attrs.evolve(_config(hidden), max_positions=1024)
    out = []
    for level, (phase, seq, past) in GENAI_CASES:
        static = attrs.evolve(cfg, batch=1, sequence=seq, past_sequence=past)
        model = quantize_int4(zoo.genai_decoder_proto(static), 32, level).SerializeToString()
        out += _measure(f"h{hidden} genai int4 acc{level} {phase}", model,
                        zoo.genai_decoder_inputs(static, 1, seq, past), _repeats(quick, seq, prefill=3))
    return out


def run(quick: bool = False) -> Section:
    sec = Section("llm")
    t = Table("fp32 and int4 decoders vs onnxruntime CPU EP, same threads (median wall time per run)",
              ["case", "threads", "ours", "onnxruntime", "ours/ORT", "max rel diff"])
    for r in _cases(quick) + _genai_cases(quick):
        t.add(r["case"], r["threads"], fmt_seconds(r["ours"]), fmt_seconds(r["ort"]), fmt_ratio(r["ours"] / r["ort"], 2),
              f"{r['max_rel_diff']:.1e}")
        sec.records.append(r)
    st = c_kernels.status()
    t.notes.append("MatMulNBits, MatMul, FusedMatMul, Softmax, GroupQueryAttention, (Skip)SimplifiedLayerNormalization, "
                   "QuickGelu, float32 Add/Sub/Mul/Div/Neg, Reshape/Transpose/Slice/Concat/Gather and kin on our side: "
                   + ("the C kernels, each step one call into C (the session's C step runner)" if st.loaded
                      else f"the numpy kernels ({st.reason})"))
    t.notes.append("genai rows: the onnxruntime-genai builder's CPU layout (zoo.genai_decoder_proto), 2 layers")
    t.notes.append(f"pre-allocated: ours with {PRE_ALLOCATE}=1 (buffers made once, every run on the static plan); "
                   "by default a run takes the host buffer the last run left (enable_cpu_mem_arena, as onnxruntime's "
                   "arena keeps its memory)")
    t.notes.append("targets (issue 15): int4 decode within 1.5x of onnxruntime, int4 prefill within 2x, fp32 within 1.2x; "
                   "(issue 19) fp32 prefill 512 within 1.1x")
    t.notes.append(f"onnxruntime {ort.__version__}; weights packed by its quantize_matmul_4bits (block 32, zero points)")
    sec.tables.append(t)
    return sec
