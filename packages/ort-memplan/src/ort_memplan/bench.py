"""Benchmark: peak / lower bound per algorithm, and planning time, on random sets and real graphs.

`run()` returns one row (a dict) per case and algorithm; `main()` prints them as a table
(`python -m ort_memplan.bench`). Times are measured and printed, never asserted.

Cases: random interval sets (`random_requests`: `n` requests over `n` steps, first step uniform,
lifetimes geometric with mean 10 steps plus 1% long-lived ones up to n/20 steps, sizes log-uniform
in 64 B..16 MiB); the zoo decoders (static shapes); the `light` CNN models the onnx package ships;
and any model files passed in `models` (symbolic dimensions fixed by `dims`, those a model lacks
ignored). Graph cases plan activations with in-place reuse and also report the bound without it.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ._planners import ALGORITHMS, plan
from ._types import AllocationRequest
from ._validate import validate

Row = dict[str, Any]

DEFAULT_DIMS = {"batch_size": 1, "batch": 1, "sequence_length": 64, "sequence": 64, "seq": 64,
                "past_sequence_length": 0, "past_sequence": 0, "past_seq": 0,
                "total_sequence_length": 64, "total_seq": 64, "kv_cache_dim": 16}


def random_requests(n: int, seed: int = 0) -> list[AllocationRequest]:
    """A random interval set of `n` requests (see the module docstring for the distribution)."""
    rng = np.random.default_rng(seed)
    first = rng.integers(0, max(n, 1), n)
    length = rng.geometric(0.1, n)
    long_lived = rng.random(n) < 0.01
    length[long_lived] = rng.integers(1, n // 20 + 2, int(long_lived.sum()))
    size = np.exp(rng.uniform(np.log(64), np.log(16 << 20), n)).astype(np.int64)
    return [AllocationRequest(i, int(s), int(f), int(f + ln - 1))
            for i, (s, f, ln) in enumerate(zip(size.tolist(), first.tolist(), length.tolist(), strict=True))]


def _rows(case: str, kind: str, requests: Sequence[AllocationRequest], algorithms: Iterable[str],
          extra: Mapping[str, Any] | None = None, check: bool = True) -> list[Row]:
    rows: list[Row] = []
    for alg in algorithms:
        t0 = time.perf_counter()
        p = plan(requests, alg)
        seconds = time.perf_counter() - t0
        if check:
            validate(p, requests)
        bound = sum(p.lower_bound.values())
        rows.append({"case": case, "kind": kind, "requests": len(requests), "algorithm": alg,
                     "chosen": p.algorithm, "peak": p.total_peak, "lower_bound": bound,
                     "ratio": p.total_peak / bound if bound else 1.0, "seconds": seconds, **(extra or {})})
    return rows


def _graph_rows(case: str, kind: str, model: Any, algorithms: Sequence[str]) -> list[Row]:
    from ort_graph import topological_order

    from ._graph import activation_lifetimes

    g = model.graph
    acts = activation_lifetimes(g, topological_order(g), lambda n: "cpu")
    without = sum(acts.lower_bound_without_inplace.values())
    return _rows(case, kind, acts.requests, algorithms,
                 {"lower_bound_without_inplace": without, "unknown_sizes": len(acts.unknown_sizes)})


def _symbolic(model: Any) -> set[str]:
    out: set[str] = set()
    for name in model.graph.inputs:
        v = model.graph.values.get(name)
        for d in (v.shape or ()) if v is not None else ():
            if isinstance(d, str):
                out.add(d)
    return out


def run(sizes: Sequence[int] = (1_000, 10_000, 100_000), algorithms: Sequence[str] = ALGORITHMS, *,
        seed: int = 0, zoo: bool = True, light_models: bool = True,
        models: Mapping[str, str | os.PathLike[str]] | None = None,
        dims: Mapping[str, int] | None = None, check: bool = True) -> list[Row]:
    """Rows of {case, kind, requests, algorithm, chosen, peak, lower_bound, ratio, seconds, ...}."""
    rows: list[Row] = []
    for n in sizes:
        rows += _rows(f"random-{n}", "random", random_requests(n, seed), algorithms, check=check)
    if zoo or light_models or models:
        import ort_graph
    if zoo:
        from ort_graph import zoo as z

        configs = {"decoder-l2-s64": z.DecoderConfig(batch=1, sequence=64, past_sequence=0),
                   "decoder-l4-s128-layernorm": z.DecoderConfig(layers=4, batch=1, sequence=128, past_sequence=0,
                                                                norm="layernorm", bias=True)}
        for name, cfg in configs.items():
            m = z.decoder(cfg)
            ort_graph.resolve_shapes(m)
            rows += _graph_rows(name, "zoo", m, algorithms)
    if light_models:
        import onnx

        light = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
        for path in sorted(light.glob("light_*.onnx")) if light.is_dir() else []:
            m = ort_graph.load(path)
            ort_graph.resolve_shapes(m)
            rows += _graph_rows(path.stem, "light", m, algorithms)
    all_dims = {**DEFAULT_DIMS, **(dims or {})}
    for name, path in (models or {}).items():
        m = ort_graph.load(path)
        wanted = _symbolic(m)
        ort_graph.resolve_shapes(m, dims={k: v for k, v in all_dims.items() if k in wanted})
        rows += _graph_rows(name, "model", m, algorithms)
    return rows


def format_table(rows: Sequence[Row]) -> str:
    head = f"{'case':34} {'n':>7} {'algorithm':18} {'peak/LB':>8} {'LB no-inpl/LB':>13} {'seconds':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        wo = r.get("lower_bound_without_inplace")
        wo_s = f"{wo / r['lower_bound']:.3f}" if wo and r["lower_bound"] else ""
        lines.append(f"{r['case'][:34]:34} {r['requests']:>7} {r['algorithm']:18} {r['ratio']:>8.4f} "
                     f"{wo_s:>13} {r['seconds']:>8.3f}")
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> dict[str, float]:
    """Worst peak / lower bound per algorithm over all cases."""
    out: dict[str, float] = {}
    for r in rows:
        out[r["algorithm"]] = max(out.get(r["algorithm"], 0.0), r["ratio"])
    return out


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ort_memplan.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    ap.add_argument("--algorithms", nargs="*", default=list(ALGORITHMS))
    ap.add_argument("--no-zoo", action="store_true")
    ap.add_argument("--no-light", action="store_true")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH")
    args = ap.parse_args(argv)
    models = dict(m.split("=", 1) for m in args.model)
    rows = run(args.sizes, args.algorithms, zoo=not args.no_zoo, light_models=not args.no_light, models=models)
    print(format_table(rows))
    print("worst peak/LB per algorithm:", {k: round(v, 4) for k, v in summary(rows).items()})


if __name__ == "__main__":
    main()
