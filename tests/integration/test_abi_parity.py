"""The ABI parity matrix: a kernel's language does not change how it is budgeted and planned.

Rows: op x kind x signature. Columns (one test function each): the Level-1 estimate, the Level-2
slots, the memory plan (ort_memplan.plan_graph with those slots) and the outputs. Kinds:
  python -- in-tree Python kernels (parity_kernels.py) registered with KernelRegistry.add_kernel_v2;
  c      -- a pure C library (c/parity_kernels.c) built here with the system cc, loaded with
            ort_abi.load_kernel_library;
  cuda   -- ort-cuda-ep's kernels registered by CudaExecutionProvider.register; estimates and
            declarations come from a device profile, outputs only on a GPU.
All three implement ort-cuda-ep's workspace recipe (flash-decoding attention, MatMulNBits with
none on either path but the same validation, Softmax with none), and every kind reaches its estimate and
declaration through the same host path (ort_abi.estimate_workspace / ort_abi.declare_workspace).

Level 2 compares *planned* slots: a C declaration can only say "no slots" where a Python one may
return None (no declaration); the host treats both the same (nothing planned, scratch at run time).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import pathlib
import sys
from typing import Any

import attrs
import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_abi
import ort_cuda_ep
import ort_graph
import ort_memplan


def _load_kernels():
    """parity_kernels.py beside this file (import-mode=importlib gives test dirs no package)."""
    name = "_integration_parity_kernels"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, pathlib.Path(__file__).with_name("parity_kernels.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


pk = _load_kernels()
_DEVICE_EP = ort_cuda_ep.CudaExecutionProvider()  # declines everything (can_run False) without a GPU
# the recipe's device: the GPU when one is present (so declarations match what its kernels request),
# else a profile, which is all the estimate and declaration columns need
PROFILE = _DEVICE_EP.profile if _DEVICE_EP.can_run else ort_cuda_ep.get_profile("h100")
KINDS = ("python", "c", "cuda")
F32, U8 = TensorProto.FLOAT, TensorProto.UINT8
OMIT = "omit"  # an omitted optional input ('' in the node)
BIG = (1 << 31) - 1  # the largest extent a kernel can index; products of three overflow int64


@attrs.frozen
class Sig:
    """One input signature: graph shapes per input (tuple with ints / symbols / None, None for an
    unknown rank, OMIT), and the concrete shapes a run uses (None: not runnable anywhere)."""

    id: str
    shapes: tuple
    run: tuple | None = None
    profile: str | None = None  # another GPU's profile (its SM count reaches every kind through the EP)


@attrs.frozen
class Op:
    op_type: str
    domain: str
    opset: int
    inputs: tuple[tuple[str, int], ...]  # (name, elem type)
    attrs: dict
    sigs: tuple[Sig, ...]


_HID = 64
_KV = (1, 600, _HID)
ATTENTION = Op("MultiHeadAttention", "com.microsoft", 1,
               (("query", F32), ("key", F32), ("value", F32), ("bias", F32), ("key_padding_mask", TensorProto.INT32),
                ("attention_bias", F32)),
               {"num_heads": 4},
               (Sig("static", ((1, 2, _HID), _KV, _KV), ((1, 2, _HID), _KV, _KV)),  # 3 splits on 132 SMs
                Sig("static-nosplit", ((32, 2, _HID), (32, 40, _HID), (32, 40, _HID)),
                    ((32, 2, _HID), (32, 40, _HID), (32, 40, _HID))),
                Sig("static-long", ((1, 1, _HID), (1, 25600, _HID), (1, 25600, _HID)),  # 25 splits; 20 if the 0.85 efficiency cut were 0.8
                    ((1, 1, _HID), (1, 25600, _HID), (1, 25600, _HID))),
                # the SM count comes from the EP: 16 splits on 108 SMs (32 on 132); no split on 58 SMs (2 on 132)
                Sig("static-long@a100", ((1, 1, _HID), (1, 8192, _HID), (1, 8192, _HID)),
                    ((1, 1, _HID), (1, 8192, _HID), (1, 8192, _HID)), profile="a100"),
                Sig("static@l4", ((16, 1, _HID), (16, 600, _HID), (16, 600, _HID)),
                    ((16, 1, _HID), (16, 600, _HID), (16, 600, _HID)), profile="l4"),
                Sig("unknown-dims", (("batch", "seq", _HID), ("batch", "kv", _HID), ("batch", "kv", _HID)),
                    ((1, 3, _HID), (1, 300, _HID), (1, 300, _HID))),
                Sig("rank-0", ((), (1, 5, _HID), (1, 5, _HID))),
                Sig("zero-extent", ((1, 0, _HID), (1, 5, _HID), (1, 5, _HID)), ((1, 0, _HID), (1, 5, _HID), (1, 5, _HID))),
                Sig("omitted-optional", ((1, 2, _HID), _KV, _KV, OMIT, OMIT, (1, 4, 2, 600))),
                Sig("overflow", ((65536, 65536, _HID), (65536, 8, _HID), (65536, 8, _HID))),
                # inputs the recipe does not read: present with no shape at all / an extent past int32
                Sig("unknown-rank", ((1, 2, _HID), _KV, None)),
                Sig("overflow-dim", ((1, 2, _HID), _KV, (1, 600, 1 << 40)))))

_N, _K, _BS = 32, 64, 16
_W = ((_N, _K // _BS, _BS // 2), (_N * (_K // _BS),))  # packed B, scales
NBITS = Op("MatMulNBits", "com.microsoft", 1,
           (("A", F32), ("B", U8), ("scales", F32), ("zero_points", U8), ("g_idx", TensorProto.INT32), ("bias", F32)),
           {"K": _K, "N": _N, "bits": 4, "block_size": _BS},
           (Sig("static", ((2, 5, _K), *_W), ((2, 5, _K), *_W)),  # M = 10 > 8: tiled (B dequantized per tile), no workspace
            Sig("static-gemv", ((1, 3, _K), *_W), ((1, 3, _K), *_W)),
            Sig("unknown-dims", (("batch", "seq", _K), *_W), ((2, 7, _K), *_W)),
            Sig("rank-0", ((), *_W)),
            Sig("zero-extent", ((0, _K), *_W), ((0, _K), *_W)),
            Sig("omitted-optional", ((16, _K), *_W, OMIT, OMIT, (_N,)), ((16, _K), *_W, OMIT, OMIT, (_N,))),
            Sig("overflow", ((BIG, BIG, BIG, _K), *_W)),
            Sig("unknown-rank", ((16, _K), *_W, OMIT, OMIT, None)),
            Sig("overflow-dim", ((16, _K), *_W, OMIT, OMIT, (1 << 40,)))))

SOFTMAX = Op("Softmax", "", 13, (("x", F32),), {"axis": -1},
             (Sig("static", ((2, 3, 8),), ((2, 3, 8),)),
              Sig("unknown-dims", (("b", None, 8),), ((5, 4, 8),)),
              Sig("rank-0", ((),), ((),)),
              Sig("zero-extent", ((2, 0, 8),), ((2, 0, 8),)),
              # Softmax has a single input: there is no optional input to omit
              Sig("overflow", ((1 << 40, 8),))))

OPS = {op.op_type: op for op in (ATTENTION, NBITS, SOFTMAX)}


# -- the graph of one cell ------------------------------------------------------------------------
def _out_shape(op: Op, shapes: tuple) -> Any:
    first = shapes[0]
    if first is None:
        return None
    if op is NBITS:
        return (*first[:-1], _N) if len(first) else None
    return first


@functools.cache
def _model(op_type: str, sig_id: str) -> ort_graph.Model:
    op = OPS[op_type]
    sig = next(s for s in op.sigs if s.id == sig_id)
    names, infos = [], []
    for (name, elem), shape in zip(op.inputs, sig.shapes):
        if shape == OMIT:
            names.append("")
            continue
        names.append(name)
        infos.append(helper.make_tensor_value_info(name, elem, None if shape is None else list(shape)))
    out = _out_shape(op, sig.shapes)
    node = helper.make_node(op.op_type, names, ["Y"], name=f"/parity/{op.op_type}", domain=op.domain, **op.attrs)
    graph = helper.make_graph([node], f"parity_{op.op_type}_{sig_id}", infos,
                              [helper.make_tensor_value_info("Y", F32, None if out is None else list(out))])
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(op.domain, op.opset)] if op.domain else [])
    return ort_graph.from_proto(helper.make_model(graph, opset_imports=opsets))


# -- the three kinds ------------------------------------------------------------------------------
def _profile(sig: Sig | None = None) -> ort_cuda_ep.DeviceProfile:
    return ort_cuda_ep.get_profile(sig.profile) if sig is not None and sig.profile else PROFILE


@functools.cache
def _handle(profile: str | None = None) -> ort_abi.EpInfo:
    """The EP handle every kind's estimate and create call sees: identity and device properties."""
    p = ort_cuda_ep.get_profile(profile) if profile else PROFILE
    return ort_abi.EpInfo(ort_abi.EpIdentity(ort_cuda_ep.EP_NAME, "cuda", 0),
                          {"multi_processor_count": p.sm_count, "total_memory": p.memory_bytes})


