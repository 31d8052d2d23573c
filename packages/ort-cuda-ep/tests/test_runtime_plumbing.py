"""CudaRuntime / CudaKernel plumbing against a recording stand-in for cuda.bindings.driver: the real
cubins are loaded, launches get (values, ctypes) tuples, copies are explicit, and every device byte
allocated during a call is freed through ort-abi's allocator. (Kernels do not execute here.)"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ort_cuda_ep.testing import RecordingDriver


@pytest.fixture
def ep(recording_ep):
    return recording_ep  # tests/conftest.py


def _launches(ep):
    return [c[1] for c in ep.runtime._driver.calls if c[0] == "launch"]


def test_elementwise_round_trip_is_explicit_and_leak_free(ep):
    a, b = np.ones((4, 8), np.float32), np.ones(8, np.float32)
    (y,), ctx = ep.run_op("Add", [a, b])
    calls = ep.runtime._driver.calls
    assert [c[0] for c in calls] == ["HtoD", "HtoD", "launch", "DtoH"]
    assert y.shape == (4, 8) and y.dtype == np.float32
    assert ep.allocator.bytes_in_use == 0 and ep.runtime._driver.memory == {}


def test_attention_scratch_workspace_is_freed_and_counted(ep):
    q, k = np.zeros((1, 1, 128), np.float32), np.zeros((1, 4096, 128), np.float32)
    (o,), ctx = ep.run_op("MultiHeadAttention", [q, k, k.copy()], {"num_heads": 2}, domain="com.microsoft", opset=1,
                          node_name="mha")
    assert _launches(ep) == ["attn_split_f32", "attn_combine_f32"]
    source, used = ep.runtime.counters.last["mha"]
    assert source == "scratch" and used == 8704 and ctx.counters.scratch_bytes == 8704
    assert ep.allocator.bytes_in_use == 0 and ep.runtime._driver.memory == {}


def test_planned_device_workspace_is_used_without_scratch(ep):
    planned = ep.allocator.alloc(8704)
    q, k = np.zeros((1, 1, 128), np.float32), np.zeros((1, 4096, 128), np.float32)
    _, ctx = ep.run_op("MultiHeadAttention", [q, k, k.copy()], {"num_heads": 2}, domain="com.microsoft", opset=1,
                       workspace={0: planned}, node_name="mha")
    assert ep.runtime.counters.last["mha"] == ("planned", 8704)
    assert (ctx.counters.workspace_from_plan, ctx.counters.scratch_fallbacks) == (1, 0)
    ep.allocator.free(planned)
    assert ep.allocator.bytes_in_use == 0


def test_matmul_nbits_tiled_path_plumbing(ep):
    m, n, k, bs = 16, 64, 64, 32
    inputs = [np.zeros((m, k), np.float32), np.zeros((n, k // bs, bs // 2), np.uint8), np.ones(n * k // bs, np.float32)]
    (y,), _ = ep.run_op("MatMulNBits", inputs, {"N": n, "K": k, "bits": 4, "block_size": bs}, domain="com.microsoft",
                        opset=1, node_name="q")
    assert y.shape == (m, n) and _launches(ep) == ["mnb4_tiled_f32"]
    assert ep.runtime.counters.last["q"] == ("none", 0)  # B is dequantized per tile in shared memory
    assert ep.runtime._driver.memory == {}


def test_double_free_and_foreign_free_are_refused(ep):
    from ort_abi import DoubleFreeError, HostAllocator, OwnershipError

    arr = ep.to_device(np.arange(4, dtype=np.float32))
    assert np.array_equal(ep.to_host(arr), np.arange(4, dtype=np.float32))
    ep.runtime.release(arr)
    with pytest.raises(DoubleFreeError):
        ep.runtime.release(arr)
    host_buf = HostAllocator().alloc(16)
    with pytest.raises(OwnershipError):
        ep.allocator.free(host_buf)


def test_host_planned_workspace_is_not_used_by_a_device_kernel(ep):
    q, k = np.zeros((1, 1, 128), np.float32), np.zeros((1, 4096, 128), np.float32)
    _, ctx = ep.run_op("MultiHeadAttention", [q, k, k.copy()], {"num_heads": 2}, domain="com.microsoft", opset=1,
                       workspace={0: np.zeros(1 << 16, np.uint8)}, node_name="mha")
    assert ep.runtime.counters.last["mha"] == ("scratch", 8704)
    assert (ctx.counters.workspace_from_plan, ctx.counters.workspace_misses, ctx.counters.scratch_fallbacks) == (0, 1, 1)


def test_device_inputs_pass_through_without_copies(ep):
    a = ep.to_device(np.ones((3, 4), np.float32))
    ep.runtime._driver.calls.clear()
    (y,), _ = ep.run_op("Relu", [a])
    assert [c[0] for c in ep.runtime._driver.calls] == ["launch", "DtoH"]
    ep.runtime.release(a)
    assert ep.allocator.bytes_in_use == 0


def test_gpu_check_script_runs_end_to_end_on_the_recording_driver(ep, tmp_path, monkeypatch):
    """A smoke run of gpu_check.py's benchmark half (its test half needs a real GPU); sessions it builds
    run on another recording driver (kernels are not executed, so only the plumbing is checked)."""
    from ort_cuda_ep.testing import install_driver

    session_driver = install_driver(monkeypatch, RecordingDriver())
    import importlib.util
    import json
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ep._runtime._driver = RecordingDriver()
    out = tmp_path / "r.json"
    assert mod.main(["--quick", "--skip-tests", "--json", str(out)], ep=ep) == 0
    report = json.loads(out.read_text())
    kernels = [r["kernel"] for r in report["kernels"]]
    assert len(kernels) == 26 and all(r["ms"] == 0.5 for r in report["kernels"])
    assert kernels[-9].startswith("GQA fp16") and kernels[-1].startswith("PackedMultiHeadAttention fp16")
    # the changed kernels' cases: the fp16 tiled MatMulNBits used no workspace, the GQA request is its recipe
    assert list(report["nbits_tiled_workspace"].values()) == [["none", 0]]
    (gqa,) = report["gqa_workspace"].values()
    assert gqa["used"][1] == gqa["recipe_bytes"]
    assert len(report["conv_workspace"]) == 6 and all(v == ["none", 0] for v in report["conv_workspace"].values())
    packed = report["packed_attention_workspace"]  # the one 256-byte-aligned root: the projection
    assert packed["used"] == ["planned", packed["recipe_bytes"]] and packed["recipe_bytes"] == 2 * 8 * 3 * 64
    assert report["leaked_bytes"] == 0
    try:
        import ort_session  # noqa: F401
    except ImportError:
        assert report["sessions"] == []  # ort-cuda-ep alone: the session half is skipped
    else:
        (row,) = report["sessions"]
        assert row["cuda_nodes"] > 100 and row["cuda_allocations"] == 0 == row["cpu_allocations"]
        assert row["device_memory"]["peak"] <= row["device_memory"]["capacity"] == 1 << 30
        assert session_driver.memory == {}  # every session closed



@pytest.mark.parametrize("kind,args", [("mha", (1, 1, 13824)), ("mha", (1, 1, 13825)), ("mha", (2, 3, 128)),
                                       ("nbits", (1,)), ("nbits", (16,)), ("nbits", (0,))])
def test_level1_equals_level2_equals_runtime(ep, kind, args, models):
    """The same recipe answers the estimate, the declaration and the run-time request."""
    from ort_abi import declare_workspace, workspace_input_shapes

    if kind == "mha":
        b, s, kv = args
        node = models.mha(b, s, kv).graph.nodes[0]
        feeds = [np.zeros((b, s, 128), np.float32), np.zeros((b, kv, 128), np.float32), np.zeros((b, kv, 128), np.float32)]
    else:
        (m,) = args
        node = models.nbits(m).graph.nodes[0]
        g = node.graph
        feeds = [np.zeros((m, 128), np.float32), g.initializers["B"].numpy(), g.initializers["scales"].numpy()]
    level1 = ep.estimate(node, 1)
    kernel = ep.create_kernel(node, 1)
    level2 = sum(s.size_bytes for s in declare_workspace(kernel, workspace_input_shapes(node), node=node.name))
    attrs = {k: a.value for k, a in node.attributes.items()}
    ep.run_op(node.op_type, feeds, attrs, domain="com.microsoft", opset=1, node_name=node.name)
    runtime = ep.runtime.counters.last[node.name][1]
    assert level1 == level2 == runtime


def test_float16_round_trip(ep):
    a = np.arange(6, dtype=np.float16).reshape(2, 3)
    (y,), ctx = ep.run_op("Mul", [a, a])
    assert y.dtype == np.float16 and y.shape == (2, 3)
    assert [c[1] for c in ep.runtime._driver.calls if c[0] == "launch"] == ["binary_f16"]
    assert ep.allocator.bytes_in_use == 0


def _matmul_kernel(ep):
    from ort_abi import KernelInfo
    from ort_cuda_ep._kernel import CudaKernel
    from ort_cuda_ep._ops import find_spec

    return CudaKernel(ep, find_spec("MatMul", "", 13), KernelInfo("mm", "MatMul", "", {}, 2, 1))


def test_outputs_are_written_in_place_into_the_tensors_the_context_allocates(ep):
    """A session's planned block: no device allocation, no copy, the launch writes there."""
    from ort_abi import DeviceTensor, KernelContext

    arena = ep.allocator.alloc(1024)
    a, b = ep.to_device(np.ones((4, 8), np.float32)), ep.to_device(np.ones(8, np.float32))
    driver = ep.runtime._driver
    pointers: list[int] = []
    real_launch = driver.cuLaunchKernel

    def launch(fn, *grid_block_args):
        values, types = grid_block_args[-2]
        pointers.extend(v for v, t in zip(values, types) if t is ctypes.c_void_p)
        return real_launch(fn, *grid_block_args)

    driver.cuLaunchKernel = launch
    driver.calls.clear()
    allocs = ep.allocator.alloc_count
    ctx = KernelContext([a, b], output_count=1, output_types=[np.float32],
                        output_allocator=lambda i, shape, dtype: DeviceTensor(arena.view(64, 16), shape, dtype))
    _matmul_kernel(ep).compute(ctx)
    out = ctx.outputs[0]
    assert out.shape == (4,) and out.ptr == arena.ptr + 64  # numpy's 1-D result shape, in the planned block
    assert arena.ptr + 64 in pointers and ep.allocator.alloc_count == allocs
    assert [c[0] for c in driver.calls] == ["launch"]  # no host <-> device or device <-> device copy
    for t in (a, b):
        ep.runtime.release(t)
    ep.allocator.free(arena)
    assert ep.allocator.bytes_in_use == 0


def test_an_output_on_another_device_is_refused_with_the_device_named(ep):
    from ort_abi import DeviceTensor, KernelContext, NullDeviceAllocator
    from ort_cuda_ep import CudaEpError

    other = NullDeviceAllocator()
    foreign = other.alloc(64)
    a, b = ep.to_device(np.ones((2, 2), np.float32)), ep.to_device(np.ones((2, 2), np.float32))
    ctx = KernelContext([a, b], output_count=1, output_types=[np.float32],
                        output_allocator=lambda i, shape, dtype: DeviceTensor(foreign.view(0, 16), shape, dtype))
    with pytest.raises(CudaEpError, match="allocated on null:0, not on this EP's cuda:0"):
        _matmul_kernel(ep).compute(ctx)
    for t in (a, b):
        ep.runtime.release(t)
    assert ep.allocator.bytes_in_use == 0
