"""Conformance through the whole session, as users run models, measured next to onnxruntime and
`onnx.reference` in the same run, on the same cases, each with the case's own rtol/atol: every ONNX backend
node test case (and, with --light, the onnx package's `light` models) goes through
`ort_session.backend.prepare` (shape resolution, fusions, placement with honest claims, memory plan) and
`run`; the peers run the same case protos and data sets.

    python -m ort_session.conformance [--filter REGEX] [--light] [--runtimes ours,onnxruntime,onnx.reference]
                                      [--json out.json] [-q] [--providers P1,P2]

Per case and runtime: "declined" (refused when the session was made, with the reasons), "failed" (an
exception during a run), "wrong" (outputs outside the case's rtol/atol) or "pass". Prints one row per runtime.
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

from ort_cpu_ep.conformance import OUTCOMES, CaseResult, _to_value, compare, light_cases, node_cases, totals

from . import _progress
from ._conformance_peers import compare_at_case_tolerance, onnxruntime_runner, reference_runner

RUNTIMES = ("ours", "onnxruntime", "onnx.reference")


def _prepare_error(e: Exception) -> bool:
    """Errors that mean 'declined at initialization' (the session refused the model honestly)."""
    import ort_graph
    import ort_partition

    from ._errors import SessionError

    return isinstance(e, ort_partition.PlacementError | ort_graph.GraphError | SessionError)


def run_case(name: str, proto: onnx.ModelProto, data_sets: Sequence[tuple[list, list]], rtol: float,
             atol: float, providers: Sequence[str] | None = None, case_tolerance: bool = False) -> CaseResult:
    """One case through the session. `case_tolerance=True` compares bfloat16 outputs at the case's rtol too
    (otherwise they get one bfloat16 rounding step, 2**-6, as the CPU op library's own runner allows)."""
    from . import backend

    check = compare_at_case_tolerance if case_tolerance else compare

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
            msg = check(e_, g_, rtol, atol, f"data set {k} output {i}")
            if msg:
                return CaseResult(name, "wrong", msg, time.perf_counter() - t0)
    return CaseResult(name, "pass", "", time.perf_counter() - t0)


def run_all(pattern: str | None = None, light: bool = False, providers: Sequence[str] | None = None,
            case_tolerance: bool = False) -> list[CaseResult]:
    """Our results alone (the device conformance tests use this)."""
    return run_compared(pattern, light, providers, ("ours",), case_tolerance)["ours"][1]


def _cases(pattern: str | None, light: bool) -> list[tuple[str, list[tuple]]]:
    sections = [("node cases", [(c.name, c.model, c.data_sets, c.rtol, c.atol) for c in node_cases(pattern)])]
    if light:
        sections.append(("light models", list(light_cases(pattern))))
    return sections


def run_compared(pattern: str | None = None, light: bool = False, providers: Sequence[str] | None = None,
                 runtimes: Sequence[str] = RUNTIMES, case_tolerance: bool = True
                 ) -> dict[str, tuple[str, list[CaseResult]]]:
    """runtime key -> (label, per-case results), every runtime on the same cases in one pass (per-section
    progress through `_progress`). onnxruntime is left out when it is not installed."""
    runners = {}
    for key in runtimes:
        if key == "ours":
            label = "this project" + (f" ({','.join(providers)})" if providers else ", CPU EP")
            runners[key] = (label, lambda *case: run_case(*case, providers=providers, case_tolerance=case_tolerance))
        elif key == "onnxruntime":
            peer = onnxruntime_runner()
            if peer is not None:
                runners[key] = peer
            else:
                warnings.warn("onnxruntime is not installed: its row is left out (pip install onnxruntime)",
                              stacklevel=2)
        elif key == "onnx.reference":
            runners[key] = reference_runner()
        else:
            raise ValueError(f"unknown runtime {key!r}; choose from {', '.join(RUNTIMES)}")
    out: dict[str, tuple[str, list[CaseResult]]] = {k: (label, []) for k, (label, _) in runners.items()}
    progress = _progress.current()
    for section, cases in _cases(pattern, light):
        for i, case in enumerate(cases):
            with _progress.reporting(None):  # per section, not per session the cases make
                for key, (_label, runner) in runners.items():
                    out[key][1].append(runner(*case))
            if progress is not None:
                progress.step(f"conformance: {section}", i + 1, len(cases), "cases")
    return out


def table(results: dict[str, tuple[str, list[CaseResult]]], seconds: float | None = None) -> str:
    """One row per runtime: cases passed / declined when made / failed during a run / wrong result."""
    head = ("runtime (case rtol/atol)", "cases", *OUTCOMES)
    rows = [(label, *(str(v) for v in totals(rs).values())) for label, rs in results.values()]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if seconds is not None:
        lines.append(f"({seconds:.0f} s, every runtime on the same cases in the same run)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ort_session.conformance", description=__doc__.split("\n")[0])
    p.add_argument("--filter", help="regular expression selecting case names (re.search), e.g. 'attention'")
    p.add_argument("--light", action="store_true", help="also run the onnx `light` model set")
    p.add_argument("--runtimes", default=",".join(RUNTIMES),
                   help=f"comma-separated runtimes to measure (default {','.join(RUNTIMES)}), e.g. --runtimes ours")
    p.add_argument("--json", help="write per-case results and totals per runtime to this file, e.g. --json conf.json")
    p.add_argument("-q", "--quiet", action="store_true", help="print only our non-passing cases and the totals")
    p.add_argument("--providers", help="our providers in priority order (default: the CPU EP), "
                                       "e.g. --providers SimulatedGPUExecutionProvider,CPUExecutionProvider")
    args = p.parse_args(argv)
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    unknown = [r for r in runtimes if r not in RUNTIMES]
    if unknown:
        p.error(f"--runtimes {args.runtimes!r}: unknown {unknown!r}; choose from {', '.join(RUNTIMES)}")
    t0 = time.perf_counter()
    with _progress.reporting(_progress.Progress()):
        results = run_compared(args.filter, args.light, args.providers.split(",") if args.providers else None, runtimes)
    ours = results.get("ours", ("", []))[1]
    for r in ours:
        if not args.quiet or r.outcome != "pass":
            print(f"{r.outcome:9s} {r.name} {r.detail[:400]}")
    print(table(results, time.perf_counter() - t0))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {key: {"runtime": label, "totals": totals(rs), "cases": [attrs.asdict(r) for r in rs]}
             for key, (label, rs) in results.items()}, indent=1))
    t = totals(ours) if ours else {"failed": 0, "wrong": 0}
    return 1 if t["failed"] or t["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