@functools.cache
def _cuda_ep(profile: str | None = None) -> ort_cuda_ep.CudaExecutionProvider:
    return ort_cuda_ep.CudaExecutionProvider(profile=ort_cuda_ep.get_profile(profile) if profile else PROFILE)


@functools.cache
def _emulated_cuda_ep(profile: str | None = None) -> ort_cuda_ep.CudaExecutionProvider:
    """Without a GPU: the CUDA EP on ort_cuda_ep.testing.EmulatingRuntime, which executes every launch in
    numpy as its kernel does, for the profile's SM count (so profile signatures run too)."""
    import ort_cuda_ep._ep as ep_module
    from ort_cuda_ep.testing import EmulatingRuntime, fake_device

    name = profile or PROFILE.name
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ep_module, "discover", lambda device_id=0: fake_device(name))
        ep = ort_cuda_ep.CudaExecutionProvider()
    ep._runtime = EmulatingRuntime(name)
    return ep


@functools.cache
def _registries(c_lib: str) -> dict[str, ort_abi.KernelRegistry]:
    py = ort_abi.KernelRegistry()
    pk.register(py)
    c = ort_abi.KernelRegistry()
    ort_abi.load_kernel_library(c_lib, c)
    cuda = ort_abi.KernelRegistry()
    _cuda_ep().register(cuda)
    return {"python": py, "c": c, "cuda": cuda}


