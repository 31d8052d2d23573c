"""The paged KV pool: preemption when the pool runs out (every answer still equals the request alone), the
pool's admission limit, budgets splitting or streaming the layers, and the batched past kept on the device."""

from __future__ import annotations

import numpy as np
import pytest

from ort_graph import zoo
from ort_serve._serve_errors import AdmissionError


def test_a_pool_too_small_for_all_preempts_and_every_answer_equals_alone(kit, folder):
    """8 greedy requests over a pool of 20 blocks of 4 positions (finishing at once they would need 43):
    admission takes only the prompts' blocks, so 7 start together; running out, the latest admitted are preempted
    and resume by recompute; every answer equals the request served alone, and the simulated GPU's measured peak
    stays the initial plan's, within the budget."""
    lengths = [16, 10, 20, 12, 16, 12, 9, 5]
    engine = kit.build_engine(folder, budget="gpu:4MiB", kv_block=4, kv_blocks=20)
    try:
        (before,) = engine.session.device_memory().values()
        reqs = kit.submit_greedy(engine, kit.PROMPTS, lengths)
        most = kit.drain(engine)
        (after,) = engine.session.device_memory().values()
        preemptions = kit.metric(engine, "preemptions_total")
        assert kit.metric(engine, "kv_blocks_total") == 20 and kit.metric(engine, "kv_blocks_in_use") == 0
        assert kit.metric(engine, "recomputed_tokens_total") > 0
    finally:
        engine.close()
    # blocks_for(prompt) + 1 free for each in arrival order: 2 1 1 3 1 1 1 reserved, the 40-token prompt waits
    assert most == 7 and preemptions >= 1 and sum(r.preempted for r in reqs) == preemptions
    for req, n in zip(reqs, lengths):
        assert req.output == kit.alone(folder, req.prompt, n), req.prompt
    assert after["peak"] == before["peak"] <= after["capacity"], (before, after)


def test_preemption_takes_the_least_urgent_then_the_latest_admitted(kit, folder):
    engine = kit.build_engine(folder, max_batch=3, kv_block=2, kv_blocks=12)
    try:
        # arrival order b, a, c: the queue admits a (priority 0) first, then b and c (priority 1, b arrived first)
        b, a, c = kit.submit_greedy(engine, [[5, 6], [7, 8], [9, 10]], [20, 20, 20], priorities=[1, 0, 1])
        kit.drain(engine)
    finally:
        engine.close()
    assert a.preempted == 0 and c.preempted > b.preempted
    for req in (a, b, c):
        assert req.output == kit.alone(folder, req.prompt, 20)


def test_a_prompt_beyond_the_pool_is_refused_naming_kv_blocks(kit, folder):
    engine = kit.build_engine(folder, max_batch=2, kv_block=4, kv_blocks=3)
    try:
        assert engine.scheduler.check([1] * 5, 100) == 12 - 5  # max_tokens capped at what the pool holds
        with pytest.raises(AdmissionError, match="--kv-blocks 3 x --kv-block 4") as e:
            engine.scheduler.check([1] * 12, 4)
        assert (e.value.status, e.value.limit, e.value.value) == (503, "kv_blocks", 3)
    finally:
        engine.close()


@pytest.mark.parametrize(("budget", "streaming"), [("gpu:560KiB", None), ("gpu:920KiB", "on")])
def test_a_budget_splitting_the_layers_or_streaming_them_serves_4_requests_as_alone(kit, tmp_path, budget, streaming):
    """A 4-layer genai decoder under a budget that keeps one layer on the simulated GPU and the rest on the CPU, or
    (weight streaming on) streams its layers through the device's two slots: 4 concurrent greedy requests, batched,
    answer what each answers alone on the CPU, and the device's measured peak stays the plan's, within the budget."""
    cfg = zoo.DecoderConfig(layers=4, hidden=64, heads=4, kv_heads=2, vocab=kit.VOCAB, max_positions=kit.CTX)
    folder = kit.write_folder(tmp_path / "four", "genai", cfg)
    config = {"session.weight_streaming": streaming} if streaming else None
    engine = kit.build_engine(folder, max_batch=4, budget=budget, config=config, kv_block=8)
    placement = engine.session.placement
    if streaming:
        assert placement.streaming is not None and len(placement.streaming.layers) >= 2, placement.summary
    else:
        assert placement.streaming is None and placement.summary.startswith("1/4 decoder layers"), placement.summary
    (before,) = engine.session.device_memory().values()
    prompts, lengths = kit.PROMPTS[:3] + kit.PROMPTS[-1:], [12, 20, 7, 16]
    engine.scheduler.start()
    try:
        got = kit.run_all(engine, prompts, lengths)
    finally:
        (after,) = engine.session.device_memory().values()
        engine.close()
    assert engine.runner.mode == "batched" and engine.scheduler.metrics.decoded_tokens > engine.scheduler.metrics.decode_steps
    for prompt, n, out in zip(prompts, lengths, got):
        assert out == kit.alone(folder, prompt, n), prompt
    assert after["peak"] == before["peak"] <= after["capacity"], (before, after)


