"""Helpers for testing kernels of this provider one node at a time (used by the package's tests; public so a
third-party kernel library can test its kernels the same way).

    model = one_node_model(node, inputs, outputs, initializers)
    outputs = run_one_node(model, feeds, "C")       # the entry the provider picks, which must be the C kernel
    reference = run_one_node(model, feeds, "numpy")  # the in-tree numpy kernel
    outputs = run_one_node(model, feeds, "C", threads=3)  # the kernel on exactly 3 intra-op threads
    outputs = same_bits_as_numpy(model, feeds)      # the C kernel's outputs, asserted bitwise equal to numpy's
    x = random_bits((2, 3), np.float16)             # any bit pattern of the type (NaN payloads too)
    model = control_flow_model("loop_in_loop")      # Loop / If / Scan models with a trip count input M
    language = chosen_language(model)               # 'C' or 'numpy': the kernel the provider picks for the node
    want = onnxruntime_outputs(model, feeds)        # onnxruntime's CPU provider at 1 thread (the peer)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, ValueInfoProto, helper

import ort_abi
import ort_graph

from . import _cbuild
from . import _ckernels as c_kernels
from ._control_models import control_flow_model
from ._provider import CpuExecutionProvider, builtin_registry
from ._threads import intra_op_thread_scope

EP = "CPUExecutionProvider"


class CLibraryUnavailable(Exception):
    """No C compiler on this machine: the C kernels cannot be built (tests skip with this reason)."""


def require_c_library() -> None:
    """Build the C kernel library in place if it is missing; CLibraryUnavailable where no compiler can."""
    if not c_kernels.library_path().is_file():
        try:
            _cbuild.compiler()
        except _cbuild.BuildFailed as e:
            raise CLibraryUnavailable(f"C kernels cannot be built here: {e}") from e
        _cbuild.build()
        c_kernels._load.cache_clear()
    if c_kernels.c_registry() is None:
        raise AssertionError(c_kernels.status())


def one_node_model(node: NodeProto, inputs: Sequence[ValueInfoProto], outputs: Sequence[ValueInfoProto],
                   initializers: Sequence[TensorProto] = ()) -> ModelProto:
    """A model of one node (opsets: ai.onnx 22, com.microsoft 1)."""
    graph = helper.make_graph([node], "g", list(inputs), list(outputs), initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def run_one_node(model: ModelProto, feeds: Mapping[str, np.ndarray], language: str, *,
                 threads: int | None = None, prepack: bool = False,
                 counters: ort_abi.ContextCounters | None = None) -> dict[str, Any]:
    """The model's one node through the CPU provider (`language` 'C': the entry it picks, which must be the C
    kernel; 'numpy': the in-tree kernel), outputs by name. `threads` None: inside the provider's run scope (whose
    thread pools give a lone C kernel one thread, see `CpuExecutionProvider.run_scope`); n: inside
    `intra_op_thread_scope(n)` instead, so the kernel gets exactly n intra-op threads. `prepack`: the kernel first
    packs its constant inputs as a session does (declare_prepacked, prepack_weight), and at least one must be packed.
    `counters`: the context's (no workspace is planned here: `scratch_bytes` is what the kernel asked for)."""
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    assert ep.claim(node).__class__.__name__ == "Supported", ep.claim(node)
    if language == "C":
        entry = ep.entry(node)
        assert c_kernels.kernel_language(entry) == "C"
    else:
        entry = builtin_registry(EP).find(node.op_type, node.domain, ep.opset(node), EP)
        assert c_kernels.kernel_language(entry) == "numpy"
    values = {name: t.numpy() for name, t in m.graph.initializers.items()} | dict(feeds)
    kernel = entry.create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    if prepack:
        shapes = ort_abi.workspace_input_shapes(node)
        packed = [ort_abi.prepack_weight(kernel, i, values[n], ort_abi.declare_prepacked(kernel, shapes, i), node=node.name)
                  for i, n in enumerate(node.inputs) if n in m.graph.initializers]
        assert any(packed), f"node {node.name!r}: no constant input was pre-packed"
    types = [m.graph.values[o].dtype if o else TensorProto.FLOAT for o in node.outputs]
    ctx = ort_abi.KernelContext([values[n] if n else None for n in node.inputs], output_count=len(node.outputs),
                                output_types=types, counters=counters)
    with ep.run_scope() if threads is None else intra_op_thread_scope(threads):
        kernel.compute(ctx)
    if hasattr(kernel, "release"):
        kernel.release()
    return {name: ctx.outputs[i] for i, name in enumerate(node.outputs) if name}


