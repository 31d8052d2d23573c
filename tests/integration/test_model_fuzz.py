"""Model-file fuzzing: mutated and truncated model files (and external data files) are untrusted input.

Small models are built here, serialized, then bytes are flipped, the file is truncated, or a chunk is
spliced in elsewhere (hypothesis, fixed seed: `derandomize=True`, so CI runs the same cases every time).
Every outcome must be one of:

- a typed error of the project's hierarchy at initialization or run: ort_graph.GraphError (ModelLoadError,
  GraphStructureError, ShapeResolutionError ...), ort_session.SessionError, ort_partition.PartitionError,
  ort_memplan.MemPlanError, ort_abi.AbiError — never a raw protobuf/numpy/KeyError/UnicodeDecodeError,
  never a crash;
- a session whose run matches onnxruntime on the same mutated file, when onnxruntime accepts and runs it
  (when onnxruntime refuses a model we accept, the case is counted as `ours_only`).

The external-data class mutates the entries (location, offset, length) of sparse initializers' values and
indices and of attribute tensors (a Constant's sparse_value, Constant / ConstantOfShape values inside a
Loop body); a location leaving the model's folder must be refused at load.

The counts per outcome are printed in the terminal summary ("model fuzzing") by tests/integration/conftest.py.
"""

from __future__ import annotations

import collections
import os
import pathlib
import tempfile
import threading
import traceback
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
import ort_memplan
import ort_partition
import ort_session
from ort_cpu_ep._control_models import KINDS
from ort_cpu_ep.testing import control_flow_model

TYPED_ERRORS = (ort_graph.GraphError, ort_session.SessionError, ort_partition.PartitionError,
                ort_memplan.MemPlanError, ort_abi.AbiError)
FEEDS = {"x": np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(2, 4)}
FUZZ = settings(derandomize=True, max_examples=300, deadline=10_000, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _base_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([3, 4], np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="/layer/MatMul"),
             helper.make_node("Add", ["h", "b"], ["h2"], name="/layer/Add"),
             helper.make_node("Relu", ["h2"], ["r"], name="/layer/Relu"),
             helper.make_node("Reshape", ["r", "shape"], ["r2"], name="/layer/Reshape"),
             helper.make_node("MatMul", ["r2", "W2"], ["m"], name="/head/MatMul"),
             helper.make_node("Softmax", ["m"], ["y"], name="/head/Softmax", axis=-1)]
    g = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


MODEL_BYTES = _base_model().SerializeToString()


def _external_files(directory: pathlib.Path) -> tuple[bytes, bytes]:
    """The base model with W, b, W2 in `m.onnx.data` (the Reshape shape stays embedded: onnxruntime's shape
    inference cannot read an external shape)."""
    mp = _base_model()
    data = bytearray()
    for t in mp.graph.initializer:
        if t.name == "shape":
            continue
        data += b"\0" * (-len(data) % 16)
        onnx.external_data_helper.set_external_data(t, "m.onnx.data", offset=len(data), length=len(t.raw_data))
        data += t.raw_data
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
    (directory / "m.onnx.data").write_bytes(bytes(data))
    (directory / "m.onnx").write_bytes(mp.SerializeToString())
    return (directory / "m.onnx").read_bytes(), bytes(data)


def _inline_weights_model() -> bytes:
    """Two weights of 1152 bytes stored inline (raw_data): a session made from the file maps them from it."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 72)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((72, 4)).astype(np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="/layer/MatMul"),
             helper.make_node("Relu", ["h"], ["r"], name="/layer/Relu"),
             helper.make_node("MatMul", ["r", "W2"], ["m"], name="/head/MatMul"),
             helper.make_node("Softmax", ["m"], ["y"], name="/head/Softmax", axis=-1)]
    g = helper.make_graph(nodes, "inline", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


INLINE_BYTES = _inline_weights_model()


def _mutations(size_hint: int):
    pos = st.integers(0, size_hint)
    return st.one_of(
        st.tuples(st.just("flip"), st.lists(st.tuples(pos, st.integers(1, 255)), min_size=1, max_size=4)),
        st.tuples(st.just("truncate"), pos),
        st.tuples(st.just("splice"), pos, pos, pos),
    )


def _mutate(data: bytes, mutation) -> bytes:
    kind, *args = mutation
    if not data:
        return data
    if kind == "flip":
        out = bytearray(data)
        for at, mask in args[0]:
            out[at % len(out)] ^= mask
        return bytes(out)
    if kind == "truncate":
        return data[: args[0] % len(data)]
    start, stop, at = (a % (len(data) + 1) for a in args)
    chunk = data[min(start, stop):max(start, stop)]
    return data[:at] + chunk + data[at:]


def _ours(source):
    """('ok', outputs) or ('typed', stage, error); anything untyped propagates."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sess = ort_session.InferenceSession(source)
        except TYPED_ERRORS as e:
            return ("load" if isinstance(e, ort_graph.ModelLoadError) else "init"), e
        try:
            return "ok", sess.run(None, FEEDS)
        except TYPED_ERRORS as e:
            return "run", e


