"""KernelDefBuilder, KernelRegistry and the one host path for Level-1 / Level-2 calls (Python kernels)."""

from __future__ import annotations

import logging

import pytest
from onnx import TensorProto

from ort_abi import (
    DuplicateKernelError,
    EpIdentity,
    KernelDefBuilder,
    KernelDefError,
    KernelError,
    KernelInfo,
    KernelRegistry,
    RegistrationError,
    WorkspaceDeclarationError,
    WorkspaceInputShape,
    WorkspaceSlot,
    declare_workspace,
    estimate_workspace,
)

F, H, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64
CPU = "CPUExecutionProvider"


def kdef(op="Relu", start=6, end=None, ep=CPU, types=(F,), domain=""):
    b = KernelDefBuilder().op_type(op).domain(domain).since_version(start, end).ep(ep)
    if types:
        b.type_constraint("T", list(types))
    return b.build()


class Noop:
    def __init__(self, state, info):
        self.state, self.info = state, info

    def compute(self, ctx):
        pass


def test_builder_builds_a_frozen_definition():
    d = kdef("Softmax", 13, 20, types=(F, H), domain="ai.onnx")
    assert (d.op_type, d.domain, d.since_version_start, d.since_version_end, d.ep) == ("Softmax", "", 13, 20, CPU)
    assert d.constraints == {"T": (F, H)}
    assert d.describe() == "Softmax opset 13-20 on CPUExecutionProvider T=[1, 10]"


@pytest.mark.parametrize(("build", "fragment"), [
    (lambda: KernelDefBuilder().op_type(""), "op_type"),
    (lambda: KernelDefBuilder().since_version(0), "start"),
    (lambda: KernelDefBuilder().since_version(5, 4), "end"),
    (lambda: KernelDefBuilder().ep(""), "ep"),
    (lambda: KernelDefBuilder().type_constraint("T", []), "type constraint"),
    (lambda: KernelDefBuilder().type_constraint("T", [1]).type_constraint("T", [2]), "twice"),
    (lambda: KernelDefBuilder().op_type("Relu").build(), "missing since_version, ep"),
])
def test_builder_rejects_bad_input(build, fragment):
    with pytest.raises(KernelDefError, match=fragment):
        build()


@pytest.mark.parametrize(("opset", "ep", "dtypes", "expected"), [
    (6, CPU, None, "v6"), (12, CPU, None, "v6"), (13, CPU, None, "v13"), (21, CPU, None, "v13"),
    (5, CPU, None, None), (13, "CUDAExecutionProvider", None, None),
    (13, CPU, {"T": F}, "v13"), (13, CPU, {"T": I64}, None), (13, CPU, {"U": I64}, "v13"),
])
def test_find_picks_the_newest_matching_range(opset, ep, dtypes, expected):
    reg = KernelRegistry()
    reg.add_kernel_v2(kdef(start=6, end=12), Noop, "v6")
    reg.add_kernel_v2(kdef(start=13), Noop, "v13")
    entry = reg.find("Relu", "ai.onnx", opset, ep, dtypes)
    assert (entry.create_func_state if entry else None) == expected


@pytest.mark.parametrize(("second", "duplicate"), [
    (dict(start=10), True),                 # overlapping opsets, same types
    (dict(start=13, types=(F, H)), True),   # types intersect
    (dict(start=1, types=()), True),        # no constraint: overlaps everything
    (dict(start=13, types=(H,)), False),    # disjoint types
    (dict(start=1, end=5), False),          # disjoint opsets
    (dict(start=6, ep="CUDAExecutionProvider"), False),
    (dict(start=6, domain="com.x"), False),
])
def test_duplicate_registration_is_refused(second, duplicate):
    reg = KernelRegistry()
    reg.add_kernel_v2(kdef(start=6), Noop)
    if duplicate:
        with pytest.raises(DuplicateKernelError, match="overlaps Relu opset 6\\+"):
            reg.add_kernel_v2(kdef(**second), Noop)
        assert len(reg) == 1
    else:
        reg.add_kernel_v2(kdef(**second), Noop)
        assert len(reg) == 2


@pytest.mark.parametrize(("args", "fragment"), [
    (("not a def", Noop), "KernelDef"),
    ((kdef(), "not callable"), "create_func"),
    ((kdef(), Noop, None, 42), "estimate_func"),
])
def test_add_kernel_validates_roles(args, fragment):
    with pytest.raises(RegistrationError, match=fragment):
        KernelRegistry().add_kernel_v2(*args)


