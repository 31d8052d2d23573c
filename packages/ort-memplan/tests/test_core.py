"""The graph-free core: requests, the lower bound, the validator and every algorithm."""

from __future__ import annotations

import numpy as np
import pytest

import ort_memplan as mp
from ort_memplan import AllocationRequest as R


def random_requests(n: int, seed: int, devices: tuple[str, ...] = ("cpu",)) -> list[R]:
    rng = np.random.default_rng(seed)
    first = rng.integers(0, max(n // 2, 1), n)
    length = rng.geometric(0.2, n)
    last = first + length - 1
    size = np.exp(rng.uniform(np.log(16), np.log(1 << 20), n)).astype(np.int64)
    align = rng.choice([64, 256, 1024], n)
    dev = rng.choice(len(devices), n)
    return [R(i, int(s), int(f), int(la), devices[d], int(a))
            for i, (s, f, la, a, d) in enumerate(zip(size, first, last, align, dev))]


def brute_force_bound(reqs: list[R]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in reqs:
        out.setdefault(r.device, 0)
    for dev in out:
        group = [r for r in reqs if r.device == dev]
        steps = range(max(r.last for r in group) + 1)
        out[dev] = max(sum(r.reserved() for r in group if r.first <= t <= r.last) for t in steps)
    return out


def brute_force_check(p: mp.MemoryPlan, reqs: list[R]) -> None:
    for a in reqs:
        for b in reqs:
            if a.id < b.id and a.device == b.device and a.first <= b.last and b.first <= a.last:
                oa, ob = p.offsets[a.id], p.offsets[b.id]
                assert a.nbytes == 0 or b.nbytes == 0 or oa + a.nbytes <= ob or ob + b.nbytes <= oa


def test_published_ort_trace_online_planner() -> None:
    pl = mp.OnlinePlanner()
    assert [pl.allocate(i, s) for i, s in enumerate([1024, 256, 512, 1024])] == [0, 1024, 1280, 1792]
    pl.free(1)
    assert pl.allocate(4, 512) == 2816
    pl.free(3)
    assert pl.allocate(5, 600) == 1792
    assert pl.allocate(6, 200) == 1024
    assert pl.peak == 3328


def test_published_ort_trace_as_lifetimes() -> None:
    # step t allocates the blocks that start at t, then frees those whose last step is t
    reqs = [R(0, 1024, 0, 6), R(1, 256, 1, 3), R(2, 512, 2, 6), R(3, 1024, 3, 4),
            R(4, 512, 4, 6), R(5, 600, 5, 6), R(6, 200, 6, 6)]
    p = mp.plan(reqs, "online")
    assert p.offsets == {0: 0, 1: 1024, 2: 1280, 3: 1792, 4: 2816, 5: 1792, 6: 1024}
    assert p.peak == {"cpu": 3328}
    mp.validate(p, reqs)


def test_online_trace_errors() -> None:
    pl = mp.OnlinePlanner()
    pl.allocate(1, 10)
    with pytest.raises(mp.TraceError, match="already allocated"):
        pl.allocate(1, 10)
    with pytest.raises(mp.TraceError, match="never allocated"):
        pl.free(2)
    pl.free(1)
    with pytest.raises(mp.TraceError, match="freed twice"):
        pl.free(1)


@pytest.mark.parametrize("kwargs, match", [
    ({"nbytes": -1}, "negative"),
    ({"first": 3, "last": 2}, "last >= first"),
    ({"first": -1}, "steps are >= 0"),
    ({"alignment": 3}, "power of two"),
    ({"alignment": 0}, "power of two"),
])
def test_request_validation(kwargs: dict, match: str) -> None:
    base = {"id": 7, "nbytes": 10, "first": 0, "last": 1}
    with pytest.raises(mp.InvalidRequestError, match=match):
        R(**{**base, **kwargs})


def test_duplicate_ids_and_unknown_algorithm() -> None:
    with pytest.raises(mp.InvalidRequestError, match="appears twice"):
        mp.plan([R(1, 8, 0, 0), R(1, 8, 1, 1)])
    with pytest.raises(mp.InvalidRequestError, match="unknown algorithm 'nope'"):
        mp.plan([R(1, 8, 0, 0)], "nope")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lower_bound_matches_brute_force(seed: int) -> None:
    reqs = random_requests(120, seed, ("cpu", "cuda"))
    assert mp.lower_bound(reqs) == brute_force_bound(reqs)


def test_lower_bound_of_simple_case() -> None:
    reqs = [R(0, 100, 0, 1), R(1, 300, 1, 2), R(2, 256, 2, 3), R(3, 1, 5, 5, "cuda", 64)]
    assert mp.lower_bound(reqs) == {"cpu": 256 + 512, "cuda": 64}
    assert mp.busiest_step(reqs, "cpu") == 1
    assert mp.busiest_step(reqs, "gpu") is None


@pytest.mark.parametrize("algorithm", mp.ALGORITHMS)
@pytest.mark.parametrize("seed", [0, 1])
def test_every_algorithm_gives_valid_plans(algorithm: str, seed: int) -> None:
    reqs = random_requests(300, seed, ("cpu", "cuda:0"))
    p = mp.plan(reqs, algorithm)
    mp.validate(p, reqs)
    brute_force_check(p, reqs)
    bound = mp.lower_bound(reqs)
    assert p.lower_bound == bound
    for dev in bound:
        assert p.peak[dev] >= bound[dev]
    for r in reqs:
        assert p.offsets[r.id] % r.alignment == 0


@pytest.mark.parametrize("seed", range(6))
def test_auto_never_worse_than_either_baseline(seed: int) -> None:
    reqs = random_requests(400, seed, ("cpu", "cuda"))
    auto = mp.plan(reqs)
    for base in ("online", "greedy_by_size"):
        other = mp.plan(reqs, base)
        for dev in other.peak:
            assert auto.peak[dev] <= other.peak[dev]
    assert auto.algorithm.startswith("auto[")
    assert set(auto.candidates) >= {"online", "greedy_by_size", "greedy_by_breadth"}


def test_greedy_by_size_places_largest_first_at_zero() -> None:
    reqs = [R(0, 256, 0, 2), R(1, 1024, 1, 3), R(2, 512, 2, 2)]
    p = mp.plan(reqs, "greedy_by_size")
    assert p.offsets[1] == 0
    assert p.offsets[2] == 1024
    assert p.offsets[0] == 1536
    assert p.peak["cpu"] == 1792 == p.lower_bound["cpu"]


def test_greedy_best_fit_picks_smallest_gap() -> None:
    # by size: 4096@0 (dies at step 0), 2048@4096, 1024@6144 (dies), 768@7168. At step 1 the gaps
    # are [0, 4096) and [6144, 7168): a new 512 takes the smaller one (first-fit would take 0).
    reqs = [R(0, 4096, 0, 0), R(1, 2048, 0, 5), R(2, 1024, 0, 0), R(3, 768, 0, 5), R(4, 512, 1, 1)]
    p = mp.plan(reqs, "greedy_by_size")
    mp.validate(p, reqs)
    assert [p.offsets[i] for i in range(4)] == [0, 4096, 6144, 7168]
    assert p.offsets[4] == 6144
    online = mp.plan(reqs, "online")
    assert online.offsets[4] == 6144


def test_zero_size_requests_take_no_space() -> None:
    reqs = [R(0, 0, 0, 3), R(1, 256, 0, 3), R(2, 0, 1, 1)]
    for alg in mp.ALGORITHMS:
        p = mp.plan(reqs, alg)
        mp.validate(p, reqs)
        assert p.peak["cpu"] == 256


def test_empty_plan() -> None:
    p = mp.plan([])
    assert p.offsets == {} and p.peak == {} and p.ratio() == 1.0
    mp.validate(p, [])


def test_validator_names_both_ids_and_the_step() -> None:
    reqs = [R(10, 512, 0, 4), R(11, 256, 3, 6), R(12, 256, 5, 6)]
    good = mp.plan(reqs)
    mp.validate(good, reqs)
    bad = mp.MemoryPlan(offsets={10: 0, 11: 256, 12: 0}, peak={"cpu": 1024}, lower_bound={"cpu": 768},
                        algorithm="hand-made")
    with pytest.raises(mp.OverlapError, match=r"blocks 10 \(bytes \[0, 512\), steps 0..4\) and 11 .* steps 3..6.* live at step 3") as e:
        mp.validate(bad, reqs)
    assert (e.value.first_id, e.value.second_id, e.value.step) == (10, 11, 3)
    # 12 reuses 10's bytes after 10 died: fine once 11 moves out of the way
    ok = mp.MemoryPlan(offsets={10: 0, 11: 512, 12: 0}, peak={"cpu": 768}, lower_bound={}, algorithm="x")
    mp.validate(ok, reqs)


@pytest.mark.parametrize("offsets, peak, error, match", [
    ({10: 0}, 1024, mp.PlanValidationError, "no offset"),
    ({10: 0, 11: 100}, 1024, mp.MisalignedError, "offset 100 is not"),
    ({10: 0, 11: 768}, 1000, mp.PlanValidationError, "past the peak"),
])
def test_validator_catches_bad_plans(offsets: dict, peak: int, error: type, match: str) -> None:
    reqs = [R(10, 512, 0, 4), R(11, 256, 3, 6)]
    bad = mp.MemoryPlan(offsets=offsets, peak={"cpu": peak}, lower_bound={}, algorithm="bad")
    with pytest.raises(error, match=match):
        mp.validate(bad, reqs)


def test_validator_catches_overlap_among_many() -> None:
    reqs = random_requests(200, 5)
    p = mp.plan(reqs)
    victim = next(r for r in reqs if r.nbytes > 0)
    other = next(r for r in reqs if r.id != victim.id and r.nbytes > 0 and r.alignment <= victim.alignment
                 and r.first <= victim.last and victim.first <= r.last)
    offsets = dict(p.offsets)
    offsets[other.id] = offsets[victim.id]
    broken = mp.MemoryPlan(offsets=offsets, peak={"cpu": p.peak["cpu"] * 2}, lower_bound={}, algorithm="b")
    with pytest.raises(mp.OverlapError):
        mp.validate(broken, reqs)


def test_plan_offset_lookup_and_ratio() -> None:
    reqs = [R(0, 256, 0, 0), R(1, 256, 0, 1)]
    p = mp.plan(reqs)
    assert p.offset(0) in (0, 256)
    with pytest.raises(mp.LookupMissError, match="request id 5 is not in this plan"):
        p.offset(5)
    assert p.ratio("cpu") == p.peak["cpu"] / p.lower_bound["cpu"] == 1.0


def test_red_zone_reserves_guard_bytes() -> None:
    reqs = [R(0, 256, 0, 1), R(1, 256, 0, 1)]
    p = mp.plan(reqs, red_zone=16)
    mp.validate(p, reqs)
    assert abs(p.offsets[0] - p.offsets[1]) >= 256 + 16
    assert p.red_zone == 16
    with pytest.raises(mp.InvalidRequestError, match="red_zone=-1"):
        mp.plan(reqs, red_zone=-1)


def test_planning_many_requests_with_long_lifetimes() -> None:
    rng = np.random.default_rng(3)
    n = 3000
    first = rng.integers(0, n, n)
    length = np.where(rng.random(n) < 0.05, rng.integers(1, n, n), rng.geometric(0.3, n))
    reqs = [R(i, int(s), int(f), int(f + ln - 1)) for i, (s, f, ln) in
            enumerate(zip(rng.integers(1, 1 << 16, n), first, length))]
    for alg in ("greedy_by_size", "online", "auto"):
        p = mp.plan(reqs, alg)
        mp.validate(p, reqs)


@pytest.mark.parametrize("values", [[], [3], [5, 5], [4, 1, 4, 9, 0, 1], list(range(50, 0, -3)) * 2])
def test_unique_sorted_is_np_unique(values: list[int]) -> None:
    from ort_memplan._arrays import unique_sorted

    a = np.asarray(values, np.int64)
    got = unique_sorted(a)
    assert got.dtype == np.unique(a).dtype and got.tolist() == np.unique(a).tolist()


@pytest.mark.parametrize("seed", range(6))
def test_online_planner_array_scan_places_as_the_loop(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many live blocks take the array best-fit scan; it places every block where the loop does."""
    import random

    from ort_memplan import _online

    rng = random.Random(seed)
    ops: list[tuple[int, int, int] | int] = []
    live: list[int] = []
    for b in range(600):
        ops.append((b, rng.choice([0, 1, 64, 100, 4096, rng.randint(1, 10**6)]), rng.choice([1, 64, 256])))
        if rng.random() < 0.3:
            continue  # alive to the end, as a decoder's KV outputs
        live.append(b)
        while live and rng.random() < 0.6:
            ops.append(live.pop(rng.randrange(len(live))))

    def replay(vector_from: int) -> tuple[list[int], int]:
        monkeypatch.setattr(_online, "_VECTOR_FROM", vector_from)
        pl, out = mp.OnlinePlanner(), []
        for op in ops:
            if isinstance(op, tuple):
                out.append(pl.allocate(*op))
            else:
                pl.free(op)
        return out, pl.peak

    assert replay(0) == replay(10**9)