def _onnxruntime(source):
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(str(source) if isinstance(source, pathlib.Path) else source, opts,
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, FEEDS)
    except Exception:  # noqa: BLE001 - any refusal by onnxruntime only means there is nothing to compare
        return None


def _check(source, counts: collections.Counter, describe: str) -> None:
    try:
        outcome, value = _ours(source)
    except Exception as e:  # noqa: BLE001 - the failure message shows the case
        pytest.fail(f"{describe}: untyped {type(e).__name__} escaped: {e}\n{traceback.format_exc()}")
    if outcome != "ok":
        counts[f"typed error at {outcome}"] += 1
        return
    theirs = _onnxruntime(source)
    if theirs is None:
        counts["ours_only (onnxruntime refused)"] += 1
        return
    assert len(value) == len(theirs), describe
    for a, b in zip(value, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{describe}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True, err_msg=describe)
    counts["ran, matches onnxruntime"] += 1


@pytest.fixture
def counts(fuzz_counts):
    return fuzz_counts


def test_unmutated_models_match_onnxruntime(tmp_path, counts):
    c = counts.setdefault("unmutated", collections.Counter())
    _check(MODEL_BYTES, c, "embedded model")
    _external_files(tmp_path)
    _check(tmp_path / "m.onnx", c, "external-data model")
    (tmp_path / "inline.onnx").write_bytes(INLINE_BYTES)
    mapped = ort_session.InferenceSession(tmp_path / "inline.onnx").model.graph.initializers
    assert all(t.external is not None and t.external.in_model_file for t in mapped.values())
    _check(tmp_path / "inline.onnx", c, "inline-weights model file")
    (tmp_path / "positioned").mkdir()
    _positioned_files(tmp_path / "positioned")
    (tmp_path / "positioned" / "m.onnx").write_bytes(_positioned_model()[0].SerializeToString())
    _check(tmp_path / "positioned" / "m.onnx", c, "external sparse and attribute tensors")
    assert c == {"ran, matches onnxruntime": 4}


@FUZZ
@given(mutation=_mutations(len(MODEL_BYTES)))
def test_mutated_model_bytes(mutation, counts):
    _check(_mutate(MODEL_BYTES, mutation), counts.setdefault("model bytes", collections.Counter()),
           f"model bytes mutated by {mutation!r}")


@FUZZ
@given(mutation=_mutations(4096), target=st.sampled_from(["model", "data"]))
def test_mutated_model_with_external_data(mutation, target, counts):
    with tempfile.TemporaryDirectory() as d:
        directory = pathlib.Path(d)
        model, data = _external_files(directory)
        path = directory / ("m.onnx" if target == "model" else "m.onnx.data")
        path.write_bytes(_mutate(model if target == "model" else data, mutation))
        _check(directory / "m.onnx", counts.setdefault(f"external data ({target} file)", collections.Counter()),
               f"{target} file of an external-data model mutated by {mutation!r}")


@settings(FUZZ, max_examples=150)
@given(mutation=_mutations(len(INLINE_BYTES)))
def test_mutated_model_file_with_mapped_inline_weights(mutation, counts):
    """The file is read by the strict wire reader and its weights mapped from it (`session.map_inline_weights`)."""
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "m.onnx"
        path.write_bytes(_mutate(INLINE_BYTES, mutation))
        _check(path, counts.setdefault("inline weights mapped from the file", collections.Counter()),
               f"inline-weights model file mutated by {mutation!r}")


