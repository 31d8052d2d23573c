"""Conformance of the CPU op library against the ONNX backend node test cases.

    python -m ort_cpu_ep.conformance [--filter REGEX] [--json out.json] [--light] [--models] [-q]

Per case: load with `ort_graph.from_proto`, check every node (subgraphs included) with `find` +
`supports` ("declined" with the reasons), run with `run_graph` ("failed" on an exception), compare
the outputs with the case's rtol/atol ("wrong" or "pass").
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import re
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np
import onnx
from onnx import numpy_helper

import ort_graph
from ort_graph import Graph, Node

from .ops import load_all_ops
from .ops._interp import node_opset, run_graph
from .ops._registry import Decline, InputInfo, find

OUTCOMES = ("pass", "declined", "failed", "wrong")


@attrs.frozen
class CaseResult:
    name: str
    outcome: str  # one of OUTCOMES
    detail: str = ""
    seconds: float = 0.0


def input_infos(node: Node) -> list[InputInfo]:
    """What the graph knows about a node's inputs (looking through enclosing graphs)."""
    infos = []
    for name in node.inputs:
        if not name:
            infos.append(InputInfo(0, None, present=False))
            continue
        g: Graph | None = node.graph
        info = InputInfo(0, None)
        while g is not None:
            v = g.values.get(name)
            if v is not None and (name in g.inputs or name in g.initializers or v.producer is not None):
                info = InputInfo(v.dtype, v.shape)
                break
            g = g.parent_node.graph if g.parent_node is not None else None
        infos.append(info)
    return infos


def claim(model: ort_graph.Model) -> list[str]:
    """Decline reasons for every node of the model that the CPU op table will not take."""
    reasons = []
    for node in model.graph.walk():
        opset = node_opset(node, model.opset_imports)
        impl = find(node.op_type, node.domain, opset)
        if impl is None:
            reasons.append(f"{node.qualified_op}: no CPU kernel at opset {opset}")
            continue
        d: Decline | None = impl.supports(node, input_infos(node), opset)
        if d is not None:
            reasons.append(f"{node.qualified_op}: rejected {d.rejected}; accepts {d.accepts}")
    return reasons


def _to_value(x: Any) -> Any:
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, (onnx.SequenceProto, onnx.OptionalProto, onnx.MapProto)):
        return numpy_helper.to_python(x) if hasattr(numpy_helper, "to_python") else x
    if isinstance(x, list):
        return [_to_value(i) for i in x]
    if isinstance(x, np.generic):
        return np.asarray(x)
    return x


def compare(expected: Any, got: Any, rtol: float, atol: float, where: str = "output") -> str | None:
    """None when `got` matches `expected` as the ONNX backend runner would check it; else why not."""
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return f"{where}: expected a sequence of {len(expected)}, got {type(got).__name__}"
        for i, (e, g) in enumerate(zip(expected, got)):
            msg = compare(e, g, rtol, atol, f"{where}[{i}]")
            if msg:
                return msg
        return None
    if expected is None:
        return None if got is None else f"{where}: expected None (empty optional), got {type(got).__name__}"
    if not isinstance(got, np.ndarray):
        return f"{where}: expected an array, got {type(got).__name__}"
    if got.shape != expected.shape:
        return f"{where}: shape {got.shape} != expected {expected.shape}"
    if expected.dtype == object:
        return None if np.array_equal(got.astype(object), expected) else f"{where}: strings differ"
    if got.dtype != expected.dtype:
        return f"{where}: dtype {got.dtype} != expected {expected.dtype}"
    g, e = got, expected
    r = rtol
    if e.dtype.kind not in "biufc" or e.dtype.name == "bfloat16":
        if e.dtype.name == "bfloat16":
            r = max(rtol, 2**-6)
        g, e = g.astype(np.float32), e.astype(np.float32)
    if e.dtype.kind in "bui":
        return None if np.array_equal(g, e) else f"{where}: values differ ({_first_diff(g, e)})"
    with np.errstate(all="ignore"):
        ok = np.isclose(g, e, rtol=r, atol=atol, equal_nan=True)
    return None if ok.all() else f"{where}: values differ ({_first_diff(g, e, ok)})"


def _first_diff(g: np.ndarray, e: np.ndarray, ok: np.ndarray | None = None) -> str:
    bad = ~ok if ok is not None else g != e
    idx = tuple(int(i[0]) for i in np.nonzero(bad)) if bad.ndim else ()
    return f"{int(bad.sum())} of {bad.size} at {idx}: got {g[idx]!r} expected {e[idx]!r}"


def run_case(name: str, proto: onnx.ModelProto, data_sets: Sequence[tuple[list, list]], rtol: float,
             atol: float) -> CaseResult:
    t0 = time.perf_counter()
    try:
        try:
            proto = onnx.shape_inference.infer_shapes(proto)
        except Exception:  # noqa: BLE001 - shapes are only a help for claiming
            pass
        model = ort_graph.from_proto(proto)
        reasons = claim(model)
    except Exception as e:  # noqa: BLE001
        return CaseResult(name, "declined", f"model not loadable: {e!r}", time.perf_counter() - t0)
    if reasons:
        return CaseResult(name, "declined", "; ".join(reasons), time.perf_counter() - t0)
    init = {t.name for t in proto.graph.initializer}
    input_names = [i.name for i in proto.graph.input if i.name not in init]
    for k, (inputs, expected) in enumerate(data_sets):
        feeds = {n: _to_value(v) for n, v in zip(input_names, inputs)}
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                out = run_graph(model.graph, feeds, opsets=model.opset_imports)
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)[-1]
            return CaseResult(name, "failed", f"{type(e).__name__}: {e} [{tb.filename.rsplit('/', 1)[-1]}:{tb.lineno}]",
                              time.perf_counter() - t0)
        got = [out[o] for o in model.graph.outputs]
        exp = [_to_value(x) for x in expected]
        for i, (e_, g_) in enumerate(zip(exp, got)):
            msg = compare(e_, g_, rtol, atol, f"data set {k} output {i}")
            if msg:
                return CaseResult(name, "wrong", msg, time.perf_counter() - t0)
    return CaseResult(name, "pass", "", time.perf_counter() - t0)


