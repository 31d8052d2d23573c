"""Weight streaming on the simulated GPU: a decoder whose weights exceed the device budget several
times runs with streamed layers, matches the CPU-only run, stays within the budget as the allocator
measures it, moves exactly the planned bytes, and keeps the copy/compute ordering (checked)."""

import json
import warnings

import numpy as np
import pytest

import ort_abi
from ort_graph import zoo
from ort_session import InferenceSession, InvalidOptionError
from ort_session._streaming_run import WeightStreamer

CFG = zoo.DecoderConfig(layers=6, hidden=64, vocab=256)
DIMS = {"batch": 1, "sequence": 16, "past_sequence": 0}
SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
WEIGHTS = sum(t.nbytes for t in zoo.decoder(CFG).graph.initializers.values())
BUDGET = WEIGHTS // 4  # the weights exceed the budget four times


def _session(mode="on", budget=BUDGET, **extra):
    opts = {"free_dimension_overrides": DIMS, "budgets": f"gpu:{budget}", "session.weight_streaming": mode, **extra}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(zoo.decoder(CFG), opts, providers=SIM)


@pytest.fixture(scope="module")
def reference():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS})
    return cpu.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))


@pytest.mark.parametrize("pre_allocate", ["0", "1"])
def test_streamed_decoder_matches_the_cpu_run_within_the_budget(reference, pre_allocate):
    sess = _session(**{"session.pre_allocate_execution_buffers": pre_allocate})
    plan = sess.placement.streaming
    assert plan is not None and len(plan.layers) >= 3  # several layers share the two slots
    for _ in range(2):  # the second run reuses the slots
        for got, want in zip(sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0)), reference):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    usage = sess.device_memory()["simgpu"]
    assert usage["peak"] <= BUDGET and usage["capacity"] == BUDGET
    totals = sess.memory.device_totals()["simgpu"]
    assert totals["streaming_slots"] == 2 * plan.slot_bytes and totals["total"] <= BUDGET
    copies = sess.plan.copies()["streamed"]
    stats = sess.last_run_stats
    assert (stats.streamed_copies, stats.streamed_bytes) == (copies["count"], copies["bytes"])
    assert copies["bytes"] == sum(layer.nbytes for layer in plan.layers) > BUDGET
    sess.close()


def test_off_keeps_the_placement_without_streaming():
    off = _session("off")
    assert off.placement.streaming is None and not off.memory.gplan.run_requests
    assert off.last_run_stats.streamed_copies == 0
    plain = _session("off")
    assert off.placement.ep_of == plain.placement.ep_of


def test_plan_shows_the_choice_per_layer_and_the_strategies():
    sess = _session()
    d = json.loads(json.dumps(sess.plan.to_dict()))
    s = d["streaming"]
    assert {"all-CPU", "partial offload", "with streaming"} <= set(s["predicted_seconds_per_run"])
    assert [row["layer"] for row in s["layers"]] == list(range(CFG.layers))
    assert {row["choice"] for row in s["layers"]} <= {"resident", "streamed", "cpu"}
    assert d["copies"]["streamed"]["count"] == sum(len(layer.weights) for layer in sess.placement.streaming.layers)
    table = sess.plan.to_table()
    assert "weight streaming (on)" in table and "with streaming" in table


def test_a_budget_below_two_slots_streams_nothing_and_stays_within_it():
    small = WEIGHTS // 40  # less than two layers' weights: no room for the slots
    sess = _session(budget=small)
    assert sess.placement.streaming is None
    assert sess.memory.device_totals().get("simgpu", {}).get("total", 0) <= small


@pytest.mark.parametrize("skip", ["_copied", "_slot_free"])
def test_a_wrong_copy_order_is_caught(monkeypatch, skip):
    sess = _session()
    monkeypatch.setattr(WeightStreamer, skip, lambda self, j: None)  # the wait on the event is left out
    with pytest.raises(ort_abi.StreamOrderError, match="copy|overwrites"):
        sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    monkeypatch.undo()
    sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))  # the right order runs, and nothing was left behind
    sess.close()


def test_an_unknown_mode_is_refused():
    with pytest.raises(InvalidOptionError, match="weight_streaming"):
        _session("sometimes")


def test_streamed_external_weights_are_read_from_the_file_mapping(tmp_path, reference):
    path = zoo.write_decoder(tmp_path / "m.onnx", CFG, external_data=True)
    opts = {"free_dimension_overrides": DIMS, "budgets": f"gpu:{BUDGET}", "session.weight_streaming": "on"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), opts, providers=SIM)
    for got, want in zip(sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0)), reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    inits = sess.model.graph.initializers
    streamed = sess.placement.streaming.weight_names
    external = [n for n in streamed if inits[n].is_external]  # small ones (norms) are stored in the proto
    assert sum(inits[n].nbytes for n in external) > 0.9 * sum(inits[n].nbytes for n in streamed)
    # every streamed external weight is a view of the file mapping: the runtime materialised none of its bytes
    assert sum(inits[n].numpy().nbytes for n in external if not isinstance(inits[n].numpy(), np.memmap)) == 0
    sess.close()


