"""Structured mutations of the published models (`shared_models`, skipped where absent): attribute values, constant
values, initializer dims and types, rewired inputs, op types, dropped nodes. Each case initializes and runs, or fails
with a typed error of the project's hierarchy; a crash of the process (onnx's C++ shape inference aborted on such
models) fails the whole run. Where ours runs and onnxruntime accepts the model too, the outputs agree. The seeds
the two cases that found bugs in magika, written out (`FOUND`): a retyped Add input (ran where onnxruntime refuses:
now InputTypeError) and a Slice step of 2**31 - 1 that leaves a Conv too small for its kernel (aborted the process in
onnx's inference). (The third, a Conv over a scalar weight that crashed a fusion: ort-graph's
test_conv_epilogue_fusion.)"""

from __future__ import annotations

import copy
import random
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto, numpy_helper

from ort_session import InferenceSession

MODELS = {  # file -> (input, shape, dtype, value range), as benchmarks/bench_published.py feeds them
    "magika_standard_v3_3.onnx": ("bytes", [1, 2048], np.int32, (0, 257)),
    "ppocr_mobile_v2_cls.onnx": ("x", [1, 3, 48, 192], np.float32, (-1, 1)),
    "ppocrv4_rec.onnx": ("x", [1, 3, 48, 320], np.float32, (-1, 1)),
    "ppocrv4_det.onnx": ("x", [1, 3, 320, 320], np.float32, (-1, 1)),
}
_MAGIKA = "jax2tf_get_logits_/pjit_get_logits_/MagikaV2/"
FOUND = {  # name -> (file, the mutation of its initializer: name, new values or data type)
    "retyped add input": ("magika_standard_v3_3.onnx", _MAGIKA + "Dense_0/Reshape:0", 6),
    "slice step 2**31-1": ("magika_standard_v3_3.onnx", _MAGIKA + "Conv_0/strided_slice/stack_2:0", [1, 1, 2**31 - 1, 1]),
}
SEEDS = list(range(5000, 5024))
_CACHE: dict[str, onnx.ModelProto] = {}


def _feeds(file):
    name, shape, dtype, (lo, hi) = MODELS[file]
    rng = np.random.default_rng(0)
    x = rng.integers(lo, hi, shape) if np.issubdtype(dtype, np.integer) else rng.uniform(lo, hi, shape)
    return {name: x.astype(dtype)}


def _int_constants(g, nodes):
    found = [(m, a.t) for m in nodes if m.op_type == "Constant" for a in m.attribute
             if a.name == "value" and a.t.data_type in (6, 7)]
    return found + [(None, t) for t in g.initializer if t.data_type in (6, 7)]


