"""`ortrun serve` and its engine: continuous batching equals decoding alone (greedy, token for token), admission
(429 / 503 with the limit named), and the HTTP APIs through the real openai client and plain HTTP (ollama's),
with the simulated GPU's measured peak held to the budget under 8 concurrent clients."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import ort_graph
from ort_graph import zoo
from ort_session import InferenceSession
from ort_session._generate import generate
from ort_session._model_files import resolve_model
from ort_session._options import NAME_BASED_ASSIGNMENT
from ort_session._tokenizer import load_tokenizer

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from ort_serve._engine import Engine  # noqa: E402
from ort_serve._scheduler import Request  # noqa: E402
from ort_serve._serve_errors import AdmissionError  # noqa: E402

VOCAB, CTX, EOS = 256, 64, 2
PROMPTS = [[1, 5, 9, 33, 100], [7], [3, 4], [200, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27], [42, 43, 44],
           [9, 9, 9, 9], [250, 1], list(range(10, 50))]
SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]


def write_folder(folder: pathlib.Path, kind: str, cfg: zoo.DecoderConfig | None = None) -> pathlib.Path:
    """A model folder: a zoo decoder (genai-style GroupQueryAttention with attention_mask, or the plain one with
    positions from the past's length), genai_config.json, and a word-level tokenizer.json (t0 .. t255)."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = cfg or zoo.DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2, vocab=VOCAB, max_positions=CTX)
    if kind == "genai":
        proto = zoo.genai_decoder_proto(cfg)
        ort_graph.save(ort_graph.from_proto(proto), str(folder / "model.onnx"))
    else:
        zoo.write_decoder(folder / "model.onnx", cfg, external_data=False)
    (folder / "genai_config.json").write_text(json.dumps({"model": {"context_length": CTX, "eos_token_id": EOS,
                                                                    "decoder": {"filename": "model.onnx"}}}))
    vocab = {f"t{i}": i for i in range(VOCAB)}
    (folder / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}}))
    return folder


def text_of(ids: list[int]) -> str:
    return " ".join(f"t{i}" for i in ids)


@pytest.fixture(scope="module", params=["genai", "plain"])
def folder(request, tmp_path_factory) -> pathlib.Path:
    return write_folder(tmp_path_factory.mktemp(request.param), request.param)


def alone(folder: pathlib.Path, prompt: list[int], n: int) -> list[int]:
    """Greedy tokens of one sequence by ort-session's own generator (batch 1, its own session)."""
    files = resolve_model(folder)
    sess = InferenceSession(ort_graph.load(str(files.model)))
    try:
        return list(generate(sess, prompt, n, eos_id=EOS))
    finally:
        sess.close()


def build_engine(folder: pathlib.Path, max_batch: int = 8, max_queue: int = 64, chunk: int = 8,
                 budget: str | None = None, rules: str | None = None, config: dict[str, str] | None = None,
                 **pool) -> Engine:
    from ort_session import SessionOptions

    files = resolve_model(folder)
    model = ort_graph.load(str(files.model))
    opts = SessionOptions(budgets=budget)
    if rules:
        opts.add_session_config_entry(NAME_BASED_ASSIGNMENT, rules)
    for key, value in (config or {}).items():
        opts.add_session_config_entry(key, value)
    providers = SIM if budget else None
    codec = load_tokenizer(files.tokenizer, VOCAB)
    return Engine.build(model, files, opts, lambda o: InferenceSession(model, o, providers=providers), codec,
                        max_batch=max_batch, ctx_size=None, prefill_chunk=chunk, max_queue=max_queue, **pool)


def run_all(engine: Engine, prompts: list[list[int]], n: list[int], **sampling) -> list[list[int]]:
    done = [concurrent.futures.Future() for _ in prompts]
    reqs = []
    for prompt, k, fut in zip(prompts, n, done):
        params = engine.params(**{"temperature": 0.0, **sampling}, max_new_tokens=engine.scheduler.check(prompt, k))
        reqs.append(Request(prompt, params, lambda piece, finish, f=fut: finish and f.set_result(finish)))
        engine.scheduler.submit(reqs[-1])
    for fut in done:
        assert fut.result(timeout=120) in ("stop", "length")
    return [r.output for r in reqs]


