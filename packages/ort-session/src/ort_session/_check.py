"""`ortrun run --check`: each output against onnxruntime's, at a tolerance that says where it comes from.

A float output computed without quantized activations differs from onnxruntime's only by float summation
order: it is judged at an absolute tolerance (`FLOAT_TOLERANCE`, 1e-3). An output downstream of an op that
rounds activations to an integer grid at run time (MatMulNBits at accuracy_level 4, DynamicQuantizeLinear,
QuantizeLinear, DynamicQuantizeMatMul, ...) is different in kind: two correct runtimes whose float results
differ by an ulp can round one value to neighbouring integers, and that one step moves the outputs by a
fraction of their range. Such an output is judged at the float tolerance plus one int8 step of its own range,
max |onnxruntime| / 127 (one step of a symmetric int8 grid over the output's largest value). A model whose
quantization is wrong (a zero point ignored, the wrong block layout) is off by a large part of its range and
still fails. Integer outputs (ids, shapes, masks) must be equal unless they are downstream of quantization too.
A `--tolerance` given on the command line replaces all of this for every output.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

import ort_graph

__all__ = ["FLOAT_TOLERANCE", "OutputTolerance", "quantizing_ancestors", "output_tolerance", "judge_outputs"]

FLOAT_TOLERANCE = 1e-3
INT8_STEPS = 127  # a symmetric int8 grid: max |x| is 127 steps

# ops whose outputs hold activations rounded to an integer grid computed at run time (or read such values)
_ROUNDING_OPS = frozenset({
    ("", "QuantizeLinear"), ("", "DynamicQuantizeLinear"), ("", "QLinearMatMul"), ("", "QLinearConv"),
    ("com.microsoft", "DynamicQuantizeMatMul"), ("com.microsoft", "DynamicQuantizeLSTM"),
    ("com.microsoft", "QLinearAdd"), ("com.microsoft", "QLinearMul"), ("com.microsoft", "QLinearSigmoid"),
    ("com.microsoft", "QLinearLeakyRelu"), ("com.microsoft", "QLinearAveragePool"),
    ("com.microsoft", "QLinearGlobalAveragePool"), ("com.microsoft", "QLinearConcat"), ("com.microsoft", "QGemm"),
    ("com.microsoft", "QuantizeLinear"), ("com.microsoft", "DynamicQuantizeLinear"),
})


@attrs.frozen
class OutputTolerance:
    """The largest |ours - onnxruntime| accepted for one output, and why in words."""

    value: float
    reason: str


def _rounds_activations(node: ort_graph.Node) -> str | None:
    """A short description when `node` rounds activations to integers at run time, else None."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    if domain == "com.microsoft" and node.op_type == "MatMulNBits":
        level = int(node.attr("accuracy_level", 0) or 0)
        # onnxruntime quantizes A only at accuracy_level 4 with integer (or absent) zero points
        zp = node.inputs[3] if len(node.inputs) > 3 else ""
        g = node.graph
        zp_float = bool(zp) and g is not None and zp in g.values and g.values[zp].dtype == 1
        if level == 4 and not zp_float:
            return f"MatMulNBits accuracy_level=4: int8 activations per block of {node.attr('block_size', '?')}"
        return None
    if (domain, node.op_type) in _ROUNDING_OPS:
        return f"{node.qualified_op}: activations rounded to an integer grid"
    return None


def quantizing_ancestors(graph: ort_graph.Graph, outputs: Sequence[str]) -> dict[str, tuple[str, str] | None]:
    """For each output name, the first node found upstream that rounds activations (its label and why), or None.
    Control-flow bodies count through the node that holds them."""
    def rounds(node: ort_graph.Node) -> str | None:
        why = _rounds_activations(node)
        if why is None:
            for sub in node.subgraphs:
                for inner in sub.walk():
                    why = _rounds_activations(inner)
                    if why is not None:
                        return f"{why} (inside {node.label})"
        return why

    found: dict[str, tuple[str, str] | None] = {}
    memo: dict[int, tuple[str, str] | None] = {}
    for out in outputs:
        stack, seen, hit = [out], set(), None
        while stack and hit is None:
            name = stack.pop()
            if name in seen or not name:
                continue
            seen.add(name)
            value = graph.values.get(name)
            node = value.producer if value is not None else None
            if node is None:
                continue
            key = id(node)
            if key not in memo:
                why = rounds(node)
                memo[key] = (node.label, why) if why is not None else None
            hit = memo[key]
            stack.extend(node.inputs)
            stack.extend(node.implicit_inputs())
        found[out] = hit
    return found


def output_tolerance(ref: np.ndarray, source: tuple[str, str] | None, explicit: float | None) -> OutputTolerance:
    """The tolerance for one output given onnxruntime's value and its quantizing ancestor (or None)."""
    if explicit is not None:
        return OutputTolerance(explicit, "--tolerance")
    integer = ref.dtype.kind in "iub"
    if source is None:
        if integer:
            return OutputTolerance(0.0, "integer output: must be equal")
        return OutputTolerance(FLOAT_TOLERANCE, "float arithmetic only: summation order")
    peak = float(np.max(np.abs(ref.astype(np.float64)))) if ref.size else 0.0
    base = 0.0 if integer else FLOAT_TOLERANCE
    node, why = source
    value = base + peak / INT8_STEPS
    return OutputTolerance(value, f"{'' if integer else f'{base:g} + '}max |onnxruntime| {peak:.3g} / {INT8_STEPS}: "
                                  f"one int8 step, downstream of {node} ({why})")


def _worst_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b|, with equal values (infinities included) and NaN against NaN counted as no difference."""
    if not a.size:
        return 0.0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(a64 - b64)
    d[(a64 == b64) | (np.isnan(a64) & np.isnan(b64))] = 0.0
    return float(np.max(d))  # NaN where only one side is NaN: never within a tolerance


def judge_outputs(names: Sequence[str], ours: Sequence[np.ndarray], refs: Sequence[np.ndarray],
                  graph: ort_graph.Graph, explicit: float | None, emit) -> bool:
    """Print one line per output (difference, tolerance, why) and return whether every output passed."""
    sources = quantizing_ancestors(graph, names) if explicit is None else dict.fromkeys(names)
    ok = True
    for name, a, b in zip(names, ours, refs):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            emit(f"  check {name:<24} FAILED: shape {list(a.shape)}, onnxruntime's {list(b.shape)}")
            ok = False
            continue
        diff = _worst_difference(a, b)
        tol = output_tolerance(b, sources.get(name), explicit)
        passed = diff <= tol.value  # a NaN difference never passes
        ok = ok and passed
        emit(f"  check {name:<24} max |ours - onnxruntime| = {diff:.3g} {'<=' if passed else '>'} tolerance "
             f"{tol.value:.3g} ({tol.reason})")
    return ok
