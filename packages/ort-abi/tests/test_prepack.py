"""Planned constant-weight pre-packing (ABI version 5: DeclarePrePackedBytes / PrePackWeightInto) through the C
test library (tests/c/misbehaving.c): the declaration, the host-owned aligned buffer, an error status as a typed
error naming the node, and kernels of older ABI versions (smaller structs) left alone."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import TensorProto

import ort_abi
from ort_abi import ErrorCode, KernelContext, KernelInfo, KernelRegistry, PrePackError, WorkspaceInputShape

F = TensorProto.FLOAT
SHAPES = [WorkspaceInputShape.shaped((4,), F), WorkspaceInputShape.shaped((2, 8), F)]


@pytest.fixture
def reg(misbehaving_lib):
    r = KernelRegistry()
    ort_abi.load_kernel_library(misbehaving_lib, r)
    return r


def _kernel(reg, op):
    return reg.find(op, "com.test", 1, "TestEP").create_kernel(KernelInfo("/t/pack", op, input_count=2,
                                                                          output_types=(F,)))


def test_a_kernel_declares_then_packs_into_the_host_buffer(reg, misbehaving_lib, fresh_statuses):
    count = ctypes.CDLL(str(misbehaving_lib)).test_prepack_count
    k = _kernel(reg, "PrePacks")
    assert k.has_prepack and not k.releases_packed  # flags 0: its weight stays a Compute input
    nbytes = ort_abi.declare_prepacked(k, SHAPES, 1, node="/t/pack")
    assert nbytes == 64
    before = count()
    # the kernel checks the buffer's alignment (ORT_PREPACK_ALIGNMENT) and copies the weight into it
    assert ort_abi.prepack_weight(k, 1, np.arange(16, dtype=np.float32).reshape(2, 8), nbytes, node="/t/pack")
    assert count() == before + 1
    k.compute(KernelContext([np.ones(4, np.float32), np.ones((2, 8), np.float32)], output_types=[F]))
    k.release()


def test_an_error_status_from_pre_packing_is_a_typed_error_naming_the_node(reg, fresh_statuses):
    k = _kernel(reg, "PrePackFails")
    with pytest.raises(PrePackError, match=r"PrePackWeightInto of node '/t/pack'.*cannot pack this weight") as info:
        ort_abi.prepack_weight(k, 1, np.ones((2, 8), np.float32), 64, node="/t/pack")
    assert info.value.code == ErrorCode.EP_FAIL and info.value.node == "/t/pack"
    assert isinstance(info.value, ort_abi.KernelError)
    k.release()


@pytest.mark.parametrize("op", ["V1", "V4", "V2NullDeclare"])
def test_kernels_of_older_abi_versions_or_without_the_entries_pack_nothing(reg, op, fresh_statuses):
    k = _kernel(reg, op)
    assert not k.has_prepack
    assert ort_abi.declare_prepacked(k, SHAPES, 1) == 0
    assert ort_abi.prepack_weight(k, 1, np.ones((2, 8), np.float32), 64) is False
    ctx = KernelContext([np.ones(4, np.float32)], output_types=[F])
    k.compute(ctx)  # unchanged: it still runs, with scratch
    assert ctx.counters.scratch_fallbacks == 1
    k.release()


def test_python_kernels_take_part_with_the_same_two_methods(fresh_statuses):
    class Packs:
        def declare_prepacked(self, shapes, index):
            return 32 if index == 1 else 0

        def prepack(self, index, array, buffer):
            assert buffer.nbytes == 32 and buffer.ctypes.data % ort_abi.ABI_PREPACK_ALIGNMENT == 0
            buffer[:] = array.reshape(-1).view(np.uint8)[:32]
            return True

    class Bad:
        def declare_prepacked(self, shapes, index):
            return -1

    assert ort_abi.declare_prepacked(Packs(), SHAPES, 0) == 0
    assert ort_abi.declare_prepacked(Packs(), SHAPES, 1) == 32
    assert ort_abi.prepack_weight(Packs(), 1, np.ones((2, 8), np.float32), 32)
    assert ort_abi.declare_prepacked(object(), SHAPES, 1) == 0  # no methods: nothing packed
    with pytest.raises(PrePackError, match="declare an int >= 0"):
        ort_abi.declare_prepacked(Bad(), SHAPES, 1, node="/t/bad")