def test_batched_greedy_equals_alone(folder):
    engine = build_engine(folder, chunk=8)
    assert engine.runner.mode == ("batched" if folder.name.startswith("genai") else "round-robin"), engine.runner.reason
    lengths = [12, 3, 20, 7, 16, 1, 9, 5]
    engine.scheduler.start()
    try:
        got = run_all(engine, PROMPTS, lengths)
    finally:
        engine.close()
    for prompt, n, out in zip(PROMPTS, lengths, got):
        assert out == alone(folder, prompt, n), prompt


def test_split_placement_and_seeded_sampling_under_batching():
    """Layer rules splitting the decoder between the simulated GPU and the CPU, and seeded sampling: the batch
    answers what each request answers alone, and the device's measured peak stays the initial plan's."""
    import tempfile

    folder = write_folder(pathlib.Path(tempfile.mkdtemp()) / "split", "genai")
    answers = []
    for batch in (1, 8):
        engine = build_engine(folder, max_batch=batch, budget="gpu:4MiB", rules="gpu(layers.0); cpu(layers.1)")
        (before,) = engine.session.device_memory().values()
        assert set(engine.session.memory.device_of_node.values()) >= {"simgpu", "cpu"}  # the split holds
        engine.scheduler.start()
        try:
            answers.append(run_all(engine, PROMPTS, [10] * 8, temperature=0.9, top_k=40, seed=7))
        finally:
            (after,) = engine.session.device_memory().values()
            engine.close()
        assert 0 < after["weights"] and after["peak"] == before["peak"] <= after["capacity"], (before, after)
    assert answers[0] == answers[1]
    assert len({tuple(a) for a in answers[0]}) > 1


def submit_greedy(engine: Engine, prompts: list[list[int]], n: list[int], priorities=None) -> list[Request]:
    """Requests queued (the engine thread not started): `drain` runs the engine loop by hand, deterministically."""
    reqs = []
    for i, (prompt, k) in enumerate(zip(prompts, n)):
        params = engine.params(temperature=0.0, max_new_tokens=engine.scheduler.check(prompt, k))
        reqs.append(Request(prompt, params, lambda piece, finish, r=reqs: None, priority=(priorities or [0] * 8)[i]))
        engine.scheduler.submit(reqs[-1])
    return reqs


def drain(engine: Engine) -> int:
    """The engine loop by hand until every request ended; the most sequences active at once."""
    s, most = engine.scheduler, 0
    while s.waiting or s.active:
        s._admit()
        most = max(most, len(s.active))
        s.step()
    return most


def metric(engine: Engine, name: str) -> float:
    from ort_serve._server_status import metrics_text

    return re_value(metrics_text(engine), f"ort_serve_{name}")


def test_a_pool_too_small_for_all_preempts_and_every_answer_equals_alone(folder):
    """8 greedy requests over a pool of 20 blocks of 4 positions (finishing at once they would need 43):
    admission takes only the prompts' blocks, so 7 start together; running out, the latest admitted are preempted
    and resume by recompute; every answer equals the request served alone, and the simulated GPU's measured peak
    stays the initial plan's, within the budget."""
    lengths = [16, 10, 20, 12, 16, 12, 9, 5]
    engine = build_engine(folder, budget="gpu:4MiB", kv_block=4, kv_blocks=20)
    try:
        (before,) = engine.session.device_memory().values()
        reqs = submit_greedy(engine, PROMPTS, lengths)
        most = drain(engine)
        (after,) = engine.session.device_memory().values()
        preemptions = metric(engine, "preemptions_total")
        assert metric(engine, "kv_blocks_total") == 20 and metric(engine, "kv_blocks_in_use") == 0
        assert metric(engine, "recomputed_tokens_total") > 0
    finally:
        engine.close()
    # blocks_for(prompt) + 1 free for each in arrival order: 2 1 1 3 1 1 1 reserved, the 40-token prompt waits
    assert most == 7 and preemptions >= 1 and sum(r.preempted for r in reqs) == preemptions
    for req, n in zip(reqs, lengths):
        assert req.output == alone(folder, req.prompt, n), req.prompt
    assert after["peak"] == before["peak"] <= after["capacity"], (before, after)


