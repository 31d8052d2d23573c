"""The benchmark entry point: rows per case and algorithm (times are printed, never asserted)."""

from __future__ import annotations

import ort_memplan as mp
from ort_memplan import bench


def test_bench_rows_cover_every_case_and_algorithm() -> None:
    rows = bench.run(sizes=(300,), zoo=True, light_models=False)
    cases = {r["case"] for r in rows}
    assert {"random-300", "decoder-l2-s64", "decoder-l4-s128-layernorm"} <= cases
    for case in cases:
        mine = {r["algorithm"]: r for r in rows if r["case"] == case}
        assert set(mine) == set(mp.ALGORITHMS)
        for r in mine.values():
            assert r["peak"] >= r["lower_bound"] > 0
            assert r["ratio"] == r["peak"] / r["lower_bound"]
            assert r["seconds"] >= 0
        assert mine["auto"]["peak"] <= min(mine["online"]["peak"], mine["greedy_by_size"]["peak"])
        if case.startswith("decoder"):
            assert mine["auto"]["lower_bound_without_inplace"] >= mine["auto"]["lower_bound"]
            assert mine["auto"]["unknown_sizes"] == 0
    table = bench.format_table(rows)
    assert "decoder-l2-s64" in table and "peak/LB" in table
    worst = bench.summary(rows)
    assert worst["auto"] <= worst["online"]


def test_random_requests_are_reproducible() -> None:
    a, b = bench.random_requests(200, seed=4), bench.random_requests(200, seed=4)
    assert a == b and len(a) == 200
    assert a != bench.random_requests(200, seed=5)