def _entry(kind: str, c_lib: str, op: Op) -> ort_abi.KernelEntry:
    ep = ort_cuda_ep.EP_NAME if kind == "cuda" else pk.EP
    entry = _registries(c_lib)[kind].find(op.op_type, op.domain, op.opset if op.domain else 21, ep)
    assert entry is not None, f"no {kind} kernel registered for {op.op_type!r}"
    assert entry.language == ("c" if kind == "c" else "python")
    return entry


def _kernel(kind: str, c_lib: str, op: Op, node: ort_graph.Node, profile: str | None = None) -> Any:
    """A kernel instance through the registry's create function. Without a GPU the CUDA EP refuses to
    create kernels (it cannot run them), so its Level-2 column uses CudaKernel with the profile."""
    entry = _entry(kind, c_lib, op)
    if kind == "cuda":
        ep = _cuda_ep(profile)
        info = ort_abi.KernelInfo.from_node(node, ep)
        if ep.can_run and profile is None:
            return entry.create_kernel(info)
        spec = next(s for s in ort_cuda_ep.OP_SPECS if s.op_type == op.op_type and s.domain == op.domain)
        return ort_cuda_ep.CudaKernel(ep, spec, info)
    return entry.create_kernel(ort_abi.KernelInfo.from_node(node, _handle(profile)))


