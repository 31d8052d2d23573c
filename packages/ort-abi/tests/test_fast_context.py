"""The C context pool (`_fast_context`): a C kernel's Compute-time reads answered in C give exactly what the
Python host functions give, everything C does not serve still goes through them (same results, same
refusals), and a handle kept past its Compute is refused, never served."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto

import ort_abi
from ort_abi import KernelContext, KernelError, KernelInfo, KernelRegistry, load_kernel_library
from ort_abi._fast_context import fast_contexts
from ort_abi._views import ContextView

F = TensorProto.FLOAT
CPU = "CPUExecutionProvider"


@pytest.fixture(scope="module")
def pool():
    ffi, lib = ort_abi._ffi.require_c("the context pool")
    found = fast_contexts(ffi, lib)
    # an install builds the bridge with the pool; an older in-place build falls back to the Python host functions,
    # which is what users of a stale bridge get, but here it means the pool is not being tested: a failure
    assert found is not None, "the compiled bridge has no context pool: rebuild it (python setup.py build_ext --inplace)"
    return found


@pytest.fixture
def views(monkeypatch):
    """Every ContextView a C kernel's compute makes, to see which reads reached Python."""
    made = []

    class Recording(ContextView):
        def __init__(self, ctx):
            super().__init__(ctx)
            made.append(self)

    monkeypatch.setattr(ort_abi._ckernel, "ContextView", Recording)
    return made


def run(kernel, pool, fast, *inputs):
    kernel._pool = pool if fast else None
    ctx = KernelContext(list(inputs), output_types=[F])
    kernel.compute(ctx)
    return ctx.outputs[0]


RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 5)).astype(np.float32)
B = RNG.standard_normal((3, 5)).astype(np.float32)


@pytest.mark.parametrize(("a", "b", "python_reads"), [
    (A, B, set()),  # both described in C: no input read reaches Python
    (np.ascontiguousarray(A.T).T, B, {0}),  # a strided view: Python copies it to contiguous memory, as before
    (np.zeros((0, 5), np.float32), np.zeros((0, 5), np.float32), set()),  # empty tensors (NULL data)
])
def test_reads_served_in_c_equal_the_python_path(example, pool, views, a, b, python_reads):
    add = example("Add")
    fast = run(add, pool, True, a, b)
    assert set(views[-1].inputs) == python_reads and views[-1].fast is None  # closed after Compute
    slow = run(add, pool, False, a, b)
    assert set(views[-1].inputs) == {0, 1}
    np.testing.assert_array_equal(fast, a + b)
    np.testing.assert_array_equal(slow, a + b)


@pytest.mark.parametrize("fast", [True, False])
def test_an_omitted_input_reads_as_null_either_way(example, pool, fast):
    with pytest.raises(KernelError, match="input 1 is missing"):
        run(example("Add"), pool, fast, A, None)


def test_an_exhausted_pool_falls_back_to_python_handles(example, pool, views):
    held = []
    try:
        while (handle := pool.open(ContextView(KernelContext([A], output_types=[F])))) is not None:
            held.append(pool._views[pool._addresses[int(ort_abi._ffi._ffi.cast("uintptr_t", handle))]])
        assert held, "the pool had no free context"
        np.testing.assert_array_equal(run(example("Relu"), pool, True, A), np.maximum(A, 0))
        assert set(views[-1].inputs) == {0}  # served by the Python host functions
    finally:
        for view in held:
            pool.close(view)


@pytest.fixture
def misbehaving(misbehaving_lib):
    reg = KernelRegistry()
    load_kernel_library(misbehaving_lib, reg)
    return lambda op: reg.find(op, "com.test", 1, "TestEP").create_kernel(KernelInfo("/t/n", op, output_types=(F,)))


@pytest.mark.parametrize("use", ["UseKeptContext", "UseKeptValue"])
def test_a_handle_kept_past_compute_is_refused(misbehaving, pool, use, fresh_statuses):
    """(The pool hands contexts out first in, first out, so the next Compute has another one; a plain Python
    handle's address may be reused by the very next call, which then serves the kept pointer.)"""
    run(misbehaving("Keep"), pool, True, A)
    with pytest.raises(KernelError, match="not a live handle") as info:
        run(misbehaving(use), pool, True, A)
    assert info.value.code == ort_abi.ErrorCode.INVALID_ARGUMENT


def test_writing_an_input_described_in_c_is_refused_by_python(misbehaving, pool, fresh_statuses):
    with pytest.raises(KernelError, match="read-only"):
        run(misbehaving("InputWrite"), pool, True, A)


def test_concurrent_computes_each_read_their_own_context(example, pool):
    add = example("Add")
    add._pool = pool
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            a, b = (rng.standard_normal((4, 7)).astype(np.float32) for _ in range(2))
            ctx = KernelContext([a, b], output_types=[F])
            add.compute(ctx)
            if not np.array_equal(ctx.outputs[0], a + b):
                failures.append(seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(pool._free) == len(pool._slots)  # every context went back


def test_a_closed_context_describes_nothing(pool):
    """After Compute every value of the context is cleared, so a handle kept from that call is refused even when
    a later call with fewer inputs holds the same context."""
    ctx = KernelContext([A, B, None], output_types=[F])
    view = ContextView(ctx)
    handle = pool.open(view)
    slot = view.fast
    c = pool._slots[slot]
    assert handle is not None and c.live == 1 and [c.values[j].state for j in range(3)] == [1, 1, 2]
    out = np.zeros((3, 5), np.float32)
    assert pool.describe_output(view, 0, out) is not None
    view.outputs[0] = True
    assert c.values[pool.inputs].state == 1 and c.values[pool.inputs].writable == 1
    pool.close(view)
    assert c.live == 0 and all(c.values[j].state == 0 for j in range(pool.inputs + pool.outputs))
    assert view.fast is None and pool.resolve("OrtKernelContext", int(ort_abi._ffi._ffi.cast("uintptr_t", handle))) is None
