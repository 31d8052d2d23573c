"""The C step runner (`_fast_steps`): a planned step computes with its outputs and workspace answered from
their planned blocks; whatever contradicts or outgrows the plan goes to the step's Python context (built only
then) with the same result or the same typed refusal; a step whose inputs are not described with their planned
types does not start."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import ort_abi
from ort_abi import (
    STEP_DONE,
    STEP_FAILED,
    STEP_NOT_STARTED,
    KernelContext,
    OutputMismatchError,
    PlannedOutput,
    StepRun,
    StepSpec,
    StepTable,
    WorkspaceInputShape,
)

F = TensorProto.FLOAT
CPU = "CPUExecutionProvider"
RNG = np.random.default_rng(1)
A = RNG.standard_normal((3, 5)).astype(np.float32)
B = RNG.standard_normal((3, 5)).astype(np.float32)


class Python:
    """on_python: records the steps C deferred and gives each the context `make()` builds."""

    def __init__(self, make=None):
        self.calls, self.made, self._make = [], [], make

    def __call__(self, step):
        self.calls.append(step)
        ctx = self._make() if self._make is not None else KernelContext([A, B], output_types=[F])
        self.made.append(ctx)
        return ctx


def add_step(kernel, *, capacity=60, shape=(3, 5), workspace=()):
    """Add: inputs are table entries 0 and 1, the output entry 2 at offset 64 of buffer 0."""
    out = PlannedOutput(2, 0, F, 4, 64, capacity, shape)
    return StepTable({0: StepSpec(kernel, (0, 1), (F, F), (out,), workspace)}, 3, {})


def block(buffer, offset, shape):
    return buffer[offset:offset + 4 * int(np.prod(shape))].view(np.float32).reshape(shape)


def address(arr):
    return arr.__array_interface__["data"][0]


def test_a_planned_step_computes_into_its_block_without_python(example):
    buffer = np.zeros(256, np.uint8)
    python = Python()
    with StepRun(add_step(example("Add")), [buffer], True, python) as run:
        assert run.usable
        run.describe(0, A)
        run.describe(1, B)
        rc, status = run.compute(0), run.status
        assert (rc, status) == (STEP_DONE, ort_abi._ffi._ffi.NULL)
        assert python.calls == [] and run.python_view is None
        np.testing.assert_array_equal(block(buffer, 64, (3, 5)), A + B)
        assert run.entry(2) == (F, (3, 5), address(buffer) + 64)  # published for the steps after it
        assert run.planned_values == 1


def test_an_output_outgrowing_its_block_is_allocated_by_the_python_context(example):
    buffer = np.zeros(256, np.uint8)
    python = Python()
    with StepRun(add_step(example("Add"), capacity=40), [buffer], True, python) as run:
        run.describe(0, A)
        run.describe(1, B)
        rc = run.compute(0)
        assert rc == STEP_DONE and python.calls == [0]
        out = python.made[0].outputs[0]
        np.testing.assert_array_equal(out, A + B)
        assert not buffer.any()  # nothing written into the too-small block
        assert run.entry(2) == (F, (3, 5), address(out))  # the Python allocation, described for later steps
        assert run.planned_values == 0
        run.python_view.close()


@pytest.mark.parametrize(("exact", "deferred"), [(True, True), (False, False)])
def test_static_extents_are_checked_only_on_runs_with_the_planned_input_shapes(example, exact, deferred):
    """The plan says (3, 6): a run with the planned input shapes defers the (3, 5) request to Python, which
    refuses it with the typed mismatch; a smaller run (not exact) checks the rank only."""
    buffer = np.zeros(256, np.uint8)
    python = Python(lambda: KernelContext([A, B], output_types=[F], planned_outputs=[((3, 6), F)]))
    with StepRun(add_step(example("Add"), capacity=72, shape=(3, 6)), [buffer], exact, python) as run:
        run.describe(0, A)
        run.describe(1, B)
        rc, status = run.compute(0), run.status
        if deferred:
            assert rc == STEP_FAILED and python.calls == [0]
            with pytest.raises(OutputMismatchError, match=r"shape \[3, 5\] but the plan has \[3, 6\]"):
                ort_abi.check_compute(status, python.made[0], node="/t/Add", library=None)
            run.python_view.close()
        else:
            assert rc == STEP_DONE and python.calls == []
            np.testing.assert_array_equal(block(buffer, 64, (3, 5)), A + B)


@pytest.mark.parametrize("second", [B.astype(np.float64), np.ones((5, 3), np.float32).T, None])
def test_a_step_whose_input_is_not_described_with_its_planned_type_does_not_start(example, second):
    """A float64 input (the plan says float32), a strided view, or a value never described: the step does not
    start (the caller runs it in Python), nothing is written, nothing is published."""
    buffer = np.zeros(256, np.uint8)
    python = Python()
    with StepRun(add_step(example("Add")), [buffer], True, python) as run:
        run.describe(0, A)
        if second is not None:
            run.describe(1, second)
        rc, status = run.compute(0), run.status
        assert (rc, status) == (STEP_NOT_STARTED, ort_abi._ffi._ffi.NULL)
        assert python.calls == [] and not buffer.any() and run.entry(2) is None


@pytest.mark.parametrize(("size_delta", "from_plan"), [(0, 1), (-4, 0)])
def test_workspace_slots_are_answered_from_their_block(example, size_delta, from_plan):
    """Softmax declares one row of workspace: the planned slot is handed out in C; a slot smaller than the
    request goes to Python, which counts a miss and the kernel takes scratch: the same result either way."""
    softmax = example("Softmax", 13)
    slots = softmax.declare_workspace([WorkspaceInputShape.shaped((3, 5), F)])
    (slot,) = slots
    buffer = np.zeros(512, np.uint8)
    out = PlannedOutput(1, 0, F, 4, 0, 60, (3, 5))
    table = StepTable({0: StepSpec(softmax, (0,), (F,), (out,),
                                   ((slot.slot_id, 0, 256, slot.size_bytes + size_delta),))}, 2, {})
    python = Python(lambda: KernelContext([A], output_types=[F]))
    with StepRun(table, [buffer], True, python) as run:
        run.describe(0, A)
        rc = run.compute(0)
        assert rc == STEP_DONE
        assert run.workspace_from_plan == from_plan and len(python.calls) == 1 - from_plan
        e = np.exp(A - A.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(block(buffer, 0, (3, 5)), e / e.sum(axis=-1, keepdims=True), rtol=1e-6)
        if python.made:
            assert python.made[0].counters.scratch_fallbacks == 1
            run.python_view.close()


def test_constants_are_described_once_in_the_table(example):
    buffer = np.zeros(256, np.uint8)
    out = PlannedOutput(2, 0, F, 4, 64, 60, (3, 5))
    table = StepTable({0: StepSpec(example("Add"), (0, 1), (F, F), (out,))}, 3, {1: B})
    for a in (A, 2 * A):
        with StepRun(table, [buffer], True, Python()) as run:
            run.describe(0, a)
            assert run.compute(0) == STEP_DONE
            np.testing.assert_array_equal(block(buffer, 64, (3, 5)), a + B)


def test_only_c_kernels_run_through_the_runner(example):
    add = example("Add")
    assert ort_abi.c_step_kernel(add, [F, F]) is add
    add.compute = add.compute  # a compute replaced on the object: the object decides, not the runner
    assert ort_abi.c_step_kernel(add, [F, F]) is None
    other = example("Add")
    other.release()
    assert ort_abi.c_step_kernel(other, [F, F]) is None
    assert ort_abi.c_step_kernel(object(), [F, F]) is None


def test_a_held_context_goes_back_to_the_pool(example):
    from ort_abi._fast_context import fast_contexts

    pool = fast_contexts(*ort_abi._ffi.require_c("the context pool"))
    free = len(pool._free)
    run = StepRun(add_step(example("Add")), [np.zeros(256, np.uint8)], True, Python())
    assert len(pool._free) == free - 1
    run.close()
    run.close()  # twice is harmless
    assert len(pool._free) == free


def chain(kernel, capacities=(60, 60, 60)):
    """Three Adds in a row, each reading the one before: entries 0, 1 -> 2 -> 3 -> 4 at offsets 64, 128, 192."""
    reads = ((0, 1), (2, 1), (3, 0))
    specs = {k: StepSpec(kernel, reads[k], (F, F), (PlannedOutput(2 + k, 0, F, 4, 64 * (k + 1), cap, (3, 5)),))
             for k, cap in enumerate(capacities)}
    return StepTable(specs, 5, {})


def test_consecutive_steps_compute_in_one_call(example):
    buffer = np.zeros(512, np.uint8)
    python = Python()
    table = chain(example("Add"))
    assert table.ends == {0: 3, 1: 3, 2: 3}
    with StepRun(table, [buffer], True, python) as run:
        run.describe(0, A)
        run.describe(1, B)
        assert run.compute_range(0, 3) == 3 and run.last == STEP_DONE and python.calls == []
        np.testing.assert_array_equal(block(buffer, 192, (3, 5)), A + B + B + A)
        assert run.planned_values == 3


def test_a_range_stops_after_the_step_python_finishes(example):
    """Step 1 outgrows its block: its Python context is built (for step 1, found from the step C computes),
    the range stops there with step 0 done, and the host finishes step 1 before step 2 runs."""
    buffer = np.zeros(512, np.uint8)
    python = Python(lambda: KernelContext([A + B, B], output_types=[F]))
    with StepRun(chain(example("Add"), (60, 40, 60)), [buffer], True, python) as run:
        run.describe(0, A)
        run.describe(1, B)
        assert run.compute_range(0, 3) == 1
        assert run.last == STEP_DONE and python.calls == [1] and run.python_view is not None
        np.testing.assert_array_equal(python.made[0].outputs[0], A + B + B)
        assert not buffer[128:192].any()  # step 1 wrote nothing into its too-small block, and step 2 has not run
        assert not buffer[192:256].any()
        run.python_view.close()
        assert run.compute_range(2, 1) == 1 and python.calls == [1]
        np.testing.assert_array_equal(block(buffer, 192, (3, 5)), A + B + B + A)


def test_a_range_stops_at_a_step_that_does_not_start(example):
    buffer = np.zeros(512, np.uint8)
    python = Python()
    with StepRun(chain(example("Add")), [buffer], True, python) as run:
        run.describe(0, A)  # entry 1 (B) undescribed: step 0 does not start
        assert run.compute_range(0, 3) == 0 and run.last == STEP_NOT_STARTED and python.calls == []
        assert not buffer.any()


def test_steps_hold_only_their_own_inputs_outputs_and_slots(example):
    """Each step points at its own run of the table's packed arrays (a step costs its node's counts, not the
    runner's capacities): two Add steps chained through entry 2, each computing into its own block."""
    add = example("Add")
    specs = {0: StepSpec(add, (0, 1), (F, F), (PlannedOutput(2, 0, F, 4, 0, 60, (3, 5)),), ((7, 0, 192, 16),)),
             1: StepSpec(add, (2, 1), (F, F), (PlannedOutput(3, 0, F, 4, 64, 60, (3, 5)),))}
    table = StepTable(specs, 4, {})
    ffi = ort_abi._ffi._ffi
    assert ffi.sizeof("ort_abi_fast_step") < ffi.sizeof("ort_abi_fast_output")  # no fixed-capacity arrays inside
    first, second = (table.pointers[i] for i in (0, 1))
    assert [first.inputs[i] for i in range(2)] == [0, 1] and [second.inputs[i] for i in range(2)] == [2, 1]
    assert (first.outputs[0].value, second.outputs[0].value, second.outputs[0].offset) == (2, 3, 64)
    assert (first.workspace_count, first.workspace[0].slot_id, second.workspace_count) == (1, 7, 0)
    buffer = np.zeros(256, np.uint8)
    with StepRun(table, [buffer], True, Python()) as run:
        run.describe(0, A)
        run.describe(1, B)
        assert (run.compute(0), run.compute(1)) == (STEP_DONE, STEP_DONE)
    np.testing.assert_array_equal(block(buffer, 64, (3, 5)), A + B + B)


