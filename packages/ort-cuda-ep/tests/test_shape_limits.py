"""Inputs of unknown rank and extents a kernel cannot index: Level 1, Level 2 and claims agree.

A kernel reads every present input (attention walks value with key's layout, MatMulNBits adds an
[N] bias), so a present input without a shape, or an extent past 2**31-1, leaves the workspace
unavailable (None) at both levels, and a claim on static shapes the recipe cannot size declines.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_abi import (
    Declined,
    EpIdentity,
    EpInfo,
    KernelInfo,
    KernelRegistry,
    Supported,
    WorkspaceInputShape,
    estimate_workspace,
    workspace_input_shapes,
)
from ort_cuda_ep import (
    EP_NAME,
    OP_SPECS,
    CudaExecutionProvider,
    CudaKernel,
    DeviceUnavailableError,
    declared_slots,
    estimate_bytes,
    get_profile,
)
from ort_cuda_ep._ops import find_spec
from ort_cuda_ep._workspace import launchable
from ort_graph import from_proto

F32 = TensorProto.FLOAT
BIG = (1 << 31) - 1
OMIT = "omit"
MHA_IN = ("query", "key", "value")
NBITS_IN = ("A", "B", "scales", "zero_points", "g_idx", "bias")
_N, _K, _BS = 32, 64, 16
_W = ((_N, _K // _BS, _BS // 2), (_N * (_K // _BS),))


@pytest.fixture(autouse=True)
def _no_device(monkeypatch):
    def fail(device_id=0):
        raise DeviceUnavailableError("the CUDA driver library could not be loaded: libcuda.so.1 not found")

    monkeypatch.setattr("ort_cuda_ep._ep.discover", fail)


def _node(op_type, names, shapes, **attributes):
    """One com.microsoft node; shapes per input: a tuple, None (present, no shape) or OMIT."""
    ins, infos = [], []
    for name, shape in zip(names, shapes):
        if shape == OMIT:
            ins.append("")
            continue
        ins.append(name)
        elem = TensorProto.UINT8 if name in ("B", "zero_points") else F32
        infos.append(helper.make_tensor_value_info(name, elem, None if shape is None else list(shape)))
    node = helper.make_node(op_type, ins, ["Y"], name=f"/t/{op_type}", domain="com.microsoft", **attributes)
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("Y", F32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return from_proto(model).graph.nodes[0]


def _mha(q, k, v):
    return _node("MultiHeadAttention", MHA_IN, (q, k, v), num_heads=4)


def _nbits(a, bias=OMIT):
    return _node("MatMulNBits", NBITS_IN, (a, *_W, OMIT, OMIT, bias), K=_K, N=_N, bits=4, block_size=_BS)


def _levels(node):
    """(Level-1 estimate through the registry and the host's EP handle, Level-2 declared bytes or None)."""
    ep = CudaExecutionProvider(profile="h100")
    registry = KernelRegistry()
    ep.register(registry)
    entry = registry.find(node.op_type, node.domain, 1, EP_NAME)
    handle = EpInfo(EpIdentity(EP_NAME, "cuda", 0), {"multi_processor_count": 132})
    level1 = estimate_workspace(entry, node, handle)
    spec = next(s for s in OP_SPECS if s.op_type == node.op_type)
    slots = CudaKernel(ep, spec, KernelInfo.from_node(node, ep)).declare_workspace(workspace_input_shapes(node))
    return level1, None if slots is None else sum(s.size_bytes for s in slots)


KV = (1, 600, 64)


@pytest.mark.parametrize("node, expected", [
    (lambda: _mha((1, 2, 64), KV, KV), 3584),                  # 3 splits on 132 SMs
    (lambda: _mha((1, 2, 64), KV, None), None),                # value present without a shape
    (lambda: _mha((1, 2, 64), KV, (1, 600, 1 << 40)), None),   # value extent past 2**31-1
    (lambda: _nbits((16, _K), (_N,)), 0),                      # tiled: B dequantized per tile, no workspace
    (lambda: _nbits((16, _K), None), None),                    # bias present without a shape
    (lambda: _nbits((16, _K), (1 << 40,)), None),              # bias extent past 2**31-1
    (lambda: _nbits((16, _K)), 0),                             # bias omitted: not an unknown shape
], ids=["mha", "mha-shapeless-value", "mha-huge-value", "nbits", "nbits-shapeless-bias", "nbits-huge-bias",
        "nbits-no-bias"])
def test_level1_and_level2_give_one_answer(node, expected):
    assert _levels(node()) == (expected, expected)


@pytest.mark.parametrize("node, rejected", [
    (lambda: _mha((65536, 65536, 64), (65536, 8, 64), (65536, 8, 64)), "out of range for the attention kernel"),
    (lambda: _nbits((BIG, BIG, BIG, _K)), "out of range for the matmul_nbits kernel"),
    (lambda: _nbits((16, _K), (1 << 40,)), "input 5 ('bias') has shape (1099511627776,)"),
    (lambda: _nbits((16, _K), (_N + 1,)), "bias (input 5, 'bias') shape (33,) with N=32"),
    (lambda: _nbits((16, _K), None), "input 5 ('bias') has shape None"),
    (lambda: _mha((1, 2, 64), KV, (1, 600, 1 << 40)), "input 2 ('value') has shape (1, 600, 1099511627776)"),
], ids=["mha-rows", "nbits-m", "nbits-huge-bias", "nbits-bias-not-n", "nbits-shapeless-bias", "mha-huge-value"])
def test_claims_decline_what_the_recipe_cannot_size(node, rejected):
    n = node()
    ep = CudaExecutionProvider(profile="h100")
    verdict = ep.claim(n, 1)
    assert isinstance(verdict, Declined), verdict
    assert verdict.rejected.startswith("shape: ") and rejected in verdict.rejected
    remedy = "resolve_shapes" if "has shape None" in rejected else "CPU EP"
    assert remedy in verdict.remedy and verdict.accepts


@pytest.mark.parametrize("node", [lambda: _mha((1, 2, 64), KV, KV), lambda: _nbits((16, _K), (_N,)),
                                  lambda: _nbits((BIG, _K))], ids=["mha", "nbits-bias", "nbits-m-at-the-limit"])
def test_claims_in_range_are_supported_with_their_workspace(node):
    n = node()
    ep = CudaExecutionProvider(profile="h100")
    verdict = ep.claim(n, 1)
    assert isinstance(verdict, Supported)
    assert ep.estimate(n, 1) is not None


@pytest.mark.parametrize("shapes, present, ok", [
    (((1, 2), None), None, True),                 # None without `present`: omitted
    (((1, 2), None), (True, False), True),
    (((1, 2), None), (True, True), False),        # present, unknown rank
    (((1, "s"),), None, True),                    # symbolic extents are for the envelope to judge
    (((0, None, 8),), None, True),                # unknown extents too (a known zero may still empty it)
    (((1, BIG),), None, True),
    (((1, BIG + 1),), None, False),
    (((-1, 2),), None, False),
    (((np.int64(3), 2),), None, True),
])
def test_launchable(shapes, present, ok):
    assert launchable(shapes, present) is ok


@pytest.mark.parametrize("a_dims, declared, expected", [
    ((0, "s", _K), (0, -1, _K), 0),       # M known to be 0: empty output, no workspace (not "unknown")
    ((0, None, _K), (0, -1, _K), 0),
    ((2, "s", _K), (2, -1, _K), None),    # M unknown and not zero: no estimate without ranges
    ((0, "s", _K + 1), (0, -1, _K + 1), None),  # malformed A stays unavailable
])
def test_known_zero_partial_shapes_are_empty(a_dims, declared, expected):
    spec = find_spec("MatMulNBits", "com.microsoft", 1)
    attrs = {"K": _K, "N": _N, "bits": 4, "block_size": 16}
    shapes = [a_dims, (_N, _K // 16, 8), (_N * _K // 16,)]
    prof = get_profile("h100")
    assert estimate_bytes("matmul_nbits", shapes, [1, 2, 1], attrs, prof, None, (True, True, True)) == expected
    decl = [WorkspaceInputShape.shaped(declared, 1), WorkspaceInputShape.shaped(shapes[1], 2),
            WorkspaceInputShape.shaped(shapes[2], 1)]
    assert declared_slots(spec, decl, attrs, prof) == ([] if expected == 0 else None)


@pytest.mark.parametrize("kernel, shapes, attrs", [
    ("attention", [(0, "s", 128), ("b", "L", 128), ("b", "L", 128)], {"num_heads": 2}),
    ("attention", [("b", 0, 128), ("b", "L", 128), ("b", "L", 128)], {"num_heads": 2}),
    ("gqa", [(0, "s", 128), None, None, (0, 2, "p", 16), (0, 2, "p", 16), (0,), (), (64, 8), (64, 8)],
     {"num_heads": 4, "kv_num_heads": 2}),
])
def test_attentions_with_a_known_zero_batch_or_query_need_nothing(kernel, shapes, attrs):
    prof = get_profile("h100")
    assert estimate_bytes(kernel, shapes, [1] * len(shapes), attrs, prof) == 0
    unknown = [tuple(1 if d == 0 else d for d in s) if i == 0 else s for i, s in enumerate(shapes)]
    assert estimate_bytes(kernel, unknown, [1] * len(shapes), attrs, prof) is None  # no zero: no estimate
