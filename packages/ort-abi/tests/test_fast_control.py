"""Control-flow steps of the C step runner (`_fast_control`): an If computes its selected branch's steps and a Loop
its body's every iteration, inside the node's step, publishing the node's outputs in their planned blocks;
whatever C does not finish alone (an input not described, a body step not started, a result over its block, a
run whose checks may terminate it) leaves the step not started, nothing published; a malformed spec is refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import ort_abi
from ort_abi import (
    CONTROL_IF,
    CONTROL_KERNEL,
    CONTROL_LOOP,
    STEP_DONE,
    STEP_NOT_STARTED,
    ControlSpec,
    PlannedOutput,
    StepRun,
    StepSpec,
    StepTable,
)

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(2)
A = RNG.standard_normal((3, 5)).astype(np.float32)
B = RNG.standard_normal((3, 5)).astype(np.float32)


@pytest.fixture
def add(example):
    return example("Add")


def block(buffer, offset, shape=(3, 5)):
    return buffer[offset:offset + 4 * int(np.prod(shape))].view(np.float32).reshape(shape)


def never(step):
    raise AssertionError(f"step {step} asked for a Python context")


def if_table(add, capacity=60):
    """Entries: 0 cond, 1 x, 2 B (a constant), 3 then's x + B (offset 0), 4 else's x + x (offset 64), 5 the If's
    output (offset 128). Steps: 0 the If, 2 then's Add, 4 else's Add."""
    then = StepSpec(add, (1, 2), (F, F), (PlannedOutput(3, 0, F, 4, 0, 60, (3, 5)),))
    other = StepSpec(add, (1, 1), (F, F), (PlannedOutput(4, 0, F, 4, 64, 60, (3, 5)),))
    node = StepSpec(CONTROL_KERNEL, (0,), (BOOL,), (PlannedOutput(5, 0, F, 4, 128, capacity, (3, 5)),), (),
                    ControlSpec(CONTROL_IF, ((2, 1), (4, 1)), ((3,), (4,))))
    return StepTable({0: node, 2: then, 4: other}, 6, {2: B})


def loop_table(add):
    """Entries: 0 M, 1 cond, 2 v0, 3 B, 4/5/6 the body's iteration number, condition and v, 7 the body's v + B
    (offset 0), 8 the Loop's output (offset 64); the state at offset 128. The body returns its condition input."""
    body = StepSpec(add, (6, 3), (F, F), (PlannedOutput(7, 0, F, 4, 0, 60, (3, 5)),))
    node = StepSpec(CONTROL_KERNEL, (0, 1, 2), (I64, BOOL, F), (PlannedOutput(8, 0, F, 4, 64, 60, (3, 5)),), (),
                    ControlSpec(CONTROL_LOOP, ((2, 1),), ((5, 7),), (4, 5, 6), (0, 128), carried=1))
    return StepTable({0: node, 2: body}, 9, {3: B})


@pytest.mark.parametrize(("cond", "want"), [(True, A + B), (False, A + A)])
def test_an_if_step_computes_the_selected_branch_into_its_output_block(add, cond, want):
    buffer = np.zeros(256, np.uint8)
    with StepRun(if_table(add), [buffer], True, never) as run:
        run.describe(0, np.array(cond))
        run.describe(1, A)
        assert run.compute(0) == STEP_DONE
        elem, shape, where = run.entry(5)
        assert (elem, shape, where) == (F, (3, 5), run.base_address(0) + 128)
        assert run.entry(4 if cond else 3) is None  # the other branch did not run
    np.testing.assert_array_equal(block(buffer, 128), want)


@pytest.mark.parametrize(("trips", "cond", "iterations"), [(3, True, 3), (1, True, 1), (0, True, 0), (4, False, 0),
                                                           (-2, True, 0)])
