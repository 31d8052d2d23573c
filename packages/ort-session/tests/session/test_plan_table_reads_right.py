"""The plan table leads with what is allocated: the first total printed per device is its planned total, and
the per-node cost sums (no liveness reuse) come after, labelled as auto-fit's count, never as "X / budget"."""

from __future__ import annotations

import re

import pytest

from ort_partition import format_bytes
from ort_session.cli import main

SIM = "SimulatedGPUExecutionProvider"


@pytest.mark.parametrize("argv", [
    ["plan", "--budget", "gpu:2MiB", "--providers", SIM],            # node granularity: cost sum above the budget
    ["plan", "--budget", "gpu:12MiB", "--providers", SIM],           # layer granularity
])
def test_first_total_printed_per_device_is_the_planned_total(argv, capsys):
    assert main([*argv, "--json"]) == 0
    import json

    planned = {d["ep"]: d["total"] for d in json.loads(capsys.readouterr().out)["devices"].values()}
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for ep, total in planned.items():
        first = next(line for line in lines if ep in line and re.search(r"\d", line))
        # the memory plan's row: weights, peak, workspace, total, budget: the planned total is among its figures
        assert format_bytes(total) in first, (ep, first)
    assert lines[0].startswith("memory plan (what each device allocates")
    assert "/ budget" not in out  # the no-reuse sums are never set against the budget
    assert "cost sum (no reuse)" in out and "without liveness reuse" in out


def test_demo_prints_the_plan_before_the_cost_sums(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.index("what each device allocates") < out.index("cost sum (no reuse)")
    assert "/ budget" not in out
