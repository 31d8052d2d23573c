"""The peers the conformance runner measures in the same run, on the same cases, with each case's own
rtol/atol: onnxruntime's CPU provider and `onnx.reference`. A peer that refuses a model when the session is
made counts as "declined", an exception during a run as "failed", outputs outside the tolerance as "wrong"."""

from __future__ import annotations

import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from ort_cpu_ep.conformance import CaseResult, _to_value, compare

Runner = Callable[[str, onnx.ModelProto, Sequence[tuple[list, list]], float, float], CaseResult]


def _bf16(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype.name == "bfloat16"


def compare_at_case_tolerance(expected: Any, got: Any, rtol: float, atol: float, where: str = "output") -> str | None:
    """`compare` with the case's rtol/atol for every dtype: bfloat16 values are compared as float32 without
    the one-rounding-step allowance `compare` gives them (what the ONNX backend runner does)."""
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        for i, (e, g) in enumerate(zip(expected, got)):
            msg = compare_at_case_tolerance(e, g, rtol, atol, f"{where}[{i}]")
            if msg:
                return msg
        return None
    if _bf16(expected):
        if not _bf16(got):
            return f"{where}: dtype {getattr(got, 'dtype', type(got).__name__)} != expected bfloat16"
        return compare(expected.astype(np.float32), got.astype(np.float32), rtol, atol, where)
    return compare(expected, got, rtol, atol, where)


def _feeds(proto: onnx.ModelProto, inputs: list) -> dict[str, Any]:
    init = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in init]
    return {n: _to_value(v) for n, v in zip(names, inputs)}


def _run_peer(name: str, make: Callable[[], Any], run: Callable[[Any, dict], list], proto: onnx.ModelProto,
              data_sets: Sequence[tuple[list, list]], rtol: float, atol: float) -> CaseResult:
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = make()
    except Exception as e:  # noqa: BLE001 - a peer's refusal at session creation, whatever its type
        return CaseResult(name, "declined", f"{type(e).__name__}: {str(e)[:300]}", time.perf_counter() - t0)
    for k, (inputs, expected) in enumerate(data_sets):
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                got = run(session, _feeds(proto, inputs))
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)[-1]
            return CaseResult(name, "failed", f"{type(e).__name__}: {str(e)[:300]} [{tb.filename.rsplit('/', 1)[-1]}:"
                              f"{tb.lineno}]", time.perf_counter() - t0)
        for i, (e_, g_) in enumerate(zip([_to_value(x) for x in expected], got)):
            msg = compare_at_case_tolerance(e_, _to_value(g_), rtol, atol, f"data set {k} output {i}")
            if msg:
                return CaseResult(name, "wrong", msg, time.perf_counter() - t0)
    return CaseResult(name, "pass", "", time.perf_counter() - t0)


def onnxruntime_runner() -> tuple[str, Runner] | None:
    """onnxruntime's CPU provider, or None when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    ort.set_default_logger_severity(4)

    def run_case(name: str, proto: onnx.ModelProto, data_sets: Sequence[tuple[list, list]], rtol: float,
                 atol: float) -> CaseResult:
        return _run_peer(name, lambda: ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]),
                         lambda s, feeds: s.run(None, feeds), proto, data_sets, rtol, atol)

    return f"onnxruntime {ort.__version__}", run_case


def reference_runner() -> tuple[str, Runner]:
    """`onnx.reference.ReferenceEvaluator` of the installed onnx package."""
    from onnx.reference import ReferenceEvaluator

    def run_case(name: str, proto: onnx.ModelProto, data_sets: Sequence[tuple[list, list]], rtol: float,
                 atol: float) -> CaseResult:
        return _run_peer(name, lambda: ReferenceEvaluator(proto), lambda s, feeds: s.run(None, feeds), proto,
                         data_sets, rtol, atol)

    return f"onnx.reference {onnx.__version__}", run_case