# -- sparse and attribute tensors with external data ---------------------------------------------------
_POSITIONED = {"values": (0, np.array([1, 2, 3], np.float32)), "values2": (16, np.array([4, 5, 6], np.float32)),
               "indices": (64, np.array([0, 3, 5], np.int64)), "const": (128, np.linspace(-2, 2, 8, dtype=np.float32)),
               "fill": (192, np.array([0.5], np.float32))}
LEAVING = ("../secret.bin", "sub/../data.bin", "link.bin", "/etc/passwd")


def _ext(part: str, dims=None, name: str = "") -> TensorProto:
    offset, array = _POSITIONED[part]
    t = numpy_helper.from_array(array.reshape(dims) if dims else array, name)
    for key, value in (("location", "data.bin"), ("offset", str(offset)), ("length", str(len(t.raw_data)))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    return t


def _positioned_model() -> tuple[onnx.ModelProto, dict[str, TensorProto]]:
    """y = x + S (sparse initializer) + cs (Constant sparse_value) + a Loop body's Constant value and
    ConstantOfShape fill, every one of those tensors (and S's indices) external in data.bin; the tensors by
    name, as references into the model (to mutate)."""
    flags = [numpy_helper.from_array(np.array(1, np.int64), "n"), numpy_helper.from_array(np.array(True), "cond"),
             numpy_helper.from_array(np.array([2, 4], np.int64), "shp")]
    cs = helper.make_sparse_tensor(_ext("values2", name="cv"), numpy_helper.from_array(np.array([1, 2, 6], np.int64),
                                                                                          "ci"), [2, 4])
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], name="loop_const", value=_ext("const", [2, 4])),
         helper.make_node("ConstantOfShape", ["shp"], ["f"], name="loop_fill", value=_ext("fill")),
         helper.make_node("Add", ["k", "f"], ["vo"]), helper.make_node("Identity", ["ci_"], ["co"])], "body",
        [helper.make_tensor_value_info("it", TensorProto.INT64, []),
         helper.make_tensor_value_info("ci_", TensorProto.BOOL, []),
         helper.make_tensor_value_info("vi", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("co", TensorProto.BOOL, []),
         helper.make_tensor_value_info("vo", TensorProto.FLOAT, [2, 4])])
    nodes = [helper.make_node("Constant", [], ["cs"], name="sparse_const", sparse_value=cs),
             helper.make_node("Loop", ["n", "cond", "x"], ["lo"], name="loop", body=body),
             helper.make_node("Add", ["x", "S"], ["a"]), helper.make_node("Add", ["a", "cs"], ["b"]),
             helper.make_node("Add", ["b", "lo"], ["y"])]
    g = helper.make_graph(nodes, "positioned", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], flags)
    g.sparse_initializer.append(helper.make_sparse_tensor(_ext("values", name="S"), _ext("indices", name="Si"), [2, 4]))
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loop = mp.graph.node[1].attribute[0].g
    return mp, {"sparse initializer values": mp.graph.sparse_initializer[0].values,
                "sparse initializer indices": mp.graph.sparse_initializer[0].indices,
                "Constant sparse_value values": mp.graph.node[0].attribute[0].sparse_tensor.values,
                "Loop body Constant value": loop.node[0].attribute[0].t,
                "Loop body ConstantOfShape value": loop.node[1].attribute[0].t}


def _positioned_files(directory: pathlib.Path) -> bytes:
    data = bytearray(256)
    for offset, array in _POSITIONED.values():
        data[offset:offset + array.nbytes] = array.tobytes()
    (directory / "data.bin").write_bytes(bytes(data))
    (directory.parent / "secret.bin").write_bytes(b"SECRET" * 64)
    os.symlink(directory.parent / "secret.bin", directory / "link.bin")
    return bytes(data)