def mutate(mp: onnx.ModelProto, rng: random.Random) -> str:
    """One random structural change of `mp` in place; what it was."""
    g, nodes = mp.graph, list(mp.graph.node)
    n = rng.choice(nodes)
    kind = rng.choice(["const_value"] * 6 + ["attr_int", "attr_ints", "init_dims", "swap_input", "init_dtype",
                                             "drop_node", "input_dims", "op_type", "out_name", "attr_drop",
                                             "init_scalar"])
    inits = list(g.initializer)
    if kind == "const_value":
        found = _int_constants(g, nodes)
        if not found:
            return "none"
        _, t = rng.choice(found)
        arr = numpy_helper.to_array(t).copy()
        if not arr.size:
            return "none"
        flat, k = arr.reshape(-1), rng.randrange(arr.size)
        flat[k] = rng.choice([-1, 0, 1, 3, 10**6, -10**6, 2**31 - 1] + ([2**40, -(2**40)] if arr.dtype == np.int64 else []))
        t.CopyFrom(numpy_helper.from_array(arr, t.name))
        return f"{kind} {t.name}[{k}]={flat[k]}"
    if kind in ("attr_int", "attr_ints"):
        want = AttributeProto.INT if kind == "attr_int" else AttributeProto.INTS
        attrs = [a for a in n.attribute if a.type == want and (kind == "attr_int" or len(a.ints))]
        if not attrs:
            return "none"
        a = rng.choice(attrs)
        if kind == "attr_int":
            a.i = rng.choice([-1, 0, 1, 2, 3, 7, 1000, -1000, 2**31, 2**62])
        else:
            a.ints[rng.randrange(len(a.ints))] = rng.choice([-1, 0, 5, 1000, -7, 2**40])
        return f"{kind} {n.op_type}.{a.name}"
    if kind == "attr_drop":
        if not n.attribute:
            return "none"
        del n.attribute[rng.randrange(len(n.attribute))]
        return kind
    if kind in ("init_dims", "init_scalar", "init_dtype"):
        shaped = [t for t in inits if len(t.dims)] if kind == "init_dims" else inits
        if not shaped:
            return "none"
        t = rng.choice(shaped)
        if kind == "init_dims":
            k = rng.randrange(len(t.dims))
            t.dims[k] = rng.choice([0, 1, t.dims[k] * 2, t.dims[k] + 1, -1])
        elif kind == "init_scalar":
            del t.dims[:]
        else:
            t.data_type = rng.choice([1, 6, 7, 10, 11, 9, 2])
        return f"{kind} {t.name}"
    if kind == "swap_input":
        if not n.input:
            return "none"
        names = [o for m in nodes for o in m.output] + [t.name for t in inits]
        n.input[rng.randrange(len(n.input))] = rng.choice(names)
        return f"{kind} {n.op_type}"
    if kind == "drop_node":
        g.node.remove(n)
        return f"{kind} {n.op_type}"
    if kind == "input_dims":
        d = g.input[0].type.tensor_type.shape.dim
        if not d:
            return "none"
        d[rng.randrange(len(d))].dim_value = rng.choice([0, 1, 2, 5, 100000])
        return kind
    if kind == "op_type":
        n.op_type = rng.choice(["Add", "Relu", "Conv", "MatMul", "Reshape", "Gemm", "Concat", "Transpose"])
        return f"{kind} -> {n.op_type}"
    n.output[0] = rng.choice(nodes).output[0]
    return kind


def _load(shared_models, file: str) -> onnx.ModelProto:
    if file not in _CACHE:
        _CACHE[file] = onnx.load(str(shared_models / "published" / file))
    return copy.deepcopy(_CACHE[file])


@pytest.mark.parametrize("seed", SEEDS)
def test_a_mutated_published_model_runs_or_fails_typed(shared_models, seed):
    rng = random.Random(seed)
    file = rng.choice(list(MODELS))
    mp = _load(shared_models, file)
    _runs_or_fails_typed(mp, file, mutate(mp, rng))


@pytest.mark.parametrize("case", list(FOUND))
def test_the_mutations_that_found_bugs(shared_models, case):
    file, name, change = FOUND[case]
    mp = _load(shared_models, file)
    (t,) = [t for t in mp.graph.initializer if t.name == name]
    if isinstance(change, int):
        t.data_type = change
    else:
        t.CopyFrom(numpy_helper.from_array(np.array(change, np.int64), name))
    _runs_or_fails_typed(mp, file, case)


def _runs_or_fails_typed(mp: onnx.ModelProto, file: str, what: str) -> None:
    data, feeds = mp.SerializeToString(), _feeds(file)
    name, shape, _, _ = MODELS[file]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = InferenceSession(data, {"max_shapes": {name: shape}}, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception as e:  # noqa: BLE001 - the point: which kind
        assert type(e).__module__.startswith("ort_"), f"{file} {what}: untyped {type(e).__module__}.{type(e).__name__}: {e}"
        return
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ref = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime refuses what ours runs: lenient, not wrong (Slice ends [] for [1])
        return
    for a, b in zip(got, ref, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{file} {what}"
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3, err_msg=f"{file} {what}")
