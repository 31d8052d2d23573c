"""Run-scoped checks for long-running kernels (`ort_abi.run_checks_scope`, `check_run`, `check_growth`)."""

import threading

import pytest

import ort_abi


class Recorder:
    def __init__(self, stop_after=None, bound=None):
        self.ticks, self.grown, self.stop_after, self.bound = [], [], stop_after, bound

    def tick(self, where):
        self.ticks.append(where)
        if self.stop_after is not None and len(self.ticks) > self.stop_after:
            raise KeyboardInterrupt(f"stopped at {where}")

    def grow(self, where, nbytes):
        self.grown.append((where, nbytes))
        if self.bound is not None and nbytes > self.bound:
            raise MemoryError(f"{where}: {nbytes}")


def test_outside_a_run_the_checks_are_no_ops():
    ort_abi.check_run("n")
    ort_abi.check_growth("n", 1 << 60)


def test_the_installed_checks_are_called_and_their_errors_pass_through():
    rec = Recorder(stop_after=1, bound=10)
    assert isinstance(rec, ort_abi.RunChecks)
    with ort_abi.run_checks_scope(rec):
        ort_abi.check_run("a")
        ort_abi.check_growth("a", 10)
        with pytest.raises(KeyboardInterrupt, match="stopped at b"):
            ort_abi.check_run("b")
        with pytest.raises(MemoryError, match="a: 11"):
            ort_abi.check_growth("a", 11)
    assert rec.ticks == ["a", "b"] and rec.grown == [("a", 10), ("a", 11)]
    ort_abi.check_run("after")  # the scope ended: no-op again
    assert rec.ticks == ["a", "b"]


@pytest.mark.parametrize("inner", [None, "other"])
def test_scopes_nest_and_restore(inner):
    outer = Recorder()
    other = Recorder()
    with ort_abi.run_checks_scope(outer):
        with ort_abi.run_checks_scope(other if inner else None):
            ort_abi.check_run("inside")
        ort_abi.check_run("outer")
    assert outer.ticks == ["outer"] and other.ticks == (["inside"] if inner else [])


def test_each_thread_sees_its_own_run():
    mine, seen = Recorder(), []
    with ort_abi.run_checks_scope(mine):
        t = threading.Thread(target=lambda: (ort_abi.check_run("thread"), seen.append(True)))
        t.start()
        t.join()
        ort_abi.check_run("main")
    assert mine.ticks == ["main"] and seen == [True]