def _entry_mutations():
    text = st.one_of(st.integers(-8, 300).map(str), st.sampled_from(["", "0x10", "1e3", " 8", "99999999999999999999"]))
    location = st.one_of(st.sampled_from(("data.bin", "./data.bin", "missing.bin", "", "data.bin\0") + LEAVING),
                         st.text("ab./\\", max_size=6))
    return st.one_of(st.tuples(st.just("location"), location), st.tuples(st.just("offset"), text),
                     st.tuples(st.just("length"), text), st.tuples(st.sampled_from(["offset", "length"]), st.none()))


@settings(FUZZ, max_examples=150)
@given(target=st.sampled_from(sorted(_positioned_model()[1])), edits=st.lists(_entry_mutations(), min_size=1,
                                                                               max_size=3),
       data_flip=st.one_of(st.none(), st.tuples(st.integers(0, 255), st.integers(1, 255))))
def test_mutated_external_sparse_and_attribute_tensors(target, edits, data_flip, counts, fuzz_cases):
    """Mutated locations, offsets and lengths of sparse / attribute tensors (and flipped data bytes): a typed
    error, or a run matching onnxruntime; a location leaving the folder is always refused at load."""
    fuzz_cases.add("external sparse/attribute tensors")
    mp, tensors = _positioned_model()
    entries = {e.key: e for e in tensors[target].external_data}
    for key, value in edits:
        if value is None:
            if key in entries:
                tensors[target].external_data.remove(entries.pop(key))
        elif key in entries:
            entries[key].value = value
        else:
            entries[key] = tensors[target].external_data.add(key=key, value=value)
    with tempfile.TemporaryDirectory() as d:
        directory = pathlib.Path(d) / "model"
        directory.mkdir()
        data = bytearray(_positioned_files(directory))
        if data_flip is not None:
            data[data_flip[0]] ^= data_flip[1]
            (directory / "data.bin").write_bytes(bytes(data))
        (directory / "m.onnx").write_bytes(mp.SerializeToString())
        describe = f"{target} with external data entries {edits!r}, data flip {data_flip!r}"
        area = counts.setdefault("external sparse/attribute tensors", collections.Counter())
        if "location" in entries and entries["location"].value in LEAVING:
            with pytest.raises(ort_graph.ExternalDataError, match="location"):
                ort_graph.load(directory / "m.onnx")
        _check(directory / "m.onnx", area, describe)


# -- control flow with huge trip counts under RunOptions.terminate ---------------------------------
# Each case sets terminate from another thread while a Loop of up to 2**63-1 iterations (or a long Scan) runs:
# the run must end in RunTerminatedError within STOP_S of it, and the next run must match onnxruntime.
STOP_S = 5.0


def _terminated_run(sess, feeds, delay):
    ro = ort_session.RunOptions()
    box: dict = {}

    def run():
        try:
            box["out"] = sess.run(None, feeds, ro)
        except BaseException as e:  # noqa: BLE001 - judged below
            box["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    timer = threading.Timer(delay, lambda: setattr(ro, "terminate", True))
    worker.start()
    timer.start()
    worker.join(delay + STOP_S)
    timer.join()
    assert not worker.is_alive(), f"terminate did not stop the run within {STOP_S} s"
    return box, ro


@settings(FUZZ, max_examples=12, deadline=None)
@given(kind=st.sampled_from(KINDS), scan=st.booleans(), trip=st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1]),
       delay=st.sampled_from([0.0, 0.005, 0.02]))
def test_control_flow_with_huge_trip_counts_stops_under_terminate(kind, scan, trip, delay, counts, fuzz_cases):
    c = counts.setdefault("control flow under terminate", collections.Counter())
    fuzz_cases.add("control flow under terminate")
    scan = scan and kind != "empty_body"
    model = control_flow_model(kind, scan=scan)
    x = np.arange(4, dtype=np.float32)
    if kind == "scan":  # a Scan's length is its input's: long, not huge
        long, small = {"x": x, "seq": np.ones((400_000, 4), np.float32)}, {"x": x, "seq": np.ones((3, 4), np.float32)}
    else:
        long, small = {"x": x, "M": np.array(trip, np.int64)}, {"x": x, "M": np.array(3, np.int64)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort_session.InferenceSession(model.SerializeToString())
    box, ro = _terminated_run(sess, long, delay)
    error = box.get("error")
    assert isinstance(error, ort_session.RunTerminatedError), f"{kind} trip={trip}: {box!r}"
    c["terminated (RunTerminatedError)"] += 1
    ro.terminate = False
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, small)
    for a, b in zip(sess.run(None, small, ro), theirs, strict=True):
        np.testing.assert_array_equal(a, b)
    c["then ran, matches onnxruntime"] += 1


