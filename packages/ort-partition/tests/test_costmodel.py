"""The streaming cost model: roofline per layer, copies overlapped with compute, and the per-layer choice
for prefill (compute-bound: stream) and decode (bandwidth-bound: a fast host link still loses to the CPU
when the link is slow)."""

import attrs
import pytest

import ort_partition as op
from ort_graph import zoo

DEV = op.DeviceSpeeds("d", 1 << 30, h2d_bandwidth=10e9, flops=100e12, memory_bandwidth=1e12)
CPU = op.CpuProfile(flops=100e9, memory_bandwidth=20e9)


def _works(n, nbytes, flops):
    return [op.LayerWork(i, nbytes, flops) for i in range(n)]


def test_streamed_copies_overlap_with_compute():
    works = _works(4, 10_000_000, 1e12)  # copy 1 ms, compute 10 ms on the device
    t = op.run_time(works, dict.fromkeys(range(4), op.STREAMED), DEV, CPU)
    resident = op.run_time(works, dict.fromkeys(range(4), op.RESIDENT), DEV, CPU)
    assert t == pytest.approx(resident + 0.001)  # only the first copy is exposed


def test_copy_bound_layers_are_paced_by_the_link():
    works = _works(4, 100_000_000, 1e9)  # copy 10 ms, compute ~0.1 ms
    t = op.run_time(works, dict.fromkeys(range(4), op.STREAMED), DEV, CPU)
    assert t == pytest.approx(4 * 0.010, rel=0.05)


def test_cpu_layers_cost_the_cpu_roofline():
    works = _works(2, 20_000_000, 1e9)
    assert op.run_time(works, {}, DEV, CPU) == pytest.approx(2 * max(1e9 / 100e9, 20e6 / 20e9))


@pytest.mark.parametrize(("sequence", "streams"), [(512, True), (1, False)])
def test_prefill_streams_and_decode_stays_on_a_fast_cpu(sequence, streams):
    cfg = zoo.DecoderConfig(layers=2, hidden=64, vocab=256)
    model = zoo.decoder(cfg)
    from ort_graph import resolve_shapes

    resolve_shapes(model, {"batch": 1, "sequence": sequence, "past_sequence": 0})
    nodes = [n for n in model.graph.nodes if op.node_group(n) == 0]
    work = op.layer_work(model.graph, 0, nodes)
    assert work.weight_bytes > 0 and work.flops >= 2 * sequence * (work.weight_bytes // 4) * 0.9
    slow_link = attrs.evolve(DEV, h2d_bandwidth=2e9)  # slower than the CPU's memory
    fast_cpu = op.CpuProfile(flops=200e9, memory_bandwidth=20e9)
    choice = op.choose_layers([work], [], [0], slow_link, fast_cpu)
    assert (choice[0] == op.STREAMED) is streams


def test_resident_layers_stay_and_force_streams_every_candidate():
    works = _works(3, 1_000_000_000, 1e6)  # copy-bound: never worth streaming by cost
    assert op.choose_layers(works, [0], [1, 2], DEV, CPU) == {0: op.RESIDENT, 1: op.CPU, 2: op.CPU}
    assert op.choose_layers(works, [0], [1], DEV, CPU, force=True) == {0: op.RESIDENT, 1: op.STREAMED, 2: op.CPU}


def test_device_speeds_from_a_profile_and_the_measured_cpu():
    @attrs.frozen
    class Profile:
        name: str = "h100"
        memory_bytes: int = 80 << 30
        memory_bandwidth: int = 3_350_000_000_000
        sm_count: int = 132

    s = op.device_speeds(Profile())
    assert s.h2d_bandwidth == 55e9 and s.memory_bandwidth == 3.35e12 and s.flops > 1e14
    cpu = op.measure_cpu_profile()
    assert cpu.flops > 0 and cpu.memory_bandwidth > 0 and op.measure_cpu_profile() is cpu