def test_streamed_inline_weights_are_copied_from_the_model_file_mapping(tmp_path, reference):
    # inline raw_data sits at arbitrary offsets in the .onnx file: most weights are misaligned there, and a
    # kernel reading one gets an aligned copy; a streamed weight is only byte-copied, so none is made
    path = zoo.write_decoder(tmp_path / "m.onnx", CFG, external_data=False)
    opts = {"free_dimension_overrides": DIMS, "budgets": f"gpu:{BUDGET}", "session.weight_streaming": "on"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), opts, providers=SIM)
    for _ in range(2):
        for got, want in zip(sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0)), reference):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    inits = sess.model.graph.initializers
    mapped = [n for n in sess.placement.streaming.weight_names if inits[n].external is not None]
    assert sum(inits[n].nbytes for n in mapped) > 0.9 * sum(
        inits[n].nbytes for n in sess.placement.streaming.weight_names)
    misaligned = [n for n in mapped if inits[n].external.offset % inits[n].numpy().dtype.alignment]
    assert misaligned  # the case this test is about occurs in this file
    sess.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), opts, providers=SIM)
    sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    inits = sess.model.graph.initializers
    assert [n for n in mapped if inits[n]._array is not None] == []  # nothing materialised in host memory
    assert all(isinstance(inits[n].raw_bytes(), np.memmap) for n in mapped)
    sess.close()


def test_ortrun_plan_and_run_stream_weights(tmp_path, capsys):
    from ort_session.cli import main

    path = str(zoo.write_decoder(tmp_path / "m.onnx", CFG))
    common = [path, "--budget", f"gpu:{BUDGET}", "--providers", "SimulatedGPUExecutionProvider", "--dim", "batch=1",
              "--dim", "sequence=16", "--dim", "past_sequence=0"]
    assert main(["plan", *common, "--stream-weights", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["streaming"]["mode"] == "on" and d["copies"]["streamed"]["bytes"] > BUDGET
    assert d["devices"]["simgpu"]["total"] <= BUDGET and d["devices"]["simgpu"]["streaming_slots"] > 0
    assert main(["plan", *common, "--stream-weights", "off", "--json"]) == 0
    assert "streaming" not in json.loads(capsys.readouterr().out)
    assert main(["run", *common, "--stream-weights", "--check"]) == 0


def test_a_concurrent_run_is_refused_while_the_slots_are_in_use():
    from ort_session import SessionBusyError

    sess = _session()
    with sess._executor.streamer.hold(), pytest.raises(SessionBusyError, match="one run at a time"):
        sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))  # free again once the other run ended
    sess.close()


@pytest.mark.parametrize("value", ["fast", "1e9", "0,1e9", "1e9,-1", "inf,1e9"])
def test_a_bad_cpu_profile_is_refused(value):
    with pytest.raises(InvalidOptionError, match="weight_streaming_cpu_profile"):
        _session(**{"session.weight_streaming_cpu_profile": value})


def test_a_given_cpu_profile_is_used_instead_of_the_probe():
    sess = _session(**{"session.weight_streaming_cpu_profile": "2e11,4e10"})
    assert (sess.placement.streaming.cpu.flops, sess.placement.streaming.cpu.memory_bandwidth) == (2e11, 4e10)
    sess.close()


def test_streamed_layers_out_of_execution_order_are_refused():
    import attrs

    from ort_session import SessionError

    sess = _session()
    plan = attrs.evolve(sess.placement.streaming, layers=tuple(reversed(sess.placement.streaming.layers)))
    with pytest.raises(SessionError, match="cannot be double-buffered"):
        WeightStreamer(sess.model.graph, sess.order, plan)
    sess.close()