@pytest.mark.parametrize(("inputs", "outputs", "rank", "slots", "named"), [
    (17, 1, 2, 0, "inputs"), (2, 9, 2, 0, "outputs"), (2, 1, 17, 0, "rank of output 0"), (2, 1, 2, 9, "workspace")])
def test_a_step_over_the_runners_capacities_is_refused(example, inputs, outputs, rank, slots, named):
    spec = StepSpec(example("Add"), tuple(range(inputs)), (F,) * inputs,
                    tuple(PlannedOutput(inputs + j, 0, F, 4, 0, 60, (1,) * rank) for j in range(outputs)),
                    tuple((j, 0, 0, 16) for j in range(slots)))
    with pytest.raises(ort_abi.KernelDefError, match=rf"step 5 has \{{'{named}': \d+\}}, over the C step runner"):
        StepTable({5: spec}, inputs + outputs, {})


@pytest.mark.parametrize("indices", [(0, 1, 2), (1, 4, 5), (3, 9, 10)])
def test_steps_keyed_by_sparse_indices_read_their_packed_positions(example, indices):
    """Steps at any node indices (a session's C steps among Python ones): the maps over the packed positions
    answer as dicts would, `ends` stops a range at a gap, `step_at` finds a step from its address, and `block`
    reads each value's planned block from the output that makes it."""
    add = example("Add")
    reads = ((0, 1), (2, 1), (3, 0))
    specs = {i: StepSpec(add, reads[k], (F, F), (PlannedOutput(2 + k, 0, F, 4, 64 * (k + 1), 60, (3, 5)),))
             for k, i in enumerate(indices)}
    table = StepTable(specs, 5, {})
    assert list(table.pointers) == list(indices) and len(table.kernels) == 3
    assert all(table.kernels[i] is add for i in indices) and indices[0] - 1 not in table.pointers
    assert -1 not in table.ends and max(indices) + 1 not in table.ends and "0" not in table.pointers
    with pytest.raises(KeyError):
        table.kernels[max(indices) + 1]
    expect, end = {}, None
    for i in sorted(indices, reverse=True):
        end = expect[i] = end if end is not None and i + 1 in specs else i + 1
    assert table.ends == expect
    ffi = ort_abi._ffi._ffi
    assert [table.step_at(int(ffi.cast("uintptr_t", table.pointers[i]))) for i in indices] == list(indices)
    assert table.step_at(int(ffi.cast("uintptr_t", table.pointers[indices[0]])) + 1) is None
    assert [table.block(e) for e in range(6)] == [None, None, (0, 64, 60), (0, 128, 60), (0, 192, 60), None]
