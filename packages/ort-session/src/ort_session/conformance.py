"""Conformance through the whole session, as users run models: every ONNX backend node test case
(and, with --light, the onnx package's `light` models) goes through `ort_session.backend.prepare`
(shape resolution, fusions, placement with honest claims, memory plan) and `run`.

    python -m ort_session.conformance [--filter REGEX] [--light] [--json out.json] [-q]

Per case: "declined" (the session refused at initialization, with the reasons), "failed" (an
exception during a run), "wrong" (outputs outside the case's rtol/atol) or "pass".
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import traceback
import warnings
from collections.abc import Sequence

import attrs
import numpy as np
import onnx

from ort_cpu_ep.conformance import CaseResult, _to_value, compare, light_cases, node_cases, totals


def _prepare_error(e: Exception) -> bool:
    """Errors that mean 'declined at initialization' (the session refused the model honestly)."""
    import ort_graph
    import ort_partition

    from ._errors import SessionError

    return isinstance(e, ort_partition.PlacementError | ort_graph.GraphError | SessionError)


def run_case(name: str, proto: onnx.ModelProto, data_sets: Sequence[tuple[list, list]], rtol: float,
             atol: float, providers: Sequence[str] | None = None) -> CaseResult:
    from . import backend

    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = backend.prepare(proto, providers=list(providers)) if providers else backend.prepare(proto)
    except Exception as e:  # noqa: BLE001
        outcome = "declined" if _prepare_error(e) else "failed"
        return CaseResult(name, outcome, f"{type(e).__name__}: {e}", time.perf_counter() - t0)
    init = {t.name for t in proto.graph.initializer}
    input_names = [i.name for i in proto.graph.input if i.name not in init]
    for k, (inputs, expected) in enumerate(data_sets):
        feeds = {n: _to_value(v) for n, v in zip(input_names, inputs)}
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                got = rep.run(feeds)
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)[-1]
            return CaseResult(name, "failed", f"{type(e).__name__}: {e} [{tb.filename.rsplit('/', 1)[-1]}:{tb.lineno}]",
                              time.perf_counter() - t0)
        for i, (e_, g_) in enumerate(zip([_to_value(x) for x in expected], got)):
            msg = compare(e_, g_, rtol, atol, f"data set {k} output {i}")
            if msg:
                return CaseResult(name, "wrong", msg, time.perf_counter() - t0)
    return CaseResult(name, "pass", "", time.perf_counter() - t0)


def run_all(pattern: str | None = None, light: bool = False, providers: Sequence[str] | None = None) -> list[CaseResult]:
    results = [run_case(c.name, c.model, c.data_sets, c.rtol, c.atol, providers) for c in node_cases(pattern)]
    if light:
        results += [run_case(*case, providers=providers) for case in light_cases(pattern)]
    return results


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ort_session.conformance", description=__doc__.split("\n")[0])
    p.add_argument("--filter", help="regular expression selecting case names (re.search)")
    p.add_argument("--light", action="store_true", help="also run the onnx `light` model set")
    p.add_argument("--json", help="write per-case results and totals to this file")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the non-passing cases and totals")
    p.add_argument("--providers", help="comma-separated providers in priority order (default: the CPU EP)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    results = run_all(args.filter, args.light, args.providers.split(",") if args.providers else None)
    for r in results:
        if not args.quiet or r.outcome != "pass":
            print(f"{r.outcome:9s} {r.name} {r.detail[:400]}")
    t = totals(results)
    print("totals: " + "  ".join(f"{k}={v}" for k, v in t.items()) + f"  ({time.perf_counter() - t0:.0f} s)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"totals": t, "cases": [attrs.asdict(r) for r in results]}, indent=1))
    return 1 if t["failed"] or t["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