def _planned(slots: list | None) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((s.slot_id, s.size_bytes) for s in slots or ()))


def _attempt(fn) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- a failing kind is a value that differs
        return f"raised {type(e).__module__}.{type(e).__name__}: {e}"


def _columns(kind: str, c_lib: str, op: Op, sig: Sig) -> dict[str, Any]:
    """Level-1 estimate, Level-2 planned slots and the memory plan of one kind (errors as values)."""
    model = _model(op.op_type, sig.id)
    node = model.graph.nodes[0]
    out: dict[str, Any] = {"level1": _attempt(lambda: ort_abi.estimate_workspace(_entry(kind, c_lib, op), node,
                                                                                 _handle(sig.profile)))}

    def declare():
        kernel = _kernel(kind, c_lib, op, node, sig.profile)
        try:
            return _planned(ort_abi.declare_workspace(kernel, ort_abi.workspace_input_shapes(node), node=node.name))
        finally:
            ort_abi.release_kernel(kernel)

    out["level2"] = _attempt(declare)

    def memplan():
        slots = out["level2"] if isinstance(out["level2"], tuple) else ()
        try:
            gplan = ort_memplan.plan_graph(model.graph, [node], lambda n: "gpu",
                                           workspace={(node.index, sid): size for sid, size in slots})
        except ort_memplan.MemPlanError as e:  # a graph that cannot be planned, said clearly: a value
            return ("cannot plan", type(e).__name__)
        ort_memplan.validate(gplan.plan, gplan.requests)
        return dict(gplan.plan.peak), dict(gplan.plan.offsets), dict(gplan.lower_bound)

    out["memplan"] = _attempt(memplan)
    return out


@functools.cache
def _row(c_lib: str, op_type: str, sig_id: str) -> dict[str, dict[str, Any]]:
    op = OPS[op_type]
    sig = next(s for s in op.sigs if s.id == sig_id)
    return {kind: _columns(kind, c_lib, op, sig) for kind in KINDS}


# (column, op, signature) -> (kinds whose cell fails, the exact bug)
KNOWN_BUGS: dict[tuple[str, str, str], tuple[frozenset[str] | set[str], str]] = {}


def cells(column: str, runnable_only: bool = False) -> list:
    out = []
    for op in OPS.values():
        for kind in KINDS:
            for sig in op.sigs:
                if runnable_only and sig.run is None:
                    continue
                kinds, bug = KNOWN_BUGS.get((column, op.op_type, sig.id), ((), ""))
                marks = [pytest.mark.xfail(strict=True, reason=bug)] if kind in kinds else []
                if column == "outputs" and kind == "cuda":  # on the GPU, else on the emulating runtime
                    marks.append(pytest.mark.gpu if _DEVICE_EP.can_run else pytest.mark.emulated)
                out.append(pytest.param(op.op_type, kind, sig.id, id=f"{op.op_type}-{kind}-{sig.id}", marks=marks))
    return out


def _check(column: str, what: str, c_lib, op_type: str, kind: str, sig_id: str) -> Any:
    row = _row(str(c_lib), op_type, sig_id)
    mine = row[kind][column]
    others = {k: row[k][column] for k in KINDS}
    assert all(v == mine for v in others.values()), (
        f"{what} column differs for {op_type} [{sig_id}]: {kind} gives {mine!r}; all kinds: {others!r}")
    return mine


@pytest.mark.parametrize("op_type, kind, sig_id", cells("level1"))
def test_level1_estimate(parity_lib, op_type, kind, sig_id):
    value = _check("level1", "Level-1 estimate", parity_lib, op_type, kind, sig_id)
    assert value is None or (isinstance(value, int) and value >= 0)