# -- huge folded constants and dimensions ---------------------------------------------------------
# A 1-D length n made by ConstantOfShape / Range / Expand, from a constant or from a dimension override of the
# input: initialization never materialises it (folding is bounded), so every case ends in a typed error of the
# project's hierarchy or a session; a session with a small n runs and matches onnxruntime.
RUN_AT_MOST = 4097  # elements: larger sessions are not run (the user asked for that memory; CI has not got it)


def _length_model(op: str, source: str, n: int) -> onnx.ModelProto:
    i64, f = TensorProto.INT64, TensorProto.FLOAT
    inits = [helper.make_tensor("zero", i64, [], [0]), helper.make_tensor("one", i64, [], [1])]
    if source == "constant":
        inits.append(helper.make_tensor("n", i64, [], [n]))
        nodes, x = [], helper.make_tensor_value_info("x", f, [1])
    else:
        nodes = [helper.make_node("Shape", ["x"], ["xs"], name="/Shape"),
                 helper.make_node("Squeeze", ["xs"], ["n"], name="/Squeeze")]
        x = helper.make_tensor_value_info("x", f, ["n_dim"])
    nodes.append(helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"], name="/Unsqueeze"))
    inits.append(helper.make_tensor("zero1", i64, [1], [0]))
    if op == "ConstantOfShape":
        nodes.append(helper.make_node("ConstantOfShape", ["n1"], ["c"], name="/ConstantOfShape",
                                      value=helper.make_tensor("v", f, [1], [2.0])))
    elif op == "Range":
        nodes += [helper.make_node("Range", ["zero", "n", "one"], ["r"], name="/Range"),
                  helper.make_node("Cast", ["r"], ["c"], name="/Cast", to=f)]
    else:
        nodes.append(helper.make_node("Expand", ["x", "n1"], ["c"], name="/Expand"))
    nodes.append(helper.make_node("Add", ["c", "x"], ["y"], name="/Add"))
    g = helper.make_graph(nodes, "lengths", [x], [helper.make_tensor_value_info("y", f, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@settings(FUZZ, max_examples=60, deadline=None)
@given(op=st.sampled_from(["ConstantOfShape", "Range", "Expand"]), source=st.sampled_from(["constant", "dim"]),
       n=st.sampled_from([0, 1, 7, 4096, 4097, 2**20 + 3, 2**31, 2**40, 2**62, 2**63 - 1, -1, -(2**40)]),
       budget=st.sampled_from([None, "cpu:1GiB"]))
def test_huge_folded_constants_and_dims_end_typed_or_match_onnxruntime(op, source, n, budget, counts, fuzz_cases):
    c = counts.setdefault("huge folded constants and dims", collections.Counter())
    fuzz_cases.add("huge folded constants and dims")
    model = _length_model(op, source, n)
    kwargs: dict = {"budgets": budget} if budget else {}
    if source == "dim":
        kwargs["free_dimension_overrides"] = {"n_dim": n}
    describe = f"{op} of length {n} from a {source} (budget {budget})"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = ort_session.InferenceSession(model.SerializeToString(), **kwargs)
    except TYPED_ERRORS:
        c["typed error at init"] += 1
        return
    except Exception as e:  # noqa: BLE001 - the failure message shows the case
        pytest.fail(f"{describe}: untyped {type(e).__name__} escaped at init: {e}\n{traceback.format_exc()}")
    if not 0 <= n <= RUN_AT_MOST:
        c["initialized, not run (too large to run here)" if n > 0 else "initialized, not run"] += 1
        return
    feeds = {"x": np.linspace(-1, 1, 1 if source == "constant" else n, dtype=np.float32)}
    try:
        ours = sess.run(None, feeds)
    except TYPED_ERRORS:
        c["typed error at run"] += 1
        return
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6, err_msg=describe)
    c["ran, matches onnxruntime"] += 1