def test_preemption_takes_the_least_urgent_then_the_latest_admitted(folder):
    engine = build_engine(folder, max_batch=3, kv_block=2, kv_blocks=12)
    try:
        # arrival order b, a, c: the queue admits a (priority 0) first, then b and c (priority 1, b arrived first)
        b, a, c = submit_greedy(engine, [[5, 6], [7, 8], [9, 10]], [20, 20, 20], priorities=[1, 0, 1])
        drain(engine)
    finally:
        engine.close()
    assert a.preempted == 0 and c.preempted > b.preempted
    for req in (a, b, c):
        assert req.output == alone(folder, req.prompt, 20)


def test_a_prompt_beyond_the_pool_is_refused_naming_kv_blocks(folder):
    engine = build_engine(folder, max_batch=2, kv_block=4, kv_blocks=3)
    try:
        assert engine.scheduler.check([1] * 5, 100) == 12 - 5  # max_tokens capped at what the pool holds
        with pytest.raises(AdmissionError, match="--kv-blocks 3 x --kv-block 4") as e:
            engine.scheduler.check([1] * 12, 4)
        assert (e.value.status, e.value.limit, e.value.value) == (503, "kv_blocks", 3)
    finally:
        engine.close()


@pytest.mark.parametrize(("budget", "streaming"), [("gpu:560KiB", None), ("gpu:920KiB", "on")])
def test_a_budget_splitting_the_layers_or_streaming_them_serves_4_requests_as_alone(tmp_path, budget, streaming):
    """A 4-layer genai decoder under a budget that keeps one layer on the simulated GPU and the rest on the CPU, or
    (weight streaming on) streams its layers through the device's two slots: 4 concurrent greedy requests, batched,
    answer what each answers alone on the CPU, and the device's measured peak stays the plan's, within the budget."""
    cfg = zoo.DecoderConfig(layers=4, hidden=64, heads=4, kv_heads=2, vocab=VOCAB, max_positions=CTX)
    folder = write_folder(tmp_path / "four", "genai", cfg)
    config = {"session.weight_streaming": streaming} if streaming else None
    engine = build_engine(folder, max_batch=4, budget=budget, config=config, kv_block=8)
    placement = engine.session.placement
    if streaming:
        assert placement.streaming is not None and len(placement.streaming.layers) >= 2, placement.summary
    else:
        assert placement.streaming is None and placement.summary.startswith("1/4 decoder layers"), placement.summary
    (before,) = engine.session.device_memory().values()
    prompts, lengths = PROMPTS[:3] + PROMPTS[-1:], [12, 20, 7, 16]
    engine.scheduler.start()
    try:
        got = run_all(engine, prompts, lengths)
    finally:
        (after,) = engine.session.device_memory().values()
        engine.close()
    assert engine.runner.mode == "batched" and engine.scheduler.metrics.decoded_tokens > engine.scheduler.metrics.decode_steps
    for prompt, n, out in zip(prompts, lengths, got):
        assert out == alone(folder, prompt, n), prompt
    assert after["peak"] == before["peak"] <= after["capacity"], (before, after)


@pytest.mark.parametrize("pool", [{}, {"kv_block": 4, "kv_blocks": 20}], ids=["default-pool", "preempting"])
def test_the_batched_past_kept_on_the_device_answers_as_the_host_pool(tmp_path, monkeypatch, pool):
    """--kv-on-device: while the batch is unchanged a decode step feeds the last step's presents, left on the
    simulated GPU, as its past (only the logits and the small inputs cross); joins, leaves and preemptions copy
    the device positions back into the pool. 8 greedy requests (over a pool small enough to preempt, too): every
    answer equals the request served alone, and the device's peak stays within the budget."""
    from ort_serve import _batch_runner

    folder = write_folder(tmp_path / "genai", "genai")
    lengths = [16, 10, 20, 12, 16, 12, 9, 5]
    engine = build_engine(folder, budget="gpu:4MiB", kv_on_device=True, **pool)
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
        reqs = submit_greedy(engine, PROMPTS, lengths)
        drain(engine)
        (after,) = engine.session.device_memory().values()
        steps, syncs = metric(engine, "kv_device_steps_total"), metric(engine, "kv_device_syncs_total")
        batched = metric(engine, "decode_steps_total")  # with 1 sequence a decode step is not batched (host path)
        preemptions = metric(engine, "preemptions_total")
    finally:
        engine.close()
    for req, n in zip(reqs, lengths):
        assert req.output == alone(folder, req.prompt, n), req.prompt
    assert syncs >= 1 and after["peak"] <= after["capacity"]
    assert steps == sum(on for on, *_ in bound) >= 1 and (preemptions >= 1) == bool(pool)
    assert steps < batched  # every join and leave regathers
    for on, host, n, kv, stats in bound:
        if on:  # no KV byte crossed: the ids, the mask (and values the CPU's nodes make) went in, the logits out
            assert stats.host_to_device_bytes < kv / 4 and stats.device_to_host_bytes == n * VOCAB * 4, stats
        else:  # a regathered past went in
            assert stats.host_to_device_bytes >= kv and host > kv