@pytest.mark.parametrize("op_type, kind, sig_id", cells("level2"))
def test_level2_slots(parity_lib, op_type, kind, sig_id):
    slots = _check("level2", "Level-2 slots", parity_lib, op_type, kind, sig_id)
    # one recipe: where the shapes are known, the declaration is what the estimate said
    l1 = _row(str(parity_lib), op_type, sig_id)[kind]["level1"]
    if isinstance(l1, int):
        assert sum(size for _sid, size in slots) == l1, (
            f"Level-2 slots {slots!r} of {kind} do not add up to its Level-1 estimate {l1!r}")


@pytest.mark.parametrize("op_type, kind, sig_id", cells("memplan"))
def test_memory_plan(parity_lib, op_type, kind, sig_id):
    plan = _check("memplan", "memory plan", parity_lib, op_type, kind, sig_id)
    assert not isinstance(plan, str), f"memory plan of {op_type} [{sig_id}] on {kind}: {plan}"
    if plan[0] == "cannot plan":
        return
    peak, _offsets, bound = plan
    assert peak.get("gpu", 0) >= bound.get("gpu", 0)


# -- outputs --------------------------------------------------------------------------------------
def _feeds(op: Op, sig: Sig) -> list[np.ndarray | None]:
    rng = np.random.default_rng(0)
    out = []
    for (name, elem), shape in zip(op.inputs, sig.run):
        if shape == OMIT:
            out.append(None)
        elif elem == U8:
            out.append(rng.integers(0, 256, size=shape, dtype=np.uint8))
        elif name == "scales":
            out.append((rng.random(shape, dtype=np.float32) * 0.1 + 0.01).astype(np.float32))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


def _reference(op: Op, feeds: list) -> np.ndarray:
    """Plain numpy, no splits, no workspace."""
    if op is SOFTMAX:
        x = feeds[0].astype(np.float64)
        if x.ndim == 0:
            return np.ones((), np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True)) if x.size else x
        return (e / e.sum(axis=-1, keepdims=True) if x.size else x).astype(np.float32)
    if op is NBITS:
        a, b, scales = feeds[:3]
        bias = feeds[5] if len(feeds) > 5 else None
        w = pk.dequantize(b, scales, feeds[3] if len(feeds) > 3 else None, _N, _K, _BS).astype(np.float64)
        y = a.astype(np.float64).reshape(-1, _K) @ w + (0 if bias is None else bias)
        return y.reshape(a.shape[:-1] + (_N,)).astype(np.float32)
    q, k, v = (f.astype(np.float64) for f in feeds[:3])
    B, S, hid = q.shape
    H = op.attrs["num_heads"]
    D = hid // H
    qh, kh, vh = (t.reshape(B, -1, H, D).transpose(0, 2, 1, 3) for t in (q, k, v))
    sc = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(D)
    p = np.exp(sc - sc.max(axis=-1, keepdims=True)) if sc.size else sc
    p = p / p.sum(axis=-1, keepdims=True) if sc.size else p
    return (p @ vh).transpose(0, 2, 1, 3).reshape(B, S, hid).astype(np.float32)


