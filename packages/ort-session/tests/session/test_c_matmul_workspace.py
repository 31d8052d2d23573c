"""The C MatMul's packing buffer in a session: declared at Level 2 for the planned shapes, held by the memory
plan, and served from it at run time (ort-cpu-ep's kernel, the session's plan)."""

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_cpu_ep import c_kernels
from ort_session import InferenceSession


@pytest.mark.parametrize("M,slot", [(4, False), (64, True)])
def test_the_packing_buffer_is_declared_and_served_from_the_plan(M, slot):
    """Few rows stream B and need no buffer; more declare one B block per thread, bounded by the shapes (K 96,
    N 40: far below the 256 x 512 block), and the run takes it from the plan. B is fed (a constant B is packed once
    at initialization instead: test_prepacked_weights.py)."""
    if c_kernels.c_registry() is None:
        pytest.skip(f"the C kernels are not built here: {c_kernels.status().reason}")
    rng = np.random.default_rng(M)
    a = rng.standard_normal((M, 96)).astype(np.float32)
    b = rng.standard_normal((96, 40)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [M, 96]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [96, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, 40])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(model.SerializeToString(), {"intra_op_num_threads": 2}, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"a": a, "b": b})
    np.testing.assert_allclose(y, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    stats = sess.last_run_stats
    assert stats.workspace_from_plan == (1 if slot else 0) and stats.scratch_fallbacks == 0
    ws = sess.plan.to_dict()["devices"]["cpu"]["workspace"]
    if slot:  # at most two threads' B block: 96 rows x 40 columns rounded up to the 64-column panel, aligned
        assert 0 < ws <= 2 * (96 * 64 + 16) * 4
    else:
        assert ws == 0
