"""Runtime pieces: the shape-key cache, pre-allocated buffers (budget, concurrency), red zones."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ort_memplan as mp
from ort_memplan import AllocationRequest as R


# -- pattern cache -------------------------------------------------------------------------------
def test_shape_key_from_arrays_and_shapes() -> None:
    k1 = mp.shape_key({"b": np.zeros((2, 3)), "a": (1, 4)})
    assert k1 == (("a", (1, 4)), ("b", (2, 3)))
    assert mp.shape_key({"a": [1, 4], "b": (2, 3)}) == k1
    with pytest.raises(mp.InvalidRequestError, match="feed 'a'"):
        mp.shape_key({"a": ("batch", 4)})


def test_static_model_is_planned_at_initialization() -> None:
    cache = mp.PatternCache()
    key = mp.shape_key({"x": (1, 8)})
    reqs = [R(0, 512, 0, 1), R(1, 512, 1, 2), R(2, 512, 2, 3)]
    planned = cache.plan_static(key, reqs)
    mp.validate(planned, reqs)
    assert cache.get(key) is planned
    assert cache.get(mp.shape_key({"x": (1, 9)})) is None
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)


def test_static_graph_plan_cached_at_initialization(chain_graph) -> None:
    cache = mp.PatternCache()
    key = mp.shape_key({"x": (1, 256)})
    gp = mp.plan_graph(chain_graph, chain_graph.nodes, lambda n: "cpu")
    cache.put(key, gp)
    assert cache.get(key) is gp
    assert cache.get(key).offset_of("b") == gp.offset_of("a")


def fake_run(recorder: mp.TraceRecorder, seq: int) -> None:
    """A 4-node chain whose activations scale with the sequence length; frees when a value dies."""
    recorder.allocate(0, 64 * seq)           # node 0 output
    recorder.allocate(1, 128 * seq)          # node 1 output
    recorder.free(0)
    recorder.allocate(2, 64 * seq)           # node 2 output
    recorder.allocate(-1, 1000)              # node 2 workspace
    recorder.free(-1)
    recorder.free(1)
    recorder.allocate(3, 32 * seq)           # graph output, never freed


def test_dynamic_model_traces_first_run_per_shape_key() -> None:
    cache = mp.PatternCache()
    k8, k16 = mp.shape_key({"ids": (1, 8)}), mp.shape_key({"ids": (1, 16)})
    assert cache.get(k8) is None
    with cache.trace(k8) as rec:
        fake_run(rec, 8)
    p8 = cache.get(k8)
    assert p8 is not None and k8 in cache and k16 not in cache
    reqs = rec.requests()
    mp.validate(p8, reqs)
    assert {r.id for r in reqs} == {0, 1, 2, 3, -1}
    by = {r.id: r for r in reqs}
    assert (by[0].first, by[0].last) == (0, 1)       # allocated at event 0, freed at event 2
    assert by[3].last == by[3].first                  # never freed: live to the end of the trace
    # the workspace is allocated after block 0 died: it may take 0's bytes
    assert by[-1].first > by[0].last
    assert cache.get(k16) is None
    with cache.trace(k16) as rec16:
        fake_run(rec16, 16)
    assert cache.get(k16).peak["cpu"] > p8.peak["cpu"]
    assert cache.get(k8) is p8
    assert len(cache.keys()) == 2


def test_failed_first_run_caches_nothing() -> None:
    cache = mp.PatternCache()
    key = mp.shape_key({"x": (3,)})
    with pytest.raises(RuntimeError), cache.trace(key) as rec:
        rec.allocate(0, 10)
        raise RuntimeError("kernel failed")
    assert cache.get(key) is None


def test_trace_errors_and_published_trace() -> None:
    rec = mp.PatternCache().trace(mp.shape_key({}))
    rec.allocate(1, 8)
    with pytest.raises(mp.TraceError, match="allocated twice"):
        rec.allocate(1, 8)
    with pytest.raises(mp.TraceError, match="not live"):
        rec.free(2)
    events = [("alloc", 0, 1024), ("alloc", 1, 256), ("alloc", 2, 512), ("alloc", 3, 1024), ("free", 1),
              ("alloc", 4, 512), ("free", 3), ("alloc", 5, 600), ("alloc", 6, 200)]
    reqs = mp.requests_from_trace(events)
    p = mp.plan(reqs, "online")
    assert [p.offsets[i] for i in range(7)] == [0, 1024, 1280, 1792, 2816, 1792, 1024]
    assert p.peak["cpu"] == 3328
    assert mp.plan(reqs).peak["cpu"] <= 3328
    with pytest.raises(mp.TraceError, match="unknown trace event"):
        mp.requests_from_trace([("realloc", 1)])


# -- pre-allocated buffers -----------------------------------------------------------------------
def two_device_plan() -> tuple[mp.MemoryPlan, list[R]]:
    reqs = [R(0, 1000, 0, 1), R(1, 3000, 1, 2), R(2, 500, 2, 3), R(3, 4096, 0, 3, "cuda"),
            R(-1, 256, 2, 2, "cuda")]
    return mp.plan(reqs), reqs


def test_buffers_are_allocated_once_and_reused() -> None:
    p, reqs = two_device_plan()
    host, dev = mp.HostAllocator(), mp.HostAllocator()
    bufs = mp.ExecutionBuffers(p, {"cpu": host, "cuda": dev}, requests=reqs)
    assert (host.allocations, dev.allocations) == (1, 1)
    assert host.allocated_bytes == p.peak["cpu"] and dev.allocated_bytes == p.peak["cuda"]
    first = bufs.buffers["cpu"]
    for i in range(3):
        with bufs.run() as run:
            run.view(1)[:] = i + 1
            assert run.view(1).shape == (3000,)
    assert bufs.buffers["cpu"] is first and host.allocations == 1 and bufs.runs == 3
    assert int(bufs.view(1)[0]) == 3
    buf, off, nb = bufs.block(-1)
    assert buf is bufs.buffers["cuda"] and off == p.offsets[-1] and nb == 256
    with pytest.raises(mp.LookupMissError, match="request id 9"):
        bufs.block(9)


def test_concurrent_run_is_refused() -> None:
    p, reqs = two_device_plan()
    bufs = mp.ExecutionBuffers(p, {"cpu": mp.HostAllocator(), "cuda": mp.HostAllocator()}, requests=reqs)
    entered, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first_run() -> None:
        try:
            with bufs.run():
                entered.set()
                release.wait(10)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=first_run)
    t.start()
    assert entered.wait(10)
    assert bufs.busy

    refused: list[BaseException] = []

    def second_run() -> None:
        try:
            with bufs.run():
                pass
        except mp.ConcurrentRunError as e:
            refused.append(e)

    t2 = threading.Thread(target=second_run)
    t2.start()
    t2.join(10)
    release.set()
    t.join(10)
    assert not errors
    assert len(refused) == 1 and "one run at a time" in str(refused[0])
    with bufs.run():          # after the first run ends, the next run is accepted
        pass
    assert bufs.runs == 2


def test_budget_exceeded_at_creation_names_the_numbers() -> None:
    p, reqs = two_device_plan()
    host = mp.HostAllocator()
    names = {0: "/a/MatMul_output_0", 1: "/b/Softmax_output_0", 2: "/c/Add_output_0"}
    with pytest.raises(mp.BudgetExceededError) as e:
        mp.ExecutionBuffers(p, {"cpu": host, "cuda": mp.HostAllocator()}, requests=reqs,
                            budgets={"cpu": 2048}, names=names)
    err = e.value
    assert (err.device, err.needed, err.available) == ("cpu", p.peak["cpu"], 2048)
    assert err.contributors[0] == ("/b/Softmax_output_0", 3000)
    assert f"needs {p.peak['cpu']} bytes" in str(err) and "allows 2048 bytes" in str(err)
    assert "'/b/Softmax_output_0'" in str(err)
    assert host.allocations == 0          # nothing allocated when the plan does not fit
    with pytest.raises(mp.InvalidRequestError, match="no allocator was given for it"):
        mp.ExecutionBuffers(p, {"cpu": host}, requests=reqs)
    ok = mp.ExecutionBuffers(p, {"cpu": host, "cuda": mp.HostAllocator()}, requests=reqs,
                             budgets={"cpu": p.peak["cpu"], "cuda": 1 << 20})
    assert ok.buffers["cpu"].nbytes == p.peak["cpu"]


def test_graph_plan_buffers_budget_names_values(chain_graph) -> None:
    gp = mp.plan_graph(chain_graph, chain_graph.nodes, lambda n: "cpu", inplace=False)
    with pytest.raises(mp.BudgetExceededError, match=r"'a' 2.00 KiB") as e:
        gp.buffers({"cpu": mp.HostAllocator()}, budgets={"cpu": 1024})
    assert {name for name, _ in e.value.contributors} == {"a", "b", "x"}


# -- red zones -----------------------------------------------------------------------------------
def run_graph(nodes, gp: mp.GraphPlan, bufs: mp.ExecutionBuffers, guard: mp.RedZoneGuard,
              overrun: dict[str, int] | None = None, ws_overrun: int = 0) -> None:
    """Execute `nodes` with fake kernels that fill their outputs (and workspace) completely."""
    overrun = overrun or {}
    with bufs.run():
        for step, node in enumerate(nodes):
            guard.before_step(step)
            for value in node.outputs:
                if value in gp.activations.value_ids:
                    buf, off, nb = bufs.block(gp.activations.value_ids[value])
                    buf[off:off + nb + overrun.get(node.name, 0)] = step + 1
            for (node_index, slot), req in gp.slot_requests.items():
                if node_index == node.index:
                    off, nb = gp.workspace(node_index, slot)
                    bufs.buffers[req.device][off:off + nb + ws_overrun] = 7
            guard.after_step(step)


def test_red_zone_clean_run_passes(chain_graph) -> None:
    order = chain_graph.nodes
    gp = mp.plan_graph(chain_graph, order, lambda n: "cpu", workspace={(order[3].index, 0): 700},
                       red_zone=64)
    mp.validate(gp.plan, gp.requests)
    bufs = gp.buffers({"cpu": mp.HostAllocator()})
    guard = mp.RedZoneGuard(bufs, node_names=gp.activations.node_names)
    run_graph(order, gp, bufs, guard)
    assert guard.checks > 0


@pytest.mark.parametrize("bad_node, ws_overrun", [("relu2", 0), ("mm5", 0), ("mm3", 1)])
def test_red_zone_names_the_node_that_wrote_past_its_block(chain_graph, bad_node: str,
                                                            ws_overrun: int) -> None:
    order = chain_graph.nodes
    gp = mp.plan_graph(chain_graph, order, lambda n: "cpu", workspace={(order[3].index, 0): 700},
                       red_zone=32)
    bufs = gp.buffers({"cpu": mp.HostAllocator()})
    guard = mp.RedZoneGuard(bufs, node_names=gp.activations.node_names)
    overrun = {} if ws_overrun else {bad_node: 1}
    with pytest.raises(mp.RedZoneViolation) as e:
        run_graph(order, gp, bufs, guard, overrun, ws_overrun)
    assert e.value.node == bad_node
    assert f"node {bad_node!r}" in str(e.value)
    assert e.value.first_bad_byte == 0
    if ws_overrun:
        assert e.value.block == "workspace of 'mm3' slot 0"


def _guarded(red_zone: int = 16):
    reqs = [R(0, 100, 0, 1), R(1, 40, 1, 2), R(2, 300, 0, 2)]
    p = mp.plan(reqs, red_zone=red_zone)
    bufs = mp.ExecutionBuffers(p, {"cpu": mp.HostAllocator()}, requests=reqs, names={0: "a", 1: "b", 2: "c"})
    return p, reqs, bufs, mp.RedZoneGuard(bufs, node_names=["n0", "n1", "n2"])


@pytest.mark.parametrize("red_zone", [1, 16, 300])
def test_red_zone_plans_guards_before_and_after_every_block_and_margins_at_the_buffer_ends(red_zone) -> None:
    p, reqs, _, _ = _guarded(red_zone)
    mp.validate(p, reqs)
    margin = mp.buffer_margin(red_zone)
    assert margin >= max(red_zone, 64 * 1024) and margin % 4096 == 0
    for r in reqs:
        lead, tail = r.guards(red_zone)
        assert lead >= red_zone and tail >= red_zone and p.offsets[r.id] % r.alignment == 0
        assert margin <= p.offsets[r.id] - lead and p.offsets[r.id] + r.nbytes + tail <= p.peak["cpu"] - margin
    assert mp.buffer_margin(0) == 0 and reqs[0].guards(0) == (0, reqs[0].reserved() - 100)


@pytest.mark.parametrize(("value", "at", "side", "distance"), [
    ("a", -1, "before", (1, 1)), ("a", -5, "before", (5, 5)), ("b", 40, "after", (1, 1)), ("c", 303, "after", (4, 4)),
])
def test_red_zone_names_the_side_and_distance_of_a_write_outside_a_block(value, at, side, distance) -> None:
    p, _, bufs, guard = _guarded()
    rid = {"a": 0, "b": 1, "c": 2}[value]
    with bufs.run():
        guard.before_step(0)
        guard.after_step(0)
        guard.before_step(1)
        bufs.buffers["cpu"][p.offsets[rid] + at] ^= 0xFF
        with pytest.raises(mp.RedZoneViolation, match=f"node 'n1' \\(step 1\\) wrote .* of {value!r}") as e:
            guard.after_step(1)
    assert (e.value.node, e.value.block, e.value.side, e.value.distance) == ("n1", value, side, distance)
    assert e.value.first_bad_byte == distance[0] - 1


@pytest.mark.parametrize("end", ["start", "end"])
def test_red_zone_margins_catch_a_write_far_outside_every_block(end) -> None:
    p, _, bufs, guard = _guarded()
    at = 10 if end == "start" else p.peak["cpu"] - 10
    with bufs.run():
        guard.before_step(0)
        bufs.buffers["cpu"][at] ^= 0xFF
        with pytest.raises(mp.RedZoneViolation, match=f"into its {guard.margin}-byte {end} margin") as e:
            guard.after_step(0)
    assert e.value.block == "<planned buffer>" and e.value.node == "n0"


def test_red_zone_checksums_what_a_step_reads() -> None:
    _, _, bufs, guard = _guarded()
    weight = np.arange(12, dtype=np.float32)
    with bufs.run():
        guard.before_step(0, {"w": weight, "seq": [1, 2], "none": None})
        guard.after_step(0)  # unchanged: fine; what has no host bytes is not checked
        guard.before_step(1, {"w": weight})
        weight[3] = -1
        with pytest.raises(mp.ConstInputWritten, match=r"node 'n1' \(step 1\) wrote through its const input 'w'") as e:
            guard.after_step(1)
    assert (e.value.node, e.value.input_name, e.value.step) == ("n1", "w", 1)


def test_red_zone_needs_guard_bytes_and_host_access() -> None:
    reqs = [R(0, 100, 0, 0)]
    plain = mp.plan(reqs)
    bufs = mp.ExecutionBuffers(plain, {"cpu": mp.HostAllocator()}, requests=reqs)
    with pytest.raises(mp.InvalidRequestError, match="red_zone=0"):
        mp.RedZoneGuard(bufs)

    class Opaque:
        def allocate(self, nbytes: int) -> bytearray:
            return bytearray(nbytes)

    guarded = mp.plan(reqs, red_zone=16)
    opaque = mp.ExecutionBuffers(guarded, {"cpu": Opaque()}, requests=reqs)
    with pytest.raises(mp.InvalidRequestError, match="no read/write host access"):
        mp.RedZoneGuard(opaque)
    assert isinstance(Opaque(), mp.Allocator)


def test_close_frees_each_buffer_through_its_allocator_and_refuses_later_runs() -> None:
    p, reqs = two_device_plan()

    class Freeing(mp.HostAllocator):
        def __init__(self) -> None:
            super().__init__()
            self.freed: list[object] = []

        def free(self, buffer: object) -> None:
            self.freed.append(buffer)

    dev = Freeing()
    bufs = mp.ExecutionBuffers(p, {"cpu": mp.HostAllocator(), "cuda": dev}, requests=reqs)
    arena = bufs.buffers["cuda"]
    with bufs.run():
        with pytest.raises(mp.ConcurrentRunError, match="while a run is using them"):
            bufs.close()
    bufs.close()
    assert dev.freed == [arena] and bufs.buffers == {}
    with pytest.raises(mp.InvalidRequestError, match="closed"):
        with bufs.run():
            pass


def test_a_device_that_cannot_allocate_leaves_nothing_allocated_on_the_others() -> None:
    p, reqs = two_device_plan()

    class Tracked(mp.HostAllocator):
        def __init__(self, fail: bool) -> None:
            super().__init__()
            self.fail, self.live = fail, 0

        def allocate(self, nbytes: int) -> object:
            if self.fail:
                raise MemoryError("device full")
            self.live += 1
            return super().allocate(nbytes)

        def free(self, buffer: object) -> None:
            self.live -= 1

    cpu, cuda = Tracked(False), Tracked(True)  # "cpu" sorts first: allocated, then "cuda" fails
    with pytest.raises(MemoryError, match="device full"):
        mp.ExecutionBuffers(p, {"cpu": cpu, "cuda": cuda}, requests=reqs)
    assert cpu.live == 0


def test_a_host_buffer_the_machine_cannot_give_is_a_typed_error(monkeypatch):
    import numpy as np

    import ort_memplan
    from ort_memplan._buffers import HostAllocator

    def refuse(*a, **k):
        raise MemoryError("no memory")

    monkeypatch.setattr(np, "zeros", refuse)
    alloc = HostAllocator()
    with pytest.raises(ort_memplan.HostMemoryError, match=r"could not allocate a planned buffer of 137438953472 bytes"):
        alloc.allocate(128 << 30)
    assert alloc.allocations == 0 and alloc.allocated_bytes == 0


def test_the_retaining_host_allocator_hands_the_kept_buffer_to_the_next_allocation_it_can_hold():
    host = mp.RetainingHostAllocator()
    first = host.allocate(4096)
    assert host.allocations == 1 and host.kept_bytes == 0
    host.free(first[:100])  # a view of it: the whole buffer is kept
    assert host.kept_bytes == 4096
    again = host.allocate(1000)  # fits: the kept buffer, no allocation
    assert again.base is first and again.nbytes == 1000 and host.allocations == 1 and host.kept_bytes == 0
    bigger = host.allocate(8192)  # nothing kept: a fresh one
    assert bigger.base is None and host.allocations == 2
    host.free(again)
    host.free(bigger)
    assert host.kept_bytes == 8192  # the largest one given back
    host.free(np.zeros(3, np.float32))  # not one of its buffers: ignored
    assert host.kept_bytes == 8192
    host.release()
    assert host.kept_bytes == 0 and host.allocate(16).base is None


def test_red_zone_checksums_any_element_type_and_strided_views() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")  # bfloat16 / float8 / int4 arrays have no buffer format
    _, _, bufs, guard = _guarded()
    bf16 = np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16)
    full = np.arange(24, dtype=np.float32).reshape(4, 6)
    strided = full[:, ::2]
    with bufs.run():
        guard.before_step(0, {"bf16": bf16, "strided": strided})
        full[0, 2] = -1  # the second element of the strided view's first row
        with pytest.raises(mp.ConstInputWritten, match="const input 'strided'"):
            guard.after_step(0)