@pytest.mark.parametrize("pool", [{}, {"kv_block": 4, "kv_blocks": 20}], ids=["default-pool", "preempting"])
def test_the_batched_past_kept_on_the_device_answers_as_the_host_pool(kit, tmp_path, monkeypatch, pool):
    """--kv-on-device: while the batch is unchanged a decode step feeds the last step's presents, left on the
    simulated GPU, as its past (only the logits and the small inputs cross); joins, leaves and preemptions copy
    the device positions back into the pool. 8 greedy requests (over a pool small enough to preempt, too): every
    answer equals the request served alone, and the device's peak stays within the budget."""
    from ort_serve import _batch_runner

    folder = kit.write_folder(tmp_path / "genai", "genai")
    lengths = [16, 10, 20, 12, 16, 12, 9, 5]
    engine = kit.build_engine(folder, budget="gpu:4MiB", kv_on_device=True, **pool)
    bound, real = [], _batch_runner._bound_run

    def watched(session, names, feeds, device):  # each bound step: its host inputs' bytes and the run's traffic
        out = real(session, names, feeds, device)
        past_on_device = not any(isinstance(feeds[p], np.ndarray) for p in engine.runner.pairs.values())
        host = sum(v.nbytes for v in feeds.values() if isinstance(v, np.ndarray))
        n, width = feeds["attention_mask"].shape
        kv = n * (width - 1) * 2 * 16 * 4 * 4  # the past's bytes: 2 KV heads x 16, float32, 2 layers x key, value
        bound.append((past_on_device, host, n, kv, session.last_run_stats))
        return out

    monkeypatch.setattr(_batch_runner, "_bound_run", watched)
    try:
        assert engine.runner.resident is not None and engine.runner.resident.device == "simgpu"
        reqs = kit.submit_greedy(engine, kit.PROMPTS, lengths)
        kit.drain(engine)
        (after,) = engine.session.device_memory().values()
        steps, syncs = kit.metric(engine, "kv_device_steps_total"), kit.metric(engine, "kv_device_syncs_total")
        batched = kit.metric(engine, "decode_steps_total")  # with 1 sequence a decode step is not batched (host path)
        preemptions = kit.metric(engine, "preemptions_total")
    finally:
        engine.close()
    for req, n in zip(reqs, lengths):
        assert req.output == kit.alone(folder, req.prompt, n), req.prompt
    assert syncs >= 1 and after["peak"] <= after["capacity"]
    assert steps == sum(on for on, *_ in bound) >= 1 and (preemptions >= 1) == bool(pool)
    assert steps < batched  # every join and leave regathers
    for on, host, n, kv, stats in bound:
        if on:  # no KV byte crossed: the ids, the mask (and values the CPU's nodes make) went in, the logits out
            assert stats.host_to_device_bytes < kv / 4 and stats.device_to_host_bytes == n * kit.VOCAB * 4, stats
        else:  # a regathered past went in
            assert stats.host_to_device_bytes >= kv and host > kv


def test_kv_on_device_is_refused_where_it_cannot_fit_and_ignored_for_round_robin(kit, tmp_path):
    from ort_serve import ServeError

    with pytest.raises(ServeError, match="--kv-on-device: the batched KV cache of 8 sequences x 64 positions"):
        kit.build_engine(kit.write_folder(tmp_path / "genai", "genai"), budget="gpu:1100KiB", kv_on_device=True)
    engine = kit.build_engine(kit.write_folder(tmp_path / "plain", "plain"), budget="gpu:4MiB", kv_on_device=True)
    try:
        assert engine.runner.mode == "round-robin" and engine.runner.resident is None
    finally:
        engine.close()