def test_a_loop_step_carries_its_value_through_the_iterations(add, trips, cond, iterations):
    buffer = np.zeros(256, np.uint8)
    with StepRun(loop_table(add), [buffer], True, never) as run:
        run.describe(0, np.array(trips, np.int64))
        run.describe(1, np.array(cond))
        run.describe(2, A)
        assert run.compute(0) == STEP_DONE
        assert run.entry(8)[2] == run.base_address(0) + 64
    want = A.copy()
    for _ in range(iterations):
        want = want + B
    np.testing.assert_allclose(block(buffer, 64), want, rtol=1e-6)
    if iterations:  # the iteration number and condition written before the last iteration
        assert (buffer[128:136].view(np.int64)[0], buffer[136]) == (iterations - 1, 1)


def test_a_control_step_c_cannot_finish_is_not_started_and_publishes_nothing(add):
    buffer = np.zeros(256, np.uint8)
    with StepRun(if_table(add), [buffer], True, never) as run:  # the condition not described
        run.describe(1, A)
        assert run.compute(0) == STEP_NOT_STARTED and run.entry(5) is None
    with StepRun(if_table(add), [buffer], True, never) as run:  # the branch's input not described
        run.describe(0, np.array(True))
        assert run.compute(0) == STEP_NOT_STARTED and run.entry(5) is None
    with StepRun(if_table(add, capacity=32), [buffer], True, never) as run:  # over the output's block
        run.describe(0, np.array(True))
        run.describe(1, A)
        assert run.compute(0) == STEP_NOT_STARTED and run.entry(5) is None
    with StepRun(loop_table(add), [buffer], True, never) as run:  # a trip count that is not int64
        run.describe(0, np.array(3, np.int32))
        run.describe(1, np.array(True))
        run.describe(2, A)
        assert run.compute(0) == STEP_NOT_STARTED and run.entry(8) is None


class Checks:
    def __init__(self, can_terminate):
        self.can_terminate = can_terminate

    def tick(self, where):
        pass

    def grow(self, where, nbytes):
        pass


@pytest.mark.parametrize(("can_terminate", "rc"), [(True, STEP_NOT_STARTED), (False, STEP_DONE)])
def test_a_run_whose_checks_may_terminate_it_leaves_control_steps_to_the_host(add, can_terminate, rc):
    buffer = np.zeros(256, np.uint8)
    with StepRun(loop_table(add), [buffer], True, never) as run, ort_abi.run_checks_scope(Checks(can_terminate)):
        run.describe(0, np.array(2, np.int64))
        run.describe(1, np.array(True))
        run.describe(2, A)
        assert run.compute(0) == rc
        assert run.compute_range(0, 1) == (1 if rc == STEP_DONE else 0)


def test_a_malformed_control_spec_is_refused(add):
    body = StepSpec(add, (1, 2), (F, F), (PlannedOutput(3, 0, F, 4, 0, 60, (3, 5)),))
    out = (PlannedOutput(5, 0, F, 4, 128, 60, (3, 5)),)
    bad = {"a body step that is not a table step": ControlSpec(CONTROL_IF, ((2, 1), (7, 1)), ((3,), (3,))),
           "one body for an If": ControlSpec(CONTROL_IF, ((2, 1),), ((3,),)),
           "an entry outside the table": ControlSpec(CONTROL_IF, ((2, 1), (2, 1)), ((3,), (60,)))}
    for why, control in bad.items():
        node = StepSpec(CONTROL_KERNEL, (0,), (BOOL,), out, (), control)
        with pytest.raises(ort_abi.KernelDefError, match="control-flow step 0"):
            StepTable({0: node, 2: body}, 6, {})
            pytest.fail(why)
    nested = StepSpec(CONTROL_KERNEL, (0,), (BOOL,), out, (), ControlSpec(CONTROL_IF, ((0, 1), (2, 1)), ((3,), (3,))))
    with pytest.raises(ort_abi.KernelDefError, match="not all table steps without control"):
        StepTable({0: nested, 2: body}, 6, {})