def same_bits_as_numpy(model: ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The C kernel's outputs, asserted equal in shape, type and every byte to the numpy kernel's."""
    got, want = run_one_node(model, feeds, "C"), run_one_node(model, feeds, "numpy")
    assert got.keys() == want.keys()
    for name, value in got.items():
        ref = want[name]
        assert value.shape == ref.shape and value.dtype == ref.dtype, (name, value.shape, value.dtype, ref.shape, ref.dtype)
        assert np.ascontiguousarray(value).tobytes() == np.ascontiguousarray(ref).tobytes(), name
    return got


def random_bits(shape: Sequence[int], dtype: Any, seed: int = 0) -> np.ndarray:
    """An array of random bytes viewed as `dtype` (every bit pattern, NaN payloads included); bool as 0/1."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(tuple(shape)) < 0.5)
    raw = rng.integers(0, 256, size=int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(tuple(shape))


def c_kernel_workspace(model: ModelProto, input_shapes: Sequence[tuple[int, ...]],
                       elem_type: int = TensorProto.FLOAT) -> tuple[int | None, list[Any] | None]:
    """(Level-1 estimate, Level-2 declaration for `input_shapes`) of the one node of `model` as the CPU provider
    takes it; asserts that the provider gives the node its C kernel."""
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    entry = ep.entry(node)
    assert c_kernels.kernel_language(entry) == "C", f"{node.op_type} did not get its C kernel"
    kernel = entry.create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    try:
        slots = ort_abi.declare_workspace(kernel, [ort_abi.WorkspaceInputShape.shaped(s, elem_type)
                                                   for s in input_shapes])
    finally:
        kernel.release()
    return ort_abi.estimate_workspace(entry, node, ep), slots


def compute_over_input(model: ModelProto, feeds: Mapping[str, np.ndarray], out_index: int = 0) -> np.ndarray:
    """The one node of `model` computed by its C kernel with its output written over input `out_index` (what a
    memory plan that reuses the input's block in place does): the inputs are copies of `feeds` (an input not
    fed is the graph's initializer), the output is that copy viewed in the output's shape."""
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    entry = ep.entry(node)
    assert c_kernels.kernel_language(entry) == "C", f"{node.op_type} did not get its C kernel"
    kernel = entry.create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    arrays = [np.array(feeds[n]) if n in feeds else m.graph.initializers[n].numpy() for n in node.inputs]
    buffer = arrays[out_index]
    out_type = m.graph.values[node.outputs[0]].dtype
    ctx = ort_abi.KernelContext(arrays, output_count=1, output_types=[out_type],
                                output_allocator=lambda index, shape, dtype: buffer.reshape(shape))
    try:
        kernel.compute(ctx)
    finally:
        kernel.release()
    out = ctx.outputs[0]
    assert np.shares_memory(out, buffer) and out.__array_interface__["data"][0] == buffer.__array_interface__["data"][0]
    return out


def chosen_language(model: ModelProto) -> str:
    """'C' or 'numpy' (or a library's language): the kernel the CPU provider picks for the model's first node."""
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    return c_kernels.kernel_language(ep.entry(m.graph.nodes[0]))


def onnxruntime_outputs(model: ModelProto, feeds: Mapping[str, np.ndarray], *, optimize: bool = True) -> list[Any]:
    """The model's outputs from onnxruntime's CPU provider at 1 thread (optimize False: its graph optimizations
    off, so the node runs as written)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=[EP]).run(None, dict(feeds))


__all__ = ["CLibraryUnavailable", "c_kernel_workspace", "chosen_language", "compute_over_input", "one_node_model",
           "onnxruntime_outputs", "random_bits", "require_c_library", "run_one_node", "same_bits_as_numpy",
           "control_flow_model"]
