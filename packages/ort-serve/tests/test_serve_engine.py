"""The serving engine: continuous batching equals decoding alone (greedy, token for token), split placement
and seeded sampling under batching, the waiting queue's order, and admission (429 / 503 with the limit named)."""

from __future__ import annotations

import pathlib

import pytest

from ort_graph import zoo
from ort_serve._scheduler import Request
from ort_serve._serve_errors import AdmissionError


def test_batched_greedy_equals_alone(kit, folder):
    engine = kit.build_engine(folder, chunk=8)
    assert engine.runner.mode == ("batched" if folder.name.startswith("genai") else "round-robin"), engine.runner.reason
    lengths = [12, 3, 20, 7, 16, 1, 9, 5]
    engine.scheduler.start()
    try:
        got = kit.run_all(engine, kit.PROMPTS, lengths)
    finally:
        engine.close()
    for prompt, n, out in zip(kit.PROMPTS, lengths, got):
        assert out == kit.alone(folder, prompt, n), prompt


def test_split_placement_and_seeded_sampling_under_batching(kit):
    """Layer rules splitting the decoder between the simulated GPU and the CPU, and seeded sampling: the batch
    answers what each request answers alone, and the device's measured peak stays the initial plan's."""
    import tempfile

    folder = kit.write_folder(pathlib.Path(tempfile.mkdtemp()) / "split", "genai")
    answers = []
    for batch in (1, 8):
        engine = kit.build_engine(folder, max_batch=batch, budget="gpu:4MiB", rules="gpu(layers.0); cpu(layers.1)")
        (before,) = engine.session.device_memory().values()
        assert set(engine.session.memory.device_of_node.values()) >= {"simgpu", "cpu"}  # the split holds
        engine.scheduler.start()
        try:
            answers.append(kit.run_all(engine, kit.PROMPTS, [10] * 8, temperature=0.9, top_k=40, seed=7))
        finally:
            (after,) = engine.session.device_memory().values()
            engine.close()
        assert 0 < after["weights"] and after["peak"] == before["peak"] <= after["capacity"], (before, after)
    assert answers[0] == answers[1]
    assert len({tuple(a) for a in answers[0]}) > 1


def test_not_a_kv_decoder_is_refused(kit, tmp_path):
    from ort_serve import ServeError

    zoo.write_decoder(tmp_path / "model.onnx", zoo.DecoderConfig(kv_cache=False, max_positions=kit.CTX),
                      external_data=False)
    with pytest.raises(ServeError, match="not a KV-cache decoder"):
        kit.build_engine(tmp_path)


def test_waiting_requests_go_by_priority_then_arrival(kit, folder):
    engine = kit.build_engine(folder, max_batch=1)
    order: list[str] = []
    s = engine.scheduler
    try:
        for name, priority in (("a", 0), ("b", 5), ("c", -1), ("d", 0)):
            s.submit(Request([3], engine.params(max_new_tokens=2), lambda piece, finish, n=name: finish and order.append(n),
                             priority=priority))
        while s.waiting or s.active:  # the engine loop, by hand
            s._admit()
            s.step()
    finally:
        engine.close()
    assert order == ["c", "a", "d", "b"]


def test_admission_limits(kit, folder):
    engine = kit.build_engine(folder, max_batch=2, max_queue=1)  # the engine thread not started: nothing leaves
    try:
        with pytest.raises(AdmissionError, match="--ctx-size") as e:
            engine.scheduler.check(list(range(kit.CTX)), 4)
        assert (e.value.status, e.value.limit, e.value.value) == (503, "ctx_size", kit.CTX)
        assert engine.scheduler.check([1, 2], None) == kit.CTX - 2
        assert engine.scheduler.check([1, 2], 10**6) == kit.CTX - 2  # max_tokens capped by the context left
        for _ in range(3):  # two take the free slots, one waits
            engine.scheduler.submit(Request([1], engine.params(max_new_tokens=2), lambda *a: None))
        with pytest.raises(AdmissionError, match="--max-queue 1") as e:
            engine.scheduler.submit(Request([1], engine.params(max_new_tokens=2), lambda *a: None))
        assert (e.value.status, e.value.limit) == (429, "max_queue")
    finally:
        engine.close()