@pytest.mark.parametrize("op_type, kind, sig_id", cells("outputs", runnable_only=True))
def test_outputs(parity_lib, op_type, kind, sig_id):
    op = OPS[op_type]
    sig = next(s for s in op.sigs if s.id == sig_id)
    emulated = kind == "cuda" and not _cuda_ep().can_run  # CI: the kernels' launches run in numpy
    if kind == "cuda" and sig.profile and not emulated:
        pytest.skip(f"the CUDA kernels run with this GPU's SM count, not the {sig.profile} profile's")
    model = _model(op_type, sig_id)
    node = model.graph.nodes[0]
    feeds = _feeds(op, sig)
    device_ep = (_emulated_cuda_ep(sig.profile) if emulated else _cuda_ep()) if kind == "cuda" else None
    if emulated:
        spec = next(s for s in ort_cuda_ep.OP_SPECS if s.op_type == op.op_type and s.domain == op.domain)
        kernel = ort_cuda_ep.CudaKernel(device_ep, spec, ort_abi.KernelInfo.from_node(node, device_ep))
    else:
        kernel = _kernel(kind, str(parity_lib), op, node, sig.profile)
    slots = ort_abi.declare_workspace(kernel, ort_abi.workspace_input_shapes(node), node=node.name) or []
    allocator = device_ep.allocator if device_ep is not None else None
    workspace = {s.slot_id: (allocator.alloc(s.size_bytes) if allocator else np.zeros(s.size_bytes, np.uint8))
                 for s in slots}
    counters = ort_abi.ContextCounters()
    ctx = ort_abi.KernelContext(feeds, output_count=1, output_types=[F32], workspace=workspace, counters=counters,
                                node_name=node.name)
    try:
        kernel.compute(ctx)
    finally:
        ctx.close()
        ort_abi.release_kernel(kernel)
        for buf in workspace.values():
            if allocator is not None:
                allocator.free(buf)
    got, want = ctx.outputs[0], _reference(op, feeds)
    assert got.shape == want.shape and got.dtype == np.float32, (
        f"outputs column differs for {op_type} [{sig_id}]: {kind} gives {got.shape} {got.dtype}, expected {want.shape}")
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5,
                               err_msg=f"outputs column differs for {op_type} [{sig_id}] on {kind}")
    # the workspace came from where the recipe says: the plan when declared, scratch when the shapes
    # were unknown at planning time, nowhere when the recipe needs none
    run_shapes = [None if f is None else f.shape for f in feeds]
    if op is ATTENTION:
        bytes_needed = pk.attention_bytes(run_shapes, op.attrs["num_heads"], _profile(sig).sm_count)
    elif op is NBITS:
        bytes_needed = pk.nbits_bytes(run_shapes, _N, _K, 4, _BS)
    else:
        bytes_needed = 0
    if kind == "cuda":
        run_dtypes = [0 if f is None else helper.np_dtype_to_tensor_dtype(np.asarray(f).dtype) for f in feeds]
        bytes_needed = ort_cuda_ep.workspace_bytes(
            next(s for s in ort_cuda_ep.OP_SPECS if s.op_type == op_type).recipe, run_shapes, run_dtypes, op.attrs,
            device_ep.require_profile())
    expect = (0, 0) if not bytes_needed else ((1, 0) if slots else (0, 1))
    assert (counters.workspace_from_plan, counters.scratch_fallbacks) == expect, (
        f"workspace column differs for {op_type} [{sig_id}] on {kind}: (from plan, scratch) = "
        f"{(counters.workspace_from_plan, counters.scratch_fallbacks)!r}, expected {expect!r} for {bytes_needed!r} bytes")


# -- claims vs recipes (CUDA only: the other kinds are registry entries without a provider) -------
def _all_static(sig: Sig) -> bool:
    return all(s == OMIT or (s is not None and all(isinstance(d, int) for d in s)) for s in sig.shapes)


CLAIM_BUGS: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("op_type, sig_id", [
    pytest.param(op.op_type, sig.id, id=f"{op.op_type}-cuda-{sig.id}",
                 marks=[pytest.mark.xfail(strict=True, reason=CLAIM_BUGS[(op.op_type, sig.id)])]
                 if (op.op_type, sig.id) in CLAIM_BUGS else [])
    for op in OPS.values() for sig in op.sigs if _all_static(sig)])
def test_cuda_claims_only_nodes_its_recipe_can_size(op_type, sig_id):
    op = OPS[op_type]
    node = _model(op_type, sig_id).graph.nodes[0]
    opset = op.opset if op.domain else 21
    claim = _cuda_ep().claim(node, opset)
    estimate = _cuda_ep().estimate(node, opset)
    if claim.supported:
        assert estimate is not None, (
            f"claim column: the CUDA EP claims {op_type} [{sig_id}] ({claim!r}) but its recipe cannot size the "
            "workspace for these static shapes, so the kernel would fail at run time")
