"""One LLM case with each runtime alone in its own process (no threads of the other runtime spinning beside it),
processes alternating: `python benchmarks/llm_alone.py [--threads N] [--rounds R] CASE` with CASE one of
genai-acc4-decode, genai-acc0-decode, fp32-decode, fp32-prefill128 (hidden 2048, 2 layers, as in bench_llm).
Prints each runtime's median step time per round and the ratio of the medians over the rounds."""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import time

import attrs

HERE = pathlib.Path(__file__).resolve().parent
CASES = {"genai-acc4-decode": ("genai", 4, 1, 512), "genai-acc0-decode": ("genai", 0, 1, 512),
         "fp32-decode": ("zoo", None, 1, 512), "fp32-prefill128": ("zoo", None, 128, 0)}


def _worker(case: str, threads: int, who: str) -> None:
    sys.path.insert(0, str(HERE))
    from _int4 import quantize_int4
    from bench_llm import _config, ort_session, ours_session

    from ort_graph import zoo

    layout, level, seq, past = CASES[case]
    cfg = attrs.evolve(_config(2048), max_positions=1024) if layout == "genai" else _config(2048)  # as bench_llm
    static = attrs.evolve(cfg, batch=1, sequence=seq, past_sequence=past)
    proto = zoo.genai_decoder_proto(static) if layout == "genai" else zoo.decoder_proto(static)
    model = (proto if level is None else quantize_int4(proto, 32, level)).SerializeToString()
    feeds = (zoo.genai_decoder_inputs if layout == "genai" else zoo.decoder_inputs)(static, 1, seq, past)
    # one runtime's session in this process (both packages are imported; only this one has threads and buffers)
    session = ours_session(model, threads) if who == "ours" else ort_session(model, threads)
    runs = 60 if seq == 1 else 8
    for _ in range(max(3, runs // 6)):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    print(statistics.median(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worker", choices=("ours", "ort"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        _worker(a.case, a.threads, a.worker)
        return
    medians: dict[str, list[float]] = {"ours": [], "ort": []}
    for _ in range(a.rounds):
        for who in medians:
            out = subprocess.run([sys.executable, __file__, a.case, "--threads", str(a.threads), "--worker", who],
                                 capture_output=True, text=True, check=True)
            medians[who].append(float(out.stdout.strip().splitlines()[-1]))
    for who, ms in medians.items():
        print(f"{who:5s} " + "  ".join(f"{m * 1e3:.2f} ms" for m in ms))
    print(f"{a.case}, {a.threads} threads, each runtime alone: ours/onnxruntime "
          f"{statistics.median(medians['ours']) / statistics.median(medians['ort']):.2f}")


if __name__ == "__main__":
    main()
