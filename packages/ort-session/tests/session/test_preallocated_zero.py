"""Pre-allocated means zero: with session.pre_allocate_execution_buffers any allocation a run would make
outside the plan is an UnplannedAllocationError at that node, and the session stays usable."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_abi
import ort_session._session
from ort_session import InferenceSession
from ort_session._errors import KernelRunError, UnplannedAllocationError

CPU = ["CPUExecutionProvider"]
SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
PRE = {"session.pre_allocate_execution_buffers": "1"}


class OldAbiRelu:
    """A kernel of an older ABI path: no workspace declaration, asks for scratch while `greedy`."""

    greedy = True

    def __init__(self, state, info):
        self.info = info

    def compute(self, ctx):
        x = ctx.input(0)
        if type(self).greedy:
            self.workspace(ctx, 256)
        np.maximum(x, 0, out=ctx.output(0, x.shape, x.dtype))

    def workspace(self, ctx, nbytes):
        return ctx.scratch(nbytes)


class GreedyRelu(OldAbiRelu):
    """Declares 64 bytes of workspace but asks for 256 while `greedy` (64 otherwise)."""

    def declare_workspace(self, shapes):
        return [ort_abi.WorkspaceSlot(0, 64)]

    def compute(self, ctx):
        x = ctx.input(0)
        nbytes = 256 if type(self).greedy else 64
        buf = ctx.preallocated_workspace(0, nbytes)
        if buf is None:
            buf = ctx.scratch(nbytes)
        np.maximum(x, 0, out=ctx.output(0, x.shape, x.dtype))


class WideRelu(OldAbiRelu):
    """Writes an output twice the planned size while `greedy`."""

    def compute(self, ctx):
        x = ctx.input(0)
        shape = (x.shape[0] * 2, *x.shape[1:]) if type(self).greedy else x.shape
        out = ctx.output(0, shape, x.dtype)
        out[: x.shape[0]] = np.maximum(x, 0)


def relu_model():
    nodes = [helper.make_node("Relu", ["X"], ["Y"], name="first"), helper.make_node("Neg", ["Y"], ["Z"], name="neg")]
    graph = helper.make_graph(nodes, "relu", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [2, 16])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def session_with(monkeypatch):
    def make(kernel, options, providers):
        registry = ort_abi.KernelRegistry()
        for ep in ("CPUExecutionProvider", "SimulatedGPUExecutionProvider"):
            kdef = ort_abi.KernelDefBuilder().op_type("Relu").domain("").since_version(1).ep(ep).build()
            registry.add_kernel_v2(kdef, kernel)
        monkeypatch.setattr(ort_session._session, "load_plugins", lambda paths: registry)
        monkeypatch.setattr(kernel, "greedy", True)
        if providers == SIM:
            options = {**options, "session.name_based_layer_assignment": "gpu(first, neg)"}
        return InferenceSession(relu_model(), options, providers=providers)

    return make


X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)

CASES = {
    "old-abi scratch": (OldAbiRelu, r"node 'first' \(Relu\) on \w+ asked for a 256-byte scratch buffer during a run "
                                    r"with pre-allocated execution buffers.*no workspace declaration", 256, None),
    "more than declared": (GreedyRelu, r"node 'first' \(Relu\) on \w+ asked for a 256-byte scratch buffer.*planned "
                                       r"workspace is \{0: 64\}.*more than it declared", 256, 64),
}


@pytest.mark.parametrize("providers", [CPU, SIM], ids=["cpu", "simgpu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_runtime_allocation_in_preallocated_mode_is_an_error_at_its_node(session_with, case, providers):
    kernel, message, requested, planned = CASES[case]
    sess = session_with(kernel, PRE, providers)
    device = sess.memory.allocators.get("simgpu")
    in_use = device.bytes_in_use if device is not None else None
    for _ in range(2):  # the error leaves the buffers free and nothing allocated: the same refusal again
        with pytest.raises(UnplannedAllocationError, match=message) as info:
            sess.run(None, {"X": X})
        assert (info.value.node, info.value.requested, info.value.planned) == ("first", requested, planned)
        assert not sess.memory.buffers.busy
        if device is not None:
            assert device.bytes_in_use == in_use
    kernel.greedy = False  # the kernel keeps to its plan: the same session runs, allocating nothing
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], -np.maximum(X, 0))
    assert sess.last_run_stats.allocations == 0 and sess.last_run_stats.scratch_fallbacks == 0


@pytest.mark.parametrize("providers", [CPU, SIM], ids=["cpu", "simgpu"])
def test_an_output_larger_than_planned_is_refused_at_its_node_and_the_session_stays_usable(session_with, providers):
    # the host's output check (the planned shape is exact for the planned feed) refuses it before any allocation
    sess = session_with(WideRelu, PRE, providers)
    device = sess.memory.allocators.get("simgpu")
    in_use = device.bytes_in_use if device is not None else None
    for _ in range(2):
        with pytest.raises(KernelRunError, match=r"node 'first'.*requested with shape \[4, 16\] but the plan has \[2, 16\]"):
            sess.run(None, {"X": X})
        assert not sess.memory.buffers.busy
        if device is not None:
            assert device.bytes_in_use == in_use
    WideRelu.greedy = False
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], -np.maximum(X, 0))
    assert sess.last_run_stats.allocations == 0


@pytest.mark.parametrize("kernel", [OldAbiRelu, GreedyRelu])
def test_without_preallocation_the_same_request_is_a_counted_scratch_fallback(session_with, kernel):
    sess = session_with(kernel, {}, CPU)
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], -np.maximum(X, 0))
    assert sess.last_run_stats.scratch_fallbacks == 1 and sess.last_run_stats.scratch_bytes == 256