@pytest.mark.parametrize("pre_allocate", ["0", "1"])
def test_the_slots_are_run_long_blocks_of_the_device_plan(monkeypatch, pre_allocate):
    sess = _session(**{"session.pre_allocate_execution_buffers": pre_allocate})
    plan, gplan = sess.placement.streaming, sess.memory.gplan
    reqs = [gplan.run_requests[key] for key in plan.slot_keys]
    workspace_ids = {r.id for r in gplan.slot_requests.values()}
    assert len(reqs) == 2 and len({r.id for r in reqs}) == 2
    for r in reqs:  # a synthetic id, live from the first step to the last, on the streaming device
        assert r.id < 0 and r.id not in workspace_ids and gplan.names[r.id] in plan.slot_keys
        assert (r.first, r.last, r.device, r.nbytes) == (0, len(sess.order) - 1, "simgpu", plan.slot_bytes)
    offsets = sorted(gplan.plan.offsets[r.id] for r in reqs)
    assert offsets[1] - offsets[0] >= plan.slot_bytes  # the two slots do not overlap
    peak = gplan.plan.peak["simgpu"]
    assert peak >= offsets[1] + plan.slot_bytes
    totals = sess.memory.device_totals()["simgpu"]
    assert totals["peak_activations_and_workspace"] == peak and totals["total"] == totals["weights"] + peak
    assert totals["streaming_slots"] == 2 * plan.slot_bytes == sess.plan.to_dict()["devices"]["simgpu"]["streaming_slots"]
    # each streamed weight is a view of the run's device buffer at its slot's planned offset: no slot allocation
    seen = {}
    resolve = WeightStreamer.resolve

    def spy(self, layout):
        resolve(self, layout)
        base = layout._live.buffers["simgpu"].ptr
        seen.update({name: t.buffer.ptr - base for name, t in self.tensors.items()})

    monkeypatch.setattr(WeightStreamer, "resolve", spy)
    sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    want = {name: gplan.plan.offsets[reqs[j % 2].id] + offset
            for j, layer in enumerate(plan.layers) for name, offset, _ in layer.weights}
    assert seen == want
    usage = sess.device_memory()["simgpu"]
    assert usage["peak"] == totals["total"] <= BUDGET  # measured peak = weights + the plan's peak, slots inside
    sess.close()


def test_streaming_without_a_static_plan_is_refused_at_initialization():
    from ort_session._promise import ALLOW_UNPLANNED_SHAPES

    dims = {"batch": 1, "past_sequence": 0}  # `sequence` left symbolic: the slots would have no planned arena
    opts = {"free_dimension_overrides": dims, "budgets": f"gpu:{BUDGET}", "session.weight_streaming": "on",
            ALLOW_UNPLANNED_SHAPES: "1"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InvalidOptionError, match="needs static shapes.*free_dimension_overrides"):
            InferenceSession(zoo.decoder(CFG), opts, providers=SIM)
        opts["session.weight_streaming"] = "off"
        assert InferenceSession(zoo.decoder(CFG), opts, providers=SIM).placement.streaming is None


def test_the_simulated_timeline_overlaps_each_copy_with_the_layer_before():
    from ort_partition import SIMULATED_DEVICE

    sess = _session()
    plan = sess.placement.streaming
    transfers = sess._executor.streamer.transfers
    assert isinstance(transfers, ort_abi.SimulatedTransfers) and not plan.pinned and plan.pinned_bytes == 0
    before = transfers.copies
    sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    assert transfers.copies - before == plan.copies()["count"]  # the device's own count: the plan's copies
    tl = sess.last_run_stats.streaming_timeline
    assert tl["busy"]["copy"] == pytest.approx(plan.copies()["bytes"] / SIMULATED_DEVICE.h2d_bandwidth)
    assert tl["busy"]["compute"] == pytest.approx(sum(plan.per_layer[lid]["cpu" if c == "cpu" else "resident"]
                                                      for lid, c in plan.choice.items()))
    assert tl["overlap_seconds"] > 0 and tl["seconds"] < tl["serial_seconds"]
    assert tl["seconds"] <= plan.times["with streaming"] * (1 + 1e-9)  # the cost model is not optimistic
    assert transfers.hazards.pending == []  # nothing left in flight after the run
    sess._executor.streamer.serialize_copies = True  # every copy waited for at once: no overlap, and slower
    got = sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    serial = sess.last_run_stats.streaming_timeline
    assert serial["overlap_seconds"] == 0 and serial["seconds"] == pytest.approx(serial["serial_seconds"])
    assert serial["seconds"] > tl["seconds"]
    assert got[0].shape == (1, 16, CFG.vocab)
    sess.close()


@pytest.mark.parametrize("skip", ["_copied", "_slot_free"])
def test_the_simulated_device_catches_a_wrong_order_the_guard_let_through(monkeypatch, skip):
    from ort_session import KernelRunError

    sess = _session()
    monkeypatch.setattr(ort_abi.OrderGuard, "read", lambda self, region, stream, reader: None)
    monkeypatch.setattr(ort_abi.OrderGuard, "write", lambda self, region, stream, writer: stream.issue())
    monkeypatch.setattr(WeightStreamer, skip, lambda self, j: None)
    with pytest.raises((ort_abi.StreamOrderError, KernelRunError)) as info:
        sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    err = info.value if isinstance(info.value, ort_abi.StreamOrderError) else info.value.__cause__
    assert isinstance(err, ort_abi.StreamOrderError)
    assert ("has not completed" if skip == "_copied" else "overwrites") in str(err)
    monkeypatch.undo()
    for got, want in zip(sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0)), _reference()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    sess.close()


def _reference():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS}).run(
            None, zoo.decoder_inputs(CFG, 1, 16, 0))