def test_kv_on_device_is_refused_where_it_cannot_fit_and_ignored_for_round_robin(tmp_path):
    from ort_serve import ServeError

    with pytest.raises(ServeError, match="--kv-on-device: the batched KV cache of 8 sequences x 64 positions"):
        build_engine(write_folder(tmp_path / "genai", "genai"), budget="gpu:1100KiB", kv_on_device=True)
    engine = build_engine(write_folder(tmp_path / "plain", "plain"), budget="gpu:4MiB", kv_on_device=True)
    try:
        assert engine.runner.mode == "round-robin" and engine.runner.resident is None
    finally:
        engine.close()


def test_not_a_kv_decoder_is_refused(tmp_path):
    from ort_serve import ServeError

    zoo.write_decoder(tmp_path / "model.onnx", zoo.DecoderConfig(kv_cache=False, max_positions=CTX),
                      external_data=False)
    with pytest.raises(ServeError, match="not a KV-cache decoder"):
        build_engine(tmp_path)


def test_waiting_requests_go_by_priority_then_arrival(folder):
    engine = build_engine(folder, max_batch=1)
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


def test_admission_limits(folder):
    engine = build_engine(folder, max_batch=2, max_queue=1)  # the engine thread not started: nothing leaves
    try:
        with pytest.raises(AdmissionError, match="--ctx-size") as e:
            engine.scheduler.check(list(range(CTX)), 4)
        assert (e.value.status, e.value.limit, e.value.value) == (503, "ctx_size", CTX)
        assert engine.scheduler.check([1, 2], None) == CTX - 2
        assert engine.scheduler.check([1, 2], 10**6) == CTX - 2  # max_tokens capped by the context left
        for _ in range(3):  # two take the free slots, one waits
            engine.scheduler.submit(Request([1], engine.params(max_new_tokens=2), lambda *a: None))
        with pytest.raises(AdmissionError, match="--max-queue 1") as e:
            engine.scheduler.submit(Request([1], engine.params(max_new_tokens=2), lambda *a: None))
        assert (e.value.status, e.value.limit) == (429, "max_queue")
    finally:
        engine.close()


# the HTTP server ------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BUDGET = "gpu:1500KiB"  # the plan holds about 1 MiB there (weights, batched KV inputs, activations)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import httpx

    folder = write_folder(tmp_path_factory.mktemp("served") / "tiny", "genai")
    port = free_port()
    template = folder.parent / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}t1{% endif %}")
    log = (folder.parent / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "ort_session.cli", "serve", str(folder), "--host", "127.0.0.1",
                             "--port", str(port), "--max-batch", "8", "--max-queue", "4", "--prefill-chunk", "8",
                             "--kv-block", "8", "--kv-blocks", "48",
                             "--providers", ",".join(SIM), "--budget", BUDGET, "--chat-template", str(template),
                             "--log-level", "warning"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"ortrun serve did not start: {(folder.parent / 'serve.log').read_text()}")
            time.sleep(0.2)
        yield url, folder, httpx.get(f"{url}/health", timeout=5).json()["devices"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="none", timeout=60, max_retries=0)


