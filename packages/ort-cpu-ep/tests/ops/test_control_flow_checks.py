"""Loop / Scan / If bodies ask the run's checks every iteration and between body nodes (`ort_abi.check_run`),
and report what their scan outputs accumulate (`ort_abi.check_growth`)."""

import numpy as np
import pytest

import ort_abi
import ort_graph
from ort_cpu_ep.ops import run_graph
from ort_cpu_ep.testing import control_flow_model


class Stop(Exception):
    pass


class Checks:
    def __init__(self, stop_after=None, bound=None):
        self.ticks, self.grown, self.stop_after, self.bound = [], [], stop_after, bound

    def tick(self, where):
        self.ticks.append(where)
        if self.stop_after is not None and len(self.ticks) >= self.stop_after:
            raise Stop(where)

    def grow(self, where, nbytes):
        self.grown.append(nbytes)
        if self.bound is not None and nbytes > self.bound:
            raise Stop(f"{where} over {self.bound}")


def _run(kind, feeds, checks, scan=False):
    model = ort_graph.from_proto(control_flow_model(kind, scan=scan))
    with ort_abi.run_checks_scope(checks):
        return run_graph(model.graph, feeds, opsets=model.opset_imports)


X = np.arange(4, dtype=np.float32)


@pytest.mark.parametrize("kind", ["loop", "loop_in_loop", "loop_in_if", "empty_body"])
def test_a_loop_of_2_40_iterations_stops_at_the_first_check_that_raises(kind):
    checks = Checks(stop_after=50)
    with pytest.raises(Stop) as e:
        _run(kind, {"x": X, "M": np.array(2**40, np.int64)}, checks)
    assert len(checks.ticks) == 50
    where = {"loop": "loop", "loop_in_loop": "body/inner", "loop_in_if": "if/loop", "empty_body": "loop"}[kind]
    assert where in checks.ticks and str(e.value) == checks.ticks[-1]
    if kind == "empty_body":  # no body node to check between: the Loop itself checks every iteration
        assert set(checks.ticks) == {"loop"}


def test_a_nested_body_is_checked_inside_the_inner_loop():
    checks = Checks(stop_after=1000)
    with pytest.raises(Stop):
        _run("loop_in_loop", {"x": X, "M": np.array(2**40, np.int64)}, checks)
    assert "body/inner" in checks.ticks and checks.ticks.count("body/inner") > 100  # every inner iteration


@pytest.mark.parametrize(("kind", "feeds", "expected"), [
    ("loop", {"M": np.array(3, np.int64)}, X + 3),
    ("loop_in_loop", {"M": np.array(3, np.int64)}, X + 9),
    ("loop_in_if", {"M": np.array(3, np.int64)}, X + 3),
    ("empty_body", {"M": np.array(3, np.int64)}, X),
    ("scan", {"seq": np.ones((3, 4), np.float32)}, X + 3),
])
def test_checks_that_never_raise_change_nothing(kind, feeds, expected):
    checks = Checks()
    out = _run(kind, {"x": X, **feeds}, checks)
    np.testing.assert_array_equal(out["y"], expected)
    assert len(checks.ticks) >= 3


@pytest.mark.parametrize("kind", ["loop", "scan"])
def test_scan_outputs_report_their_bytes_each_iteration(kind):
    feeds = {"M": np.array(5, np.int64)} if kind == "loop" else {"seq": np.ones((5, 4), np.float32)}
    checks = Checks()
    out = _run(kind, {"x": X, **feeds}, checks, scan=True)
    assert out["scans"].shape == (5, 4)
    assert checks.grown == [16 * k for k in range(1, 6)]  # one float[4] more each iteration


def test_a_growing_scan_output_is_refused_when_it_passes_the_bound():
    checks = Checks(bound=1 << 12)
    with pytest.raises(Stop, match="loop over 4096"):
        _run("loop", {"x": X, "M": np.array(2**40, np.int64)}, checks, scan=True)
    assert checks.grown[-1] == 4096 + 16 and len(checks.grown) == 257


def test_a_long_scan_stops_inside():
    checks = Checks(stop_after=20)
    with pytest.raises(Stop):
        _run("scan", {"x": X, "seq": np.ones((100_000, 4), np.float32)}, checks)
    assert checks.ticks.count("scan") <= 20