@functools.cache
def _all_node_cases() -> tuple[Any, ...]:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return tuple(collect_testcases())


def node_cases(pattern: str | None = None) -> list[Any]:
    """The ONNX backend node test cases whose names match `pattern` (re.search); all when None."""
    rx = re.compile(pattern) if pattern else None
    return [c for c in _all_node_cases() if rx is None or rx.search(c.name)]


def light_cases(pattern: str | None = None) -> Iterable[tuple[str, onnx.ModelProto, list, float, float]]:
    """The `light` model set shipped with onnx (inputs as the ONNX runner makes them); empty if absent."""
    data = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    rx = re.compile(pattern) if pattern else None
    for path in sorted(data.glob("light_*.onnx")) if data.is_dir() else []:
        ref = path.with_name(path.stem + "_output_0.pb")
        name = "test_" + path.stem
        if not ref.exists() or (rx is not None and not rx.search(name)):
            continue
        proto = onnx.load(str(path))
        init = {t.name for t in proto.graph.initializer}
        inputs = []
        for x in proto.graph.input:
            if x.name in init:
                continue
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            inputs.append((np.arange(n).reshape(shape) / n).astype(np.float32))
        expected = [numpy_helper.to_array(onnx.load_tensor(str(ref)))]
        yield name, proto, [(inputs, expected)], 1e-3, 1e-7


MODEL_KINDS = ("simple", "pytorch-converted", "pytorch-operator")


def _load_pb(path: pathlib.Path, type_proto: onnx.TypeProto) -> Any:
    data = path.read_bytes()
    if type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return [numpy_helper.to_array(t) for t in seq.tensor_values]
    if type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_array(opt.tensor_value) if opt.HasField("tensor_value") else None
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def model_cases(pattern: str | None = None, kinds: Sequence[str] = MODEL_KINDS
                ) -> Iterable[tuple[str, onnx.ModelProto, list, float, float]]:
    """The onnx package's local model tests (`simple`, `pytorch-converted`, `pytorch-operator`) with
    their stored test data sets; kinds missing on disk are skipped."""
    from onnx.backend.test.loader import load_model_tests

    rx = re.compile(pattern) if pattern else None
    for kind in kinds:
        try:
            cases = load_model_tests(kind=kind)
        except ValueError:
            continue
        for c in cases:
            name = f"{c.name} [{kind}]"
            if c.model_dir is None or (rx is not None and not rx.search(name)):
                continue
            d = pathlib.Path(c.model_dir)
            proto = onnx.load(str(d / "model.onnx"))
            init = {t.name for t in proto.graph.initializer}
            ins = [i for i in proto.graph.input if i.name not in init]
            sets = []
            for ds in sorted(d.glob("test_data_set_*")):
                inputs = [_load_pb(ds / f"input_{k}.pb", vi.type) for k, vi in enumerate(ins)]
                outputs = [_load_pb(ds / f"output_{k}.pb", vi.type) for k, vi in enumerate(proto.graph.output)]
                sets.append((inputs, outputs))
            if sets:
                yield name, proto, sets, c.rtol, c.atol


def run_all(pattern: str | None = None, light: bool = False, verbose: bool = False,
            models: bool = False) -> list[CaseResult]:
    load_all_ops()
    results = []
    for c in node_cases(pattern):
        r = run_case(c.name, c.model, c.data_sets, c.rtol, c.atol)
        results.append(r)
        if verbose:
            print(f"{r.outcome:9s} {r.name} {r.detail[:300]}", flush=True)
    extra = list(light_cases(pattern)) if light else []
    if models:
        extra += list(model_cases(pattern))
    if extra:
        for name, proto, ds, rtol, atol in extra:
            r = run_case(name, proto, ds, rtol, atol)
            results.append(r)
            if verbose:
                print(f"{r.outcome:9s} {r.name} {r.detail[:300]} ({r.seconds:.1f}s)", flush=True)
    return results


def totals(results: Sequence[CaseResult]) -> dict[str, int]:
    c = Counter(r.outcome for r in results)
    return {"cases": len(results), **{k: c.get(k, 0) for k in OUTCOMES}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ort_cpu_ep.conformance", description=__doc__.split("\n")[0])
    p.add_argument("--filter", help="regular expression selecting case names (re.search)")
    p.add_argument("--json", help="write per-case results and totals to this file")
    p.add_argument("--light", action="store_true", help="also run the onnx `light` model set (slow)")
    p.add_argument("--models", action="store_true",
                   help="also run the onnx package's simple / pytorch-converted / pytorch-operator model tests")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the non-passing cases and totals")
    args = p.parse_args(argv)
    results = run_all(args.filter, args.light, verbose=False, models=args.models)
    for r in results:
        if not args.quiet or r.outcome != "pass":
            print(f"{r.outcome:9s} {r.name} {r.detail[:400]}")
    t = totals(results)
    print("totals: " + "  ".join(f"{k}={v}" for k, v in t.items()))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"totals": t, "cases": [attrs.asdict(r) for r in results]}, indent=1))
    return 1 if t["failed"] or t["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