def test_openai_models_completions_chat(server, client):
    url, folder, _ = server
    (model,) = client.models.list().data
    assert model.id == "tiny"
    out = client.completions.create(model="tiny", prompt=text_of(PROMPTS[0]), max_tokens=10, temperature=0,
                                    extra_body={"return_token_ids": True})
    want = alone(folder, PROMPTS[0], 10)
    assert out.choices[0].model_extra["token_ids"] == want
    assert out.choices[0].text == "".join(f" t{t}" for t in (want[:-1] if want[-1] == EOS else want))
    assert out.usage.prompt_tokens == 5 and out.usage.completion_tokens == len(want)
    assert out.choices[0].finish_reason == ("stop" if want[-1] == EOS else "length")
    stop = f" t{want[2]}"  # the third token's text ends the answer before it
    cut = client.completions.create(model="tiny", prompt=text_of(PROMPTS[0]), max_tokens=10, temperature=0, stop=stop)
    assert cut.choices[0].text == f" t{want[0]} t{want[1]}" and cut.choices[0].finish_reason == "stop"
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "t5 t6"}],
                                          max_tokens=4, temperature=0, extra_body={"return_token_ids": True})
    assert chat.choices[0].message.role == "assistant" and chat.usage.prompt_tokens == 3  # t5 t6 t1: the template's
    assert chat.choices[0].model_extra["token_ids"] == alone(folder, [5, 6, 1], 4)
    assert chat.object == "chat.completion"


def test_openai_streaming_equals_whole(client):
    kwargs = {"model": "tiny", "prompt": text_of(PROMPTS[3]), "max_tokens": 12, "temperature": 0}
    whole = client.completions.create(**kwargs)
    pieces, finish, used = [], None, None
    for chunk in client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs):
        if chunk.choices:
            pieces.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            used = chunk.usage
    assert "".join(pieces) == whole.choices[0].text and finish == whole.choices[0].finish_reason
    assert used.completion_tokens == whole.usage.completion_tokens
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "t9 t9"}],
                                          max_tokens=6, temperature=0, stream=True)
    chunks = list(chat)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_ollama_generate_and_chat(server):
    import httpx

    url, folder, _ = server
    body = {"model": "tiny", "prompt": text_of(PROMPTS[4]), "raw": True, "stream": False,
            "options": {"num_predict": 8, "temperature": 0}}
    whole = httpx.post(f"{url}/api/generate", json=body, timeout=60).json()
    want = alone(folder, PROMPTS[4], 8)
    assert whole["done"] and whole["context"] == PROMPTS[4] + want and whole["eval_count"] == len(want)
    lines = httpx.post(f"{url}/api/generate", json={**body, "stream": True}, timeout=60).text.splitlines()
    events = [json.loads(line) for line in lines]
    assert events[-1]["done"] and not any(e["done"] for e in events[:-1])
    assert "".join(e["response"] for e in events) == whole["response"]
    chat = httpx.post(f"{url}/api/chat", json={"model": "tiny", "messages": [{"role": "user", "content": "t3"}],
                                                "options": {"num_predict": 3}}, timeout=60)
    events = [json.loads(line) for line in chat.text.splitlines()]
    assert events[-1]["done"] and events[-1]["message"]["role"] == "assistant" and events[-1]["eval_count"] <= 3


def test_refusals_name_the_limit(server):
    import httpx

    url, _, _ = server
    r = httpx.post(f"{url}/v1/completions", json={"prompt": text_of([5] * CTX), "max_tokens": 2}, timeout=30)
    assert r.status_code == 503 and r.json()["error"]["limit"] == "ctx_size" and "--ctx-size" in r.json()["error"]["message"]
    assert re_value(httpx.get(f"{url}/metrics", timeout=30).text, 'ort_serve_requests_refused_total{reason="context"}') == 1
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "t1", "temperature": -1}, timeout=30)
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/completions", json={"prompt": [3, 999], "max_tokens": 2}, timeout=30)
    assert r.status_code == 400 and "[999]" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/completions", json={"prompt": PROMPTS[2], "max_tokens": 5, "temperature": 0,
                                                  "return_token_ids": True}, timeout=30)
    assert r.json()["choices"][0]["token_ids"] == alone(server[1], PROMPTS[2], 5)  # a prompt of token ids
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "t1", "logprobs": 2}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
    r = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", timeout=30)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]


