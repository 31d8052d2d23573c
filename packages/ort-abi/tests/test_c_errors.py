"""Every error path of loading C libraries and running C kernels: clear exceptions, no crash, no leaks."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
from onnx import TensorProto

import ort_abi
from ort_abi import (
    AbiVersionMismatchError,
    DuplicateKernelError,
    EpIdentity,
    EpInfo,
    ErrorCode,
    InputState,
    KernelContext,
    KernelError,
    KernelInfo,
    KernelLibraryError,
    KernelRegistry,
    LibraryNotFoundError,
    MissingSymbolError,
    RegistrationFailedError,
    WorkspaceDeclarationError,
    WorkspaceInputShape,
    WorkspaceSlot,
    declare_workspace,
    estimate_workspace,
    load_kernel_library,
)

F = TensorProto.FLOAT


@pytest.fixture
def reg(misbehaving_lib):
    r = KernelRegistry()
    load_kernel_library(misbehaving_lib, r)
    return r


def kernel(reg, op, name="/t/n"):
    return reg.find(op, "com.test", 1, "TestEP").create_kernel(KernelInfo(name, op, input_count=1, output_types=(F,)))


def compute(k, *inputs, **kw):
    ctx = KernelContext(list(inputs) or [np.ones(4, np.float32)], output_types=[F], **kw)
    k.compute(ctx)
    return ctx


# ---- loading ---------------------------------------------------------------------------------------------------
def test_missing_file(tmp_path):
    with pytest.raises(LibraryNotFoundError, match="does not exist"):
        load_kernel_library(tmp_path / "nope.so", KernelRegistry())


def test_not_a_shared_object(tmp_path, c_lib_dir):
    junk = tmp_path / "junk.so"
    junk.write_text("not an ELF file")
    with pytest.raises(KernelLibraryError, match="cannot load kernel library"):
        load_kernel_library(junk, KernelRegistry())


@pytest.mark.parametrize(("define", "error", "fragment"), [
    ("NO_VERSION", MissingSymbolError, "ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION"),
    ("BAD_VERSION", AbiVersionMismatchError, "ABI version 99"),
    ("NO_ENTRY", MissingSymbolError, "'OrtRegisterKernels'"),
])
def test_load_errors(misbehaving_variant, define, error, fragment):
    reg = KernelRegistry()
    with pytest.raises(error, match=fragment):
        load_kernel_library(misbehaving_variant(define), reg)
    assert len(reg) == 0


def test_custom_entry_point_name(misbehaving_variant, fresh_statuses):
    reg = KernelRegistry()
    lib = load_kernel_library(misbehaving_variant("NO_ENTRY"), reg, entry_point="MyRegister")
    assert lib.entry_point == "MyRegister" and len(reg) == len(lib.entries) == 25


def test_duplicate_registration_rolls_back(example_lib, fresh_statuses):
    reg = KernelRegistry()
    load_kernel_library(example_lib, reg)
    before = list(reg)
    with pytest.raises(DuplicateKernelError, match="duplicate registration: Relu"):
        load_kernel_library(example_lib, reg)
    assert list(reg) == before


def test_failing_registration_rolls_back(misbehaving_variant, fresh_statuses):
    reg = KernelRegistry()
    with pytest.raises(RegistrationFailedError, match="registration refused on purpose") as info:
        load_kernel_library(misbehaving_variant("FAIL_REGISTRATION"), reg)
    assert info.value.code == ErrorCode.EP_FAIL and len(reg) == 0


def test_ignored_host_error_fails_the_load(misbehaving_variant, fresh_statuses):
    reg = KernelRegistry()
    with pytest.raises(RegistrationFailedError, match="ignored a failing host call.*create_func is NULL"):
        load_kernel_library(misbehaving_variant("IGNORE_ERROR"), reg)
    assert len(reg) == 0


@pytest.mark.parametrize(("variant", "failed_call"), [
    ("IGNORE_ADD_ERROR", "KernelDefBuilder_Build returned INVALID_ARGUMENT: kernel definition is missing op_type"),
    ("IGNORE_TYPE_CONSTRAINT_ERROR", "KernelDefBuilder_AddTypeConstraint returned INVALID_ARGUMENT"),
])
def test_a_library_that_drops_a_failed_host_call_is_refused(misbehaving_variant, fresh_statuses, variant, failed_call):
    reg = KernelRegistry()
    with pytest.raises(RegistrationFailedError, match="returned success .* but ignored a failing host call") as info:
        load_kernel_library(misbehaving_variant(variant), reg)
    assert failed_call in str(info.value)
    assert len(reg) == 0


# ---- statuses --------------------------------------------------------------------------------------------------
def test_foreign_status_pointer_raises_without_dereferencing(reg, fresh_statuses):
    with pytest.raises(KernelError, match="0x1234, which is not a live status") as info:
        compute(kernel(reg, "BadStatus"))
    assert info.value.code == ErrorCode.RUNTIME_EXCEPTION


def test_double_release_is_recorded_not_fatal(reg, fresh_statuses):
    before = len(ort_abi.status_misuse())
    compute(kernel(reg, "DoubleRelease"))
    misuse = ort_abi.status_misuse()[before:]
    assert len(misuse) == 1 and "not a live status" in misuse[0]


def test_check_releases_each_status_exactly_once(fresh_statuses):
    from ort_abi._status import STATUSES

    st = STATUSES.create(ErrorCode.FAIL, "x")
    with pytest.raises(KernelError, match="x"):
        ort_abi.check(st, node="n", library="l")
    with pytest.raises(KernelError, match="not a live status"):  # a second check cannot see it again
        ort_abi.check(st)
    ort_abi.check(None)


# ---- create ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("op", "error", "fragment"), [
    ("NullCompute", KernelError, "NULL Compute or Release"),
    ("TooNew", AbiVersionMismatchError, "ort_version_supported=99"),
    ("CreateFails", KernelError, "/t/create-me"),
    ("NoKernel", KernelError, "no kernel"),
])
def test_create_errors(reg, misbehaving_lib, op, error, fragment, fresh_statuses):
    released = ctypes.CDLL(str(misbehaving_lib)).test_released_count
    gc.collect()  # kernels of earlier tests held in reference cycles (tracebacks) are released now, not below
    before = released()
    with pytest.raises(error, match=fragment) as info:
        kernel(reg, op, name="/t/create-me")
    if isinstance(info.value, KernelError):
        assert info.value.library == str(misbehaving_lib) and info.value.node == "/t/create-me"
    if op in ("NullCompute", "TooNew"):
        assert released() == before + 1  # the rejected kernel was still released, once


def test_create_func_state_reaches_c(reg):
    kernel(reg, "State").release()


def test_release_is_called_exactly_once(reg, misbehaving_lib):
    released = ctypes.CDLL(str(misbehaving_lib)).test_released_count
    k = kernel(reg, "V2NullDeclare")
    before = released()
    k.release()
    k.release()
    assert released() == before + 1 and k.released
    with pytest.raises(ort_abi.AbiError, match="released"):
        compute(k)


# ---- compute ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("op", "fragment"), [
    ("WrongHandle", "not a live handle"),
    ("BadOutput", "output index 5 out of range"),
    ("NegativeOutput", r"output 0 requested with shape \[-2, 4\]: a negative dimension; every extent must be >= 0"),
    ("InputWrite", "read-only"),
])
def test_host_api_misuse_comes_back_as_an_error_status(reg, op, fragment, fresh_statuses):
    ctx = KernelContext([np.ones(4, np.float32)], output_types=[F])
    with pytest.raises(KernelError, match=fragment) as info:
        kernel(reg, op).compute(ctx)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT and info.value.operation == "compute"
    assert ctx.outputs == [None]  # nothing was allocated for a refused request


def test_a_python_kernel_asking_for_a_negative_output_dimension_is_refused_naming_the_node():
    ctx = KernelContext([np.ones(4, np.float32)], output_types=[F], node_name="/t/n",
                        output_allocator=lambda *a: pytest.fail("allocated a negative shape"))
    with pytest.raises(ValueError, match=r"node '/t/n': output 0 requested with shape \[3, -1\]: a negative"):
        ctx.output(0, (3, -1))
    assert ctx.outputs == [None] and not ctx.violations


# ---- Level 2 ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["V1", "V2NullDeclare"])
def test_kernels_without_a_declaration_are_skipped_and_fall_back(reg, op, fresh_statuses):
    entry = reg.find(op, "com.test", 1, "TestEP")
    k = entry.create_kernel(KernelInfo("/t/old", op))
    assert entry.declares_workspace is False and not k.has_declaration
    assert declare_workspace(k, [WorkspaceInputShape.shaped((4,))]) is None
    ctx = compute(k)  # nothing planned: the kernel gets NULL and uses scratch
    assert (ctx.counters.workspace_misses, ctx.counters.scratch_fallbacks) == (1, 1)
    planned = np.zeros(16, np.uint8)
    ctx = compute(k, workspace={0: planned})
    assert ctx.counters.workspace_from_plan == 1 and (planned == 7).all()
    k.release()


def test_declaration_overflow_and_failure(reg, fresh_statuses):
    with pytest.raises(WorkspaceDeclarationError, match="reported 9 slots"):
        declare_workspace(kernel(reg, "Overflow"), [])
    with pytest.raises(KernelError, match="cannot declare") as info:
        declare_workspace(kernel(reg, "DeclareFails"), [], node="/t/n")
    assert info.value.code == ErrorCode.EP_FAIL and info.value.operation == "DeclareWorkspaceRequirements"


def test_input_shapes_cross_the_abi_in_all_three_states(reg, fresh_statuses):
    shapes = [WorkspaceInputShape.shaped((2, 3, 4), F), WorkspaceInputShape.missing(),
              WorkspaceInputShape.unshaped(TensorProto.INT64), WorkspaceInputShape.shaped(()),
              WorkspaceInputShape.shaped((5, 0)), WorkspaceInputShape.shaped((-1, 6), TensorProto.FLOAT16)]
    slots = declare_workspace(kernel(reg, "Echo"), shapes)

    def echo(s):  # what d_echo in misbehaving.c encodes
        rank = s.rank or 0
        prod = int(np.prod(s.dims)) if s.dims else 1
        return int(s.state) * 1000000 + rank * 10000 + (prod + 1 if rank else 0) + s.elem_type * 100000000

    assert slots == [WorkspaceSlot(i, echo(s)) for i, s in enumerate(shapes)]
    assert [s.state for s in shapes][:3] == [InputState.SHAPED, InputState.MISSING, InputState.UNSHAPED]


# ---- Level 1 ---------------------------------------------------------------------------------------------------
def test_estimate_reads_every_attribute_kind(reg, node_factory, fresh_statuses):
    node = node_factory("Echo", [("x", (1,), F)], domain="com.test",
                        attributes={"i": 5, "ints": [1, 2, 3], "f": 2.75, "s": "abcd", "fs": [1.5, 2.25, 7.5]})
    entry = reg.find("Echo", "com.test", 1, "TestEP")
    assert estimate_workspace(entry, node, EpIdentity("TestEP")) == 5 + 6 + 2 + 4 + 11


def test_absent_pointer_attributes_read_as_ok_and_null(reg, node_factory, fresh_statuses):
    """Node_GetAttributeInts / String on an absent attribute: OK with a NULL result (count 0), no HasAttribute."""
    node = node_factory("Echo", [("x", (1,), F)], domain="com.test", attributes={"i": 5, "f": 1.0})
    assert estimate_workspace(reg.find("Echo", "com.test", 1, "TestEP"), node, EpIdentity("TestEP")) == 5 + 1


@pytest.mark.parametrize(("attrs", "expected"), [
    ({}, 3 * 3 * 3 * 6 * 6 * 4),                                                   # every attribute absent
    ({"pads": [1, 1, 1, 1]}, 3 * 3 * 3 * 8 * 8 * 4),
    ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, 3 * 3 * 3 * 4 * 4 * 4),
    ({"dilations": [2, 2]}, 3 * 3 * 3 * 4 * 4 * 4),
    ({"pads": [1, 1]}, None),                                                        # present but malformed
])
def test_seeds_conv_estimate_reads_optional_attributes_without_has_attribute(reg, node_factory, attrs, expected,
                                                                              fresh_statuses):
    node = node_factory("ConvEstimate", [("x", (1, 3, 8, 8), F), ("w", (4, 3, 3, 3), F)], domain="com.test",
                        attributes=attrs)
    entry = reg.find("ConvEstimate", "com.test", 1, "TestEP")
    assert estimate_workspace(entry, node, EpIdentity("TestEP")) == expected


def test_absent_scalar_attribute_is_still_an_error(reg, node_factory, fresh_statuses):
    node = node_factory("Echo", [("x", (1,), F)], domain="com.test", attributes={"ints": [1], "f": 1.0, "s": "x"})
    entry = reg.find("Echo", "com.test", 1, "TestEP")
    with pytest.raises(KernelError, match="Node_GetAttributeInt: node .* has no attribute 'i'") as info:
        entry.estimate_func(ort_abi.HOST_API, node, EpIdentity("TestEP"))
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("attrs", [{"ints": [1], "f": 1.0, "s": "x"},           # "i" absent (a scalar)
                                   {"i": 1.5, "ints": [1], "f": 1.0, "s": "x"},  # "i" of the wrong kind
                                   {"i": 5, "ints": "no", "f": 1.0, "s": "x"},
                                   {"i": 5, "ints": [1], "f": 1.0, "s": "x", "fs": [1.0, "no"]}])  # floats
def test_estimate_attribute_errors_mean_no_estimate(reg, node_factory, attrs, fresh_statuses):
    node = node_factory("Echo", [("x", (1,), F)], domain="com.test", attributes=attrs)
    assert estimate_workspace(reg.find("Echo", "com.test", 1, "TestEP"), node, EpIdentity("TestEP")) is None


@pytest.mark.parametrize(("ep", "expected"), [
    (EpInfo(EpIdentity("TestEP", "fake", 3), {"multi_processor_count": 132}), 132 * 1024 + 3),
    (EpInfo(EpIdentity("TestEP", "fake", 0)), None),          # property missing: error status -> None
    (EpIdentity("OtherEP"), None),                            # estimate refuses: -> None
    (None, None),                                             # no EP handle: host error -> None
])
def test_estimate_reads_device_properties_from_the_ep(reg, node_factory, ep, expected, fresh_statuses):
    node = node_factory("NoKernel", [("x", (1,), F)], domain="com.test")
    assert estimate_workspace(reg.find("NoKernel", "com.test", 1, "TestEP"), node, ep) == expected


def test_failing_estimate_means_no_estimate(reg, node_factory, fresh_statuses):
    node = node_factory("CreateFails", [("x", (1,), F)], domain="com.test")
    entry = reg.find("CreateFails", "com.test", 1, "TestEP")
    assert estimate_workspace(entry, node, EpIdentity("TestEP")) is None
    with pytest.raises(KernelError, match="no estimate for you") as info:
        entry.estimate_func(ort_abi.HOST_API, node, EpIdentity("TestEP"))
    assert info.value.code == ErrorCode.NOT_IMPLEMENTED and info.value.node == node.name


def test_kernel_info_queries_from_c(reg, fresh_statuses):
    entry = reg.find("InfoProbe", "com.test", 1, "TestEP")
    info = KernelInfo("/m/probe", "InfoProbe", attributes={"i": 7, "ints": [4, 9], "f": 2.5, "s": "abc", "fs": [0.5, 1.25]},
                      input_count=2, output_count=3, ep=EpIdentity("TestEP"))
    with pytest.raises(KernelError) as err:
        entry.create_kernel(info)
    assert err.value.message == "name=/m/probe op=InfoProbe in=2 out=3 i=7 ints=2:9 f=2.50 s=abc fs=2:1.25 ep=TestEP"
    with pytest.raises(KernelError) as err:
        entry.create_kernel(KernelInfo("/m/bare", "InfoProbe"))
    assert err.value.message == "name=/m/bare op=InfoProbe in=0 out=1 i=0 ints=0:-1 f=0.00 s=- fs=0:-1.00 ep=-"


def test_node_queries_from_c(reg, node_factory, fresh_statuses):
    node = node_factory("InfoProbe", [("x", (2, 3), F), None, ("z", (2, "s"), TensorProto.INT64), ("u", None, 0)],
                        domain="com.test", name="/m/node")
    with pytest.raises(KernelError) as err:
        reg.find("InfoProbe", "com.test", 1, "TestEP").estimate_func(None, node, EpIdentity("TestEP", "fake", 0))
    assert err.value.message == ("name=/m/node op=InfoProbe domain=com.test in=4 out=1 dev=fake "
                                 "[1 t1 static r2] [0 t0 null r0] [1 t7 null r0] [1 t0 null r0]")


@pytest.mark.parametrize("released_first", [False, True])
def test_a_collected_kernel_is_released_once(reg, misbehaving_lib, released_first):
    released = ctypes.CDLL(str(misbehaving_lib)).test_released_count
    k = kernel(reg, "V2NullDeclare")
    before = released()
    if released_first:
        k.release()
    del k
    gc.collect()
    assert released() == before + 1