def test_iteration_lists_entries_with_level1_and_level2_flags():
    class WithDecl(Noop):
        def declare_workspace(self, shapes):
            return []

    reg = KernelRegistry()
    reg.add_kernel(kdef("Relu"), Noop)
    reg.add_kernel_v2(kdef("Softmax", 13), WithDecl, None, lambda api, node, ep: 0)
    reg.add_kernel_v2(kdef("Add", 7), lambda state, info: Noop(state, info))
    rows = [(e.ep, e.op_type, e.has_estimate, e.declares_workspace, e.language) for e in reg]
    assert rows == [(CPU, "Relu", False, False, "python"), (CPU, "Softmax", True, True, "python"),
                    (CPU, "Add", False, None, "python")]
    entry = reg.find("Add", "", 7, CPU)
    kernel = entry.create_kernel(KernelInfo("n", "Add"))
    assert isinstance(kernel, Noop) and entry.declares_workspace is False


def test_create_kernel_passes_state_and_info_and_checks_the_result():
    reg = KernelRegistry()
    entry = reg.add_kernel_v2(kdef(), Noop, {"k": 1})
    info = KernelInfo("node0", "Relu", attributes={"alpha": 0.5})
    kernel = entry.create_kernel(info)
    assert kernel.state == {"k": 1} and kernel.info.attr("alpha") == 0.5
    bad = reg.add_kernel_v2(kdef("Bad"), lambda state, info: None)
    with pytest.raises(KernelError, match="compute"):
        bad.create_kernel(info)


@pytest.mark.parametrize(("estimate", "expected"), [
    (lambda api, node, ep: 4096, 4096),
    (lambda api, node, ep: 0, 0),
    (lambda api, node, ep: None, None),
    (lambda api, node, ep: -1, None),
    (lambda api, node, ep: 1.5, None),
    (lambda api, node, ep: 1 / 0, None),
    (None, None),
])
def test_estimate_workspace_one_path(estimate, expected, node_factory, caplog):
    entry = KernelRegistry().add_kernel_v2(kdef(), Noop, None, estimate)
    node = node_factory("Relu", [("x", (2, 3), F)])
    with caplog.at_level(logging.INFO, logger="ort_abi"):
        assert estimate_workspace(entry, node, EpIdentity(CPU)) == expected


def test_estimate_gets_the_host_api_node_and_ep(node_factory):
    seen = {}

    def estimate(api, node, ep):
        seen.update(shape=api.node_input_shape(node, 0), axis=api.node_attribute(node, "axis", "int", -1),
                    ep=api.ep_name(ep), sms=api.ep_device_property(ep, "sms", 7))
        return 1

    entry = KernelRegistry().add_kernel_v2(kdef("Softmax", 13), Noop, None, estimate)
    assert estimate_workspace(entry, node_factory("Softmax", [("x", (2, 5), F)], attributes={"axis": 1}),
                              EpIdentity("X", "cuda", 1)) == 1
    assert seen == {"shape": (2, 5), "axis": 1, "ep": "X", "sms": 7}


class Declares:
    def __init__(self, result):
        self.result = result

    def compute(self, ctx):
        pass

    def declare_workspace(self, shapes):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.mark.parametrize(("kernel", "expected"), [
    (Noop(None, None), None),
    (Declares(None), None),
    (Declares([]), []),
    (Declares([WorkspaceSlot(0, 64), WorkspaceSlot(3, 0)]), [WorkspaceSlot(0, 64), WorkspaceSlot(3, 0)]),
])
def test_declare_workspace_one_path(kernel, expected):
    assert declare_workspace(kernel, [WorkspaceInputShape.shaped((2, 3))]) == expected


@pytest.mark.parametrize(("result", "error", "fragment"), [
    ([WorkspaceSlot(0, 1), WorkspaceSlot(0, 2)], WorkspaceDeclarationError, "twice"),
    ([WorkspaceSlot(8, 1)], WorkspaceDeclarationError, "ids must be"),
    ([WorkspaceSlot(0, -1)], WorkspaceDeclarationError, "size -1"),
    ([(0, 1)], WorkspaceDeclarationError, "WorkspaceSlot"),
    ([WorkspaceSlot(i, 1) for i in range(9)], WorkspaceDeclarationError, "more than the maximum"),
    (RuntimeError("boom"), KernelError, "boom"),
])
def test_declare_workspace_rejects_bad_declarations(result, error, fragment):
    with pytest.raises(error, match=fragment):
        declare_workspace(Declares(result), [], node="n")


def test_python_host_api_reads_absent_attributes_as_the_c_getters_do(node_factory):
    from ort_abi import HOST_API
    from ort_abi._hostapi import AttributeError_

    node = node_factory("Conv", [("x", (1, 3, 8, 8), F)], attributes={"group": 1})
    assert HOST_API.node_attribute(node, "pads", "ints") is None  # C: OK + NULL
    assert HOST_API.node_attribute(node, "auto_pad", "string") is None
    assert HOST_API.node_attribute(node, "pads", "ints", [0, 0, 0, 0]) == [0, 0, 0, 0]
    with pytest.raises(AttributeError_, match="no attribute 'alpha'"):
        HOST_API.node_attribute(node, "alpha", "float")  # a scalar has no null: an error, as in C
    with pytest.raises(AttributeError_, match="not of kind 'ints'"):
        HOST_API.node_attribute(node, "group", "ints")