def test_eight_concurrent_clients_equal_alone_within_budget(server):
    import httpx

    url, folder, initial = server
    lengths = [12, 3, 20, 7, 16, 1, 9, 5]

    async def one(http, prompt, n):
        r = await http.post(f"{url}/v1/completions", json={"prompt": text_of(prompt), "max_tokens": n,
                                                           "temperature": 0, "return_token_ids": True})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["token_ids"]

    async def main():
        async with httpx.AsyncClient(timeout=120) as http:
            return await asyncio.gather(*(one(http, p, n) for p, n in zip(PROMPTS, lengths)))

    before = httpx.get(f"{url}/metrics", timeout=30).text
    got = asyncio.run(main())
    for prompt, n, out in zip(PROMPTS, lengths, got):
        assert out == alone(folder, prompt, n), prompt
    health = httpx.get(f"{url}/health", timeout=30).json()
    assert health["decoding"] == "batched"
    (gpu,) = health["devices"].values()
    assert gpu["capacity"] == 1500 << 10 and 0 < gpu["peak"] <= gpu["capacity"], gpu
    assert gpu["peak"] == next(iter(initial.values()))["peak"]  # nothing allocated beyond the initial plan
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    for name in ("queue_depth", "time_to_first_token_seconds_count", "tokens_per_second", "kv_blocks_in_use",
                 "device_bytes_in_use", "device_budget_bytes"):
        assert f"ort_serve_{name}" in metrics
    assert re_value(metrics, "ort_serve_generated_tokens_total") >= sum(lengths)
    assert re_value(metrics, "ort_serve_kv_blocks_total") == 48 and re_value(metrics, "ort_serve_kv_blocks_in_use") == 0
    assert (health["kv_block"], health["kv_blocks"]) == (8, 48)
    steps, sequences = (re_value(metrics, name) - re_value(before, name)
                        for name in ("ort_serve_decode_steps_total", "ort_serve_decode_step_sequences_total"))
    assert sequences / steps > 1.5, (sequences, steps)  # the clients' decode steps ran as batches


def test_queue_full_is_429_and_a_gone_client_frees_its_slot(server):
    import httpx

    url, _, _ = server

    async def one(http, i):
        return await http.post(f"{url}/v1/completions", json={"prompt": text_of([i + 1]), "max_tokens": 40,
                                                              "temperature": 0})

    async def main():
        async with httpx.AsyncClient(timeout=120) as http:
            return await asyncio.gather(*(one(http, i) for i in range(24)))

    answers = asyncio.run(main())
    refused = [r for r in answers if r.status_code == 429]
    assert refused and all(r.json()["error"]["limit"] == "max_queue" for r in refused)
    assert "--max-queue 4" in refused[0].json()["error"]["message"]
    assert sum(r.status_code == 200 for r in answers) >= 8 + 4 - 1
    with httpx.stream("POST", f"{url}/v1/completions", json={"prompt": "t1", "max_tokens": 60, "stream": True},
                      timeout=60) as r:
        next(r.iter_lines())  # the first event, then the client goes
    deadline = time.monotonic() + 30
    while not cancelled(url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cancelled(url) == 1 and httpx.get(f"{url}/health", timeout=5).json()["active"] == 0


def cancelled(url: str) -> float:
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=5).text
    return re_value(text, 'ort_serve_requests_finished_total{reason="cancelled"}') if "cancelled" in text else 0


def re_value(text: str, name: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


def test_shared_genai_export_matches_onnxruntime_genai(shared_models):
    """MODELS.md: onnxruntime-genai's greedy tokens after [1, 5, 9, 33, 100] begin 146, 248, 149, 253, 112."""
    engine = build_engine(shared_models / "llama_l4" / "genai_fp32_cpu", max_batch=4)
    engine.scheduler.start()
    try:
        out = run_all(engine, [[1, 5, 9, 33, 100], [1, 7], [1, 9, 9]], [11, 6, 6])
    finally:
        engine.close()
    assert engine.runner.mode == "batched"
    assert out[0] == [146, 248, 149, 253, 112, 248, 248, 248, 248, 248, 248]
    assert np.all(np.asarray(out[1]) < VOCAB)
