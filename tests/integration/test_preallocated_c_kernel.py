"""An older-ABI C kernel (no workspace declaration, asks for scratch) in a session with pre-allocated
execution buffers: the request is refused at that node with UnplannedAllocationError, whether the kernel
returns the host's error status or ignores it; the session stays usable."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_session import InferenceSession, UnplannedAllocationError

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


def _model(op):
    graph = helper.make_graph([helper.make_node(op, ["X"], ["Y"], name="old"), helper.make_node("Abs", ["Y"], ["Z"])],
                              "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("op", "want"), [("Relu", np.maximum(X, 0)), ("Neg", np.abs(X))],
                         ids=["returns-the-status", "ignores-the-status"])
def test_an_old_abi_c_kernel_asking_for_scratch_is_refused_in_preallocated_mode(old_abi_lib, op, want):
    free = InferenceSession(_model(op), {"kernel_libraries": [str(old_abi_lib)]})
    np.testing.assert_allclose(free.run(None, {"X": X})[0], want)
    assert free.last_run_stats.scratch_fallbacks == 1  # the same kernel, counted, without pre-allocation
    # both nodes through the C step runner (the old kernel, which handed the request to Python, and ort-cpu-ep's C Abs)
    assert free.last_run_stats.c_steps == 2
    sess = InferenceSession(_model(op), {"kernel_libraries": [str(old_abi_lib)],
                                         "session.pre_allocate_execution_buffers": "1"})
    for _ in range(2):
        with pytest.raises(UnplannedAllocationError, match=rf"node 'old' \({op}\) on CPUExecutionProvider asked for "
                                                           r"a 64-byte scratch buffer.*no workspace declaration"):
            sess.run(None, {"X": X})
        assert not sess.memory.buffers.busy
