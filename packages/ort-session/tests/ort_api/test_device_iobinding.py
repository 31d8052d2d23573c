"""Device-resident OrtValues and IOBinding on the simulated GPU: bound device inputs and outputs skip the
run's host<->device boundary copies (counted in `last_run_stats`), and a decode loop that feeds its bound
KV cache back moves no KV bytes to the host, within the device's budget."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

import ort_session as ort
from ort_graph import zoo
from ort_session._errors import DeviceMemoryError, InvalidInputError

from .snippets import X, mlp_model

SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
CFG = zoo.DecoderConfig()
BUDGET = 8 << 20
KV = [f"{i}.{kind}" for i in range(CFG.layers) for kind in ("key", "value")]


def _decoder_session():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort.InferenceSession(zoo.decoder(CFG), {"budgets": f"gpu:{BUDGET}",
                                                       "session.allow_unplanned_shapes": "1"}, providers=SIM)


def _tokens(step: int) -> np.ndarray:
    return np.random.default_rng(step).integers(0, CFG.vocab, (1, 4 if step == 0 else 1), dtype=np.int64)


def _host_loop(sess, steps):
    feeds = zoo.decoder_inputs(CFG, 1, 4, 0)
    logits, stats = [], []
    for step in range(steps):
        feeds["input_ids"] = _tokens(step)
        out = dict(zip(sess.output_names, sess.run(None, feeds)))
        logits.append(out["logits"])
        stats.append(sess.last_run_stats)
        feeds.update({f"past_key_values.{kv}": out[f"present.{kv}"] for kv in KV})
    return logits, stats, {kv: out[f"present.{kv}"] for kv in KV}


def _bound_loop(sess, steps):
    past = {kv: sess.ortvalue_on_device(a) for kv, a in
            ((k[len("past_key_values."):], v) for k, v in zoo.decoder_inputs(CFG, 1, 4, 0).items() if k != "input_ids")}
    logits, stats, in_use = [], [], []
    for step in range(steps):
        io = sess.io_binding()
        io.bind_cpu_input("input_ids", _tokens(step))
        for kv in KV:
            io.bind_ortvalue_input(f"past_key_values.{kv}", past[kv])
            io.bind_output(f"present.{kv}", "simgpu")
        io.bind_output("logits")
        sess.run_with_iobinding(io)
        stats.append(sess.last_run_stats)
        values = dict(zip([f"present.{kv}" for kv in KV] + ["logits"], io.get_outputs()))
        logits.append(values["logits"].numpy())
        past = {kv: values[f"present.{kv}"] for kv in KV}
        in_use.append(sess.device_memory()["simgpu"]["in_use"])
    return logits, stats, {kv: v.numpy() for kv, v in past.items()}, past, in_use


def test_a_decode_loop_with_bound_kv_cache_moves_no_kv_bytes_to_the_host():
    sess = _decoder_session()
    steps = 3
    host_logits, host_stats, host_kv = _host_loop(sess, steps)
    logits, stats, kv, past, in_use = _bound_loop(sess, steps)
    for got, want in zip(logits, host_logits):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for name in KV:
        assert past[name].is_on_device() and past[name].device_name() == "simgpu"
        np.testing.assert_allclose(kv[name], host_kv[name], rtol=1e-5, atol=1e-6)
    for step, (bound, host) in enumerate(zip(stats, host_stats)):
        kv_in = 0 if step == 0 else sum(host_kv[n][:, :, :4 + step - 1].nbytes for n in KV)  # past's bytes this step
        kv_out = sum(host_kv[n][:, :, :4 + step].nbytes for n in KV)
        logits_bytes = host_logits[step].nbytes
        # the host path copies the KV cache in and out every step; the bound path only the logits out
        assert host.device_to_host_bytes == kv_out + logits_bytes
        assert bound.device_to_host_bytes == logits_bytes and bound.device_to_host_copies == 1
        assert bound.host_to_device_bytes == host.host_to_device_bytes - kv_in
        assert bound.device_to_device_copies == 2 * len(KV) and bound.device_to_device_bytes == kv_in + kv_out
    usage = sess.device_memory()["simgpu"]
    assert usage["capacity"] == BUDGET and usage["peak"] <= BUDGET
    assert all(u <= BUDGET for u in in_use)
    assert usage["in_use"] >= usage["weights"] + sum(v.tensor_size_in_bytes() for v in past.values())
    held = usage["in_use"]
    del past
    gc.collect()
    assert sess.device_memory()["simgpu"]["in_use"] == held - sum(v.nbytes for v in host_kv.values())


def test_a_device_ortvalue_lives_in_the_sessions_device_memory():
    sess = _decoder_session()
    before = sess.device_memory()["simgpu"]["in_use"]
    arr = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    value = ort.OrtValue.ortvalue_from_numpy(arr, "simgpu", 0, session=sess)
    assert value.is_on_device() and value.device_name() == "simgpu" and value.shape() == [2, 3, 4]
    assert value.data_type() == "tensor(float)" and value.data_ptr() == value.device_tensor().ptr
    assert sess.device_memory()["simgpu"]["in_use"] == before + arr.nbytes
    np.testing.assert_array_equal(value.numpy(), arr)
    value.update_inplace(arr * 2)
    np.testing.assert_array_equal(value.numpy(), arr * 2)
    empty = ort.OrtValue.ortvalue_from_shape_and_type([5], np.int64, "simgpu", 0, session=sess)
    np.testing.assert_array_equal(empty.numpy(), np.zeros(5, np.int64))
    del value, empty
    gc.collect()
    assert sess.device_memory()["simgpu"]["in_use"] == before


def test_a_device_value_beyond_the_budget_is_refused_and_takes_nothing():
    sess = _decoder_session()
    before = sess.device_memory()["simgpu"]["in_use"]
    with pytest.raises(DeviceMemoryError, match="budget"):
        ort.OrtValue.ortvalue_from_shape_and_type([BUDGET], np.float32, "simgpu", 0, session=sess)
    assert sess.device_memory()["simgpu"]["in_use"] == before


@pytest.mark.parametrize("make, message", [
    (lambda sess: ort.OrtValue.ortvalue_from_numpy(X, "simgpu", 0), "needs session"),
    (lambda sess: ort.OrtValue.ortvalue_from_numpy(X, "simgpu", 0, session=sess), "no nodes on that device"),
    (lambda sess: sess.ortvalue_on_device(X), "name one"),
    (lambda sess: ort.OrtValue.ortvalue_from_numpy(X, "simgpu", 1, session=sess), "device 0"),
])
def test_device_values_without_the_device_are_refused(make, message):
    sess = ort.InferenceSession(mlp_model().SerializeToString())  # host only
    with pytest.raises(InvalidInputError, match=message):
        make(sess)


def test_a_bound_device_output_value_is_filled_on_the_device_and_checked():
    sess = _decoder_session()
    feeds = zoo.decoder_inputs(CFG, 1, 4, 0)
    want = dict(zip(sess.output_names, sess.run(None, feeds)))
    io = sess.io_binding()
    for name, arr in feeds.items():
        io.bind_cpu_input(name, arr)
    target = ort.OrtValue.ortvalue_from_shape_and_type(want["present.0.key"].shape, np.float32, "simgpu", 0,
                                                       session=sess)
    io.bind_ortvalue_output("present.0.key", target)
    sess.run_with_iobinding(io)
    stats = sess.last_run_stats  # every node runs: the other four outputs' boundary copies still run
    assert io.get_outputs()[0] is target and stats.device_to_host_copies == len(sess.output_names) - 1
    assert stats.device_to_device_copies == 1 and stats.device_to_device_bytes == want["present.0.key"].nbytes
    np.testing.assert_allclose(io.copy_outputs_to_cpu()[0], want["present.0.key"], rtol=1e-5, atol=1e-6)
    wrong = ort.OrtValue.ortvalue_from_shape_and_type([1, 2, 3, 16], np.float32, "simgpu", 0, session=sess)
    io.bind_ortvalue_output("present.0.key", wrong)
    before = sess.device_memory()["simgpu"]["in_use"]
    with pytest.raises(InvalidInputError, match="bound device value"):
        sess.run_with_iobinding(io)
    assert sess.device_memory()["simgpu"]["in_use"] == before


def test_generate_keeps_the_kv_cache_on_the_device_and_picks_the_host_paths_tokens():
    from ort_session._generate import generate, kv_device

    sess = _decoder_session()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        host = ort.InferenceSession(zoo.decoder(CFG), {"session.allow_unplanned_shapes": "1"})
    assert kv_device(sess, 9) == "simgpu" and kv_device(host, 9) is None
    assert kv_device(sess, BUDGET) is None  # a cache that would not fit beside the plan stays on the host
    prompt = [3, 14, 15, 92]
    want = list(generate(host, prompt, max_new_tokens=5))
    got = list(generate(sess, prompt, max_new_tokens=5))
    assert got == want
    stats = sess.last_run_stats  # the last step: only the logits came to the host
    assert stats.device_to_host_copies == 1 and stats.device_to_host_bytes == CFG.vocab * 4
    assert stats.device_to_device_copies == 4 * CFG.layers
