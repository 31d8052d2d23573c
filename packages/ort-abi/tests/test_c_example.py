"""The example C library: built with the system cc, loaded, run against numpy; and its Python twin
giving the same Level-1 estimate and the same Level-2 slots through the same registry calls."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import ort_abi
from ort_abi import (
    HOST_API,
    EpIdentity,
    KernelContext,
    KernelDefBuilder,
    KernelError,
    KernelInfo,
    KernelRegistry,
    WorkspaceSlot,
    declare_workspace,
    estimate_workspace,
    load_kernel_library,
    workspace_input_shapes,
)

F = TensorProto.FLOAT
CPU = "CPUExecutionProvider"
EP = EpIdentity(CPU)


def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture
def registry(example_lib):
    reg = KernelRegistry()
    lib = load_kernel_library(example_lib, reg)
    assert lib.abi_version == ort_abi.ABI_VERSION and len(lib.entries) == 3
    return reg


def run(registry, op, inputs, opset=17, attributes=None, workspace=None):
    entry = registry.find(op, "", opset, CPU, {"T": F})
    kernel = entry.create_kernel(KernelInfo(f"/test/{op}", op, attributes=attributes or {},
                                            input_count=len(inputs), output_count=1, output_types=(F,)))
    try:
        ctx = KernelContext(inputs, output_types=[F], workspace=workspace)
        kernel.compute(ctx)
        return ctx
    finally:
        kernel.release()


def test_registry_lists_the_library(registry, example_lib):
    rows = [(e.op_type, e.ep, e.has_estimate, e.language, e.library) for e in registry]
    assert rows == [("Relu", CPU, False, "c", str(example_lib)), ("Add", CPU, False, "c", str(example_lib)),
                    ("Softmax", CPU, True, "c", str(example_lib))]
    assert registry.find("Softmax", "", 12, CPU) is None


@pytest.mark.parametrize("shape", [(7,), (2, 3), (2, 0, 4), (), (1, 1, 1, 5)])
def test_relu_matches_numpy(registry, shape, fresh_statuses):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(run(registry, "Relu", [x]).outputs[0], np.maximum(x, 0))


@pytest.mark.parametrize("shape", [(5,), (3, 4), (0,)])
def test_add_matches_numpy(registry, shape, fresh_statuses):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(run(registry, "Add", [a, b]).outputs[0], a + b)


def test_non_contiguous_inputs_are_handled(registry):
    x = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)[:, ::2]
    np.testing.assert_array_equal(run(registry, "Relu", [x]).outputs[0], np.maximum(x, 0))


@pytest.mark.parametrize("shape", [(1, 8), (3, 5), (2, 3, 7), (4, 1)])
@pytest.mark.parametrize("planned", [True, False])
def test_softmax_matches_numpy_with_planned_or_scratch_workspace(registry, shape, planned, fresh_statuses):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 4
    workspace = {0: np.zeros(shape[-1] * 4, np.uint8)} if planned else None
    ctx = run(registry, "Softmax", [x], attributes={"axis": -1}, workspace=workspace)
    np.testing.assert_allclose(ctx.outputs[0], softmax_ref(x), rtol=1e-5, atol=1e-6)
    c = ctx.counters
    assert (c.workspace_from_plan, c.scratch_fallbacks) == ((1, 0) if planned else (0, 1))
    if planned:
        assert workspace[0].any()  # the kernel really used the planned buffer


def test_softmax_falls_back_to_scratch_when_the_plan_is_too_small(registry):
    x = np.ones((2, 6), np.float32)
    ctx = run(registry, "Softmax", [x], workspace={0: np.zeros(8, np.uint8)})
    assert (ctx.counters.workspace_misses, ctx.counters.scratch_fallbacks, ctx.counters.scratch_bytes) == (1, 1, 24)
    np.testing.assert_allclose(ctx.outputs[0], softmax_ref(x), rtol=1e-6)


# ---- the Python twin of the C Softmax: same helper, same roles --------------------------------------
def softmax_workspace_bytes(dims):
    if dims is None or len(dims) == 0 or dims[-1] < 0:
        return None
    return dims[-1] * 4


def py_softmax_estimate(api, node, ep):
    dims = api.node_input_shape(node, 0)
    axis = api.node_attribute(node, "axis", "int", -1)
    if dims is None or axis not in (-1, len(dims) - 1):
        return None
    return softmax_workspace_bytes(dims)


class PySoftmax:
    def __init__(self, state, info):
        self.axis = info.attr("axis", -1)

    def declare_workspace(self, shapes):
        s = shapes[0]
        size = softmax_workspace_bytes(s.dims) if s.has_shape else None
        return [] if size is None else [WorkspaceSlot(0, size)]

    def compute(self, ctx):
        x = ctx.input(0)
        need = x.shape[-1] * 4
        row = ctx.preallocated_workspace(0, need)
        if row is None:
            row = ctx.scratch(need)
        row = row.view(np.float32)
        out = ctx.output(0, x.shape)
        for r, xi in enumerate(x.reshape(-1, x.shape[-1])):
            np.exp(xi - xi.max(), out=row)
            out.reshape(-1, x.shape[-1])[r] = row / row.sum()


@pytest.fixture
def both(registry):
    py = KernelRegistry()
    d = KernelDefBuilder().op_type("Softmax").domain("").since_version(13).ep(CPU).type_constraint("T", [F]).build()
    py.add_kernel_v2(d, PySoftmax, None, py_softmax_estimate)
    return {"c": registry.find("Softmax", "", 13, CPU), "python": py.find("Softmax", "", 13, CPU)}


@pytest.mark.parametrize(("shape", "axis", "expected"), [
    ((2, 3, 7), -1, 28), ((2, 3, 7), 2, 28), ((5,), -1, 20), ((4, 0), -1, 0),
    ((2, "seq", 7), -1, None), (None, -1, None), ((2, 3), 0, None), ((), -1, None),
])
def test_level1_estimate_same_for_c_and_python(both, node_factory, shape, axis, expected):
    node = node_factory("Softmax", [("x", shape, F)], attributes={"axis": axis})
    got = {lang: estimate_workspace(entry, node, EP) for lang, entry in both.items()}
    assert got == {"c": expected, "python": expected}


@pytest.mark.parametrize(("shape", "expected"), [
    ((2, 3, 7), [WorkspaceSlot(0, 28)]), ((5,), [WorkspaceSlot(0, 20)]), ((3, 0), [WorkspaceSlot(0, 0)]),
    ((2, "seq", 7), [WorkspaceSlot(0, 28)]), ((2, 7, "d"), []), (None, []), ((), []),
])
def test_level2_slots_same_for_c_and_python_and_agree_with_level1(both, node_factory, shape, expected, fresh_statuses):
    node = node_factory("Softmax", [("x", shape, F)], attributes={"axis": -1})
    shapes = workspace_input_shapes(node)
    for lang, entry in both.items():
        kernel = entry.create_kernel(KernelInfo.from_node(node, EP))
        assert entry.declares_workspace is True, lang
        assert declare_workspace(kernel, shapes, node=node.name) == expected, lang
        estimate = estimate_workspace(entry, node, EP)
        if estimate is not None:
            assert sum(s.size_bytes for s in expected) == estimate
        ort_abi.release_kernel(kernel)


def test_outputs_same_for_c_and_python(both):
    x = np.random.default_rng(4).standard_normal((3, 9)).astype(np.float32)
    outs = {}
    for lang, entry in both.items():
        kernel = entry.create_kernel(KernelInfo("/sm", "Softmax", input_count=1, output_types=(F,)))
        ctx = KernelContext([x], output_types=[F], workspace={0: np.zeros(36, np.uint8)})
        kernel.compute(ctx)
        outs[lang] = ctx.outputs[0]
        assert ctx.counters.workspace_from_plan == 1
        ort_abi.release_kernel(kernel)
    np.testing.assert_allclose(outs["c"], outs["python"], rtol=1e-6)
    np.testing.assert_allclose(outs["c"], softmax_ref(x), rtol=1e-5)


def test_host_api_python_twin_reports_what_c_sees(node_factory):
    node = node_factory("Softmax", [("x", (2, "s"), F), None], attributes={"axis": 1})
    assert HOST_API.node_input_shape(node, 0) is None and not HOST_API.node_has_input(node, 1)
    assert HOST_API.node_input_count(node) == 2 and HOST_API.node_input_element_type(node, 0) == F


# ---- kernel errors surface as exceptions, never crashes ---------------------------------------------------
@pytest.mark.parametrize(("op", "inputs", "attributes", "code", "fragment"), [
    ("Relu", [np.ones(3, np.float64)], {}, ort_abi.ErrorCode.INVALID_ARGUMENT, "element type 11"),
    ("Add", [np.ones(3, np.float32), np.ones(4, np.float32)], {}, ort_abi.ErrorCode.INVALID_ARGUMENT,
     "does not broadcast"),
    ("Add", [np.ones(3, np.float32), None], {}, ort_abi.ErrorCode.INVALID_ARGUMENT, "input 1 is missing"),
    ("Softmax", [np.ones((), np.float32)], {}, ort_abi.ErrorCode.INVALID_ARGUMENT, "rank >= 1"),
    ("Softmax", [np.ones((2, 3), np.float32)], {"axis": 0}, ort_abi.ErrorCode.INVALID_ARGUMENT, "not the last axis"),
])
def test_kernel_error_status_becomes_kernel_error(registry, example_lib, op, inputs, attributes, code, fragment,
                                                  fresh_statuses):
    with pytest.raises(KernelError, match=fragment) as info:
        run(registry, op, inputs, attributes=attributes)
    err = info.value
    assert (err.code, err.node, err.library, err.operation) == (code, f"/test/{op}", str(example_lib), "compute")
    assert fragment in err.message and str(example_lib) in str(err)


def test_create_error_names_node_and_library(registry, example_lib, fresh_statuses):
    entry = registry.find("Softmax", "", 13, CPU)
    with pytest.raises(KernelError, match="axis -2 is not supported") as info:
        entry.create_kernel(KernelInfo("/m/sm", "Softmax", attributes={"axis": -2}))
    assert (info.value.operation, info.value.node, info.value.library) == ("create", "/m/sm", str(example_lib))
    with pytest.raises(KernelError, match="INVALID_ARGUMENT"):  # wrong attribute kind reaches C as an error status
        entry.create_kernel(KernelInfo("/m/sm", "Softmax", attributes={"axis": "last"}))



def test_documented_make_build_works_in_a_copy(tmp_path, c_lib_dir):
    import pathlib
    import shutil
    import subprocess
    import sys

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    example = pathlib.Path(__file__).resolve().parents[3] / "examples" / "c-kernel-library"
    work = tmp_path / "example"
    shutil.copytree(example, work, ignore=shutil.ignore_patterns("*.so"))
    proc = subprocess.run(["make", f"PYTHON={sys.executable}", "check"], cwd=work, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Softmax declares [WorkspaceSlot(slot_id=0, size_bytes=64)]" in proc.stdout
    assert "Relu ok" in proc.stdout and "Add ok" in proc.stdout
