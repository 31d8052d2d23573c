"""The published CNNs (ppocrv4_det / rec, ppocr_mobile_v2_cls, magika; `shared_models`, skipped where absent) end to end
on the CPU provider at 1 thread: outputs equal onnxruntime's within float32 rounding on the inputs their packages feed,
ConvTranspose + Add + BatchNormalization folded into one ConvTranspose, and every node in C except the few ops listed
here (numpy-only kernels these models still have)."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import onnxruntime as ort
import pytest

from ort_session import InferenceSession, PlanOverBudgetError

MODELS = {  # file -> (input, shape, dtype, value range), as benchmarks/bench_published.py feeds them
    "ppocrv4_det.onnx": ("x", [1, 3, 160, 192], np.float32, (-1, 1)),
    "ppocrv4_rec.onnx": ("x", [1, 3, 48, 320], np.float32, (-1, 1)),
    "ppocr_mobile_v2_cls.onnx": ("x", [1, 3, 48, 192], np.float32, (-1, 1)),
    "magika_standard_v3_3.onnx": ("bytes", [1, 2048], np.int32, (0, 257)),
}
# the nodes still on numpy kernels: (op, count) per model
NUMPY_LEFT = {
    "ppocrv4_det.onnx": {},
    "ppocrv4_rec.onnx": {},
    "ppocr_mobile_v2_cls.onnx": {},
    "magika_standard_v3_3.onnx": {},
}


def _feeds(file, seed=0):
    name, shape, dtype, (lo, hi) = MODELS[file]
    rng = np.random.default_rng(seed)
    x = rng.integers(lo, hi, shape) if np.issubdtype(dtype, np.integer) else rng.uniform(lo, hi, shape)
    return {name: x.astype(dtype)}


@pytest.mark.parametrize("file", list(MODELS))
def test_published_cnn_matches_onnxruntime_with_c_kernels(shared_models, file):
    path = shared_models / "published" / file
    if not path.is_file():
        pytest.skip(f"{path} not present")
    feeds = _feeds(file)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), {"intra_op_num_threads": 1,
                                            "max_shapes": {k: list(v.shape) for k, v in feeds.items()}})
    left = collections.Counter(n.op_type for n in sess.model.graph.nodes
                               if type(sess.kernels[n.index]).__name__ == "NumpyKernel")
    assert dict(left) == NUMPY_LEFT[file]
    assert "BatchNormalization" not in {n.op_type for n in sess.model.graph.nodes}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    want = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = sess.run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(float(np.abs(w).max()), 1.0))


@pytest.mark.parametrize("side", [16, 24])
def test_the_classifier_at_a_small_input_pools_as_onnxruntime(shared_models, side):
    """At 16x16 or 24x24, ppocr_mobile_v2_cls's last 2x2/2 MaxPool sees a 1-row input: onnxruntime (and onnx shape
    inference, hence the plan) give it one output row; the C kernel refused the node at run time."""
    path = shared_models / "published" / "ppocr_mobile_v2_cls.onnx"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    feeds = {"x": np.random.default_rng(1).uniform(-1, 1, (1, 3, side, side)).astype(np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), {"intra_op_num_threads": 1, "max_shapes": {"x": [1, 3, side, side]}})
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(sess.run(None, feeds)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("file", list(MODELS))
def test_a_cpu_budget_is_held_by_the_exact_plan_not_the_per_node_sum(shared_models, file):
    """The CPU (the fallback: its nodes have nowhere else to go) is held to its budget by the liveness-aware
    plan: the plan's own total is accepted, though the per-node cost sum is many times larger, and a byte less
    is refused at initialization naming the largest planned blocks."""
    path = shared_models / "published" / file
    if not path.is_file():
        pytest.skip(f"{path} not present")
    feeds = _feeds(file)
    options = {"intra_op_num_threads": 1, "max_shapes": {k: list(v.shape) for k, v in feeds.items()}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        total = InferenceSession(str(path), options).memory.device_totals()["cpu"]["total"]
        sess = InferenceSession(str(path), {**options, "budgets": {"cpu": total}})
    assert sess.placement.result.consumed["CPUExecutionProvider"] > total  # the sum without reuse
    got = sess.run(None, feeds)
    assert all(np.isfinite(g).all() for g in got if g.dtype.kind == "f")
    with pytest.raises(PlanOverBudgetError, match=rf"over its budget of {total - 1} bytes by 1 .*largest planned blocks"):
        InferenceSession(str(path), {**options, "budgets": {"cpu": total - 1}})


@pytest.mark.parametrize("file", list(MODELS))
def test_published_cnn_with_dynamic_dims_runs_every_node_in_c(shared_models, file):
    """Loaded as users load them (no max_shapes: the batch and image dims symbolic): every node still gets its C
    kernel (the exporters' Shape -> Cast -> Slice -> Concat -> Reshape targets keep their rank through
    `ort_graph._shape_values`), and two batch sizes match onnxruntime, each on its traced run, its first run on
    the traced pattern (values written in place where the pattern put them) and its replay all in C."""
    path = shared_models / "published" / file
    if not path.is_file():
        pytest.skip(f"{path} not present")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), {"intra_op_num_threads": 1})
    left = collections.Counter(n.op_type for n in sess.model.graph.nodes
                               if type(sess.kernels[n.index]).__name__ == "NumpyKernel")
    assert dict(left) == NUMPY_LEFT[file]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    peer = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    layouts = []
    for batch in (1, 2):
        for seed in range(3):
            feeds = {k: np.concatenate([v] * batch) for k, v in _feeds(file, seed).items()}
            for g, w in zip(sess.run(None, feeds), peer.run(None, feeds)):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(float(np.abs(w).max()), 1.0))
            layouts.append(sess.last_run_stats.layout)
    assert layouts == ["tracing", "cached pattern", "cached pattern"] * 2
