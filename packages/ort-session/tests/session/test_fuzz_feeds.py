"""Property tests (fixed seed, bounded): feeds of any type, dtype, shape and value either fail
validation with InvalidInputError or give the same output as onnxruntime."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from ort_session import InferenceSession, InvalidInputError  # noqa: E402

ort = pytest.importorskip("onnxruntime")
SECONDS = 2.0
FUZZ = dict(derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# (onnx elem type, op): y = op(x) with x of shape ["batch", 3]
MODELS = {"float": (T.FLOAT, "Relu"), "int64": (T.INT64, "Neg"), "bool": (T.BOOL, "Not")}


def _proto(elem: int, op: str):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name=f"the_{op.lower()}")], "g",
                          [helper.make_tensor_value_info("x", elem, ["batch", 3])],
                          [helper.make_tensor_value_info("y", elem, ["batch", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.fixture(scope="module")
def sessions():
    out = {}
    for key, (elem, op) in MODELS.items():
        m = _proto(elem, op)
        out[key] = (InferenceSession(m), ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]))
    return out


_dtypes = st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint64, np.bool_])
_arrays = _dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
_scalars = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans())
_lists = st.recursive(st.lists(_scalars, max_size=4), lambda inner: st.lists(inner, max_size=3), max_leaves=12)
_others = st.one_of(st.none(), st.text(max_size=5), st.dictionaries(st.text(max_size=2), _scalars, max_size=2),
                    st.tuples(_scalars, _scalars, _scalars), st.builds(object), _scalars)
_values = st.one_of(_arrays, _lists, _others)
NUMPY = {"float": np.float32, "int64": np.int64, "bool": np.bool_}
LIST_ITEMS = {"float": st.floats(width=32), "int64": st.integers(-(2**63), 2**63 - 1), "bool": st.booleans()}


def _fitting(model: str):
    """Feeds of the right dtype and shape [batch, 3] (extreme values included), as arrays or lists."""
    rows = st.integers(0, 4)
    arrays = rows.flatmap(lambda b: hnp.arrays(NUMPY[model], (b, 3)))
    lists = st.lists(st.lists(LIST_ITEMS[model], min_size=3, max_size=3), max_size=4)
    return st.one_of(arrays, lists)


_cases = st.sampled_from(sorted(MODELS)).flatmap(lambda m: st.tuples(st.just(m), st.one_of(_values, _fitting(m))))


def _run(sess, feeds):
    try:
        return sess.run(None, feeds)[0], None
    except Exception as e:  # noqa: BLE001 - classified by the test
        return None, e


@settings(max_examples=300, **FUZZ)
@given(case=_cases)
def test_any_feed_is_an_input_error_or_matches_onnxruntime(sessions, case, fuzz_cases):
    fuzz_cases.add("feeds")
    model, value = case
    ours, theirs = sessions[model]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy casts of extreme list values
        got, error = _run(ours, {"x": value})
    assert time.perf_counter() - t0 < SECONDS
    if error is not None:
        assert isinstance(error, InvalidInputError), f"{type(error).__name__}: {error}"
        assert "'x'" in str(error)
        return
    want, their_error = _run(theirs, {"x": value})
    assert their_error is None, f"ort-session ran a feed onnxruntime refuses: {value!r} ({their_error})"
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
