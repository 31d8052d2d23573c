"""`ortrun serve` over HTTP: the OpenAI API through the real openai client, ollama's API over plain HTTP,
refusals naming the limit, and the simulated GPU's measured peak held to the budget under 8 concurrent clients."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BUDGET = "gpu:1500KiB"  # the plan holds about 1 MiB there (weights, batched KV inputs, activations)


@pytest.fixture(scope="module")
def server(kit, tmp_path_factory):
    import httpx

    folder = kit.write_folder(tmp_path_factory.mktemp("served") / "tiny", "genai")
    port = free_port()
    template = folder.parent / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}t1{% endif %}")
    log = (folder.parent / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "ort_session.cli", "serve", str(folder), "--host", "127.0.0.1",
                             "--port", str(port), "--max-batch", "8", "--max-queue", "4", "--prefill-chunk", "8",
                             "--kv-block", "8", "--kv-blocks", "48",
                             "--providers", ",".join(kit.SIM), "--budget", BUDGET, "--chat-template", str(template),
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
    import openai  # a test dependency (nox TEST_TOOLS): its absence is an error

    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="none", timeout=60, max_retries=0)


def test_openai_models_completions_chat(kit, server, client):
    url, folder, _ = server
    (model,) = client.models.list().data
    assert model.id == "tiny"
    out = client.completions.create(model="tiny", prompt=kit.text_of(kit.PROMPTS[0]), max_tokens=10, temperature=0,
                                    extra_body={"return_token_ids": True})
    want = kit.alone(folder, kit.PROMPTS[0], 10)
    assert out.choices[0].model_extra["token_ids"] == want
    assert out.choices[0].text == "".join(f" t{t}" for t in (want[:-1] if want[-1] == kit.EOS else want))
    assert out.usage.prompt_tokens == 5 and out.usage.completion_tokens == len(want)
    assert out.choices[0].finish_reason == ("stop" if want[-1] == kit.EOS else "length")
    stop = f" t{want[2]}"  # the third token's text ends the answer before it
    cut = client.completions.create(model="tiny", prompt=kit.text_of(kit.PROMPTS[0]), max_tokens=10, temperature=0, stop=stop)
    assert cut.choices[0].text == f" t{want[0]} t{want[1]}" and cut.choices[0].finish_reason == "stop"
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "t5 t6"}],
                                          max_tokens=4, temperature=0, extra_body={"return_token_ids": True})
    assert chat.choices[0].message.role == "assistant" and chat.usage.prompt_tokens == 3  # t5 t6 t1: the template's
    assert chat.choices[0].model_extra["token_ids"] == kit.alone(folder, [5, 6, 1], 4)
    assert chat.object == "chat.completion"


def test_openai_streaming_equals_whole(kit, client):
    kwargs = {"model": "tiny", "prompt": kit.text_of(kit.PROMPTS[3]), "max_tokens": 12, "temperature": 0}
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


def test_ollama_generate_and_chat(kit, server):
    import httpx

    url, folder, _ = server
    body = {"model": "tiny", "prompt": kit.text_of(kit.PROMPTS[4]), "raw": True, "stream": False,
            "options": {"num_predict": 8, "temperature": 0}}
    whole = httpx.post(f"{url}/api/generate", json=body, timeout=60).json()
    want = kit.alone(folder, kit.PROMPTS[4], 8)
    assert whole["done"] and whole["context"] == kit.PROMPTS[4] + want and whole["eval_count"] == len(want)
    lines = httpx.post(f"{url}/api/generate", json={**body, "stream": True}, timeout=60).text.splitlines()
    events = [json.loads(line) for line in lines]
    assert events[-1]["done"] and not any(e["done"] for e in events[:-1])
    assert "".join(e["response"] for e in events) == whole["response"]
    chat = httpx.post(f"{url}/api/chat", json={"model": "tiny", "messages": [{"role": "user", "content": "t3"}],
                                                "options": {"num_predict": 3}}, timeout=60)
    events = [json.loads(line) for line in chat.text.splitlines()]
    assert events[-1]["done"] and events[-1]["message"]["role"] == "assistant" and events[-1]["eval_count"] <= 3


def test_refusals_name_the_limit(kit, server):
    import httpx

    url, _, _ = server
    r = httpx.post(f"{url}/v1/completions", json={"prompt": kit.text_of([5] * kit.CTX), "max_tokens": 2}, timeout=30)
    assert r.status_code == 503 and r.json()["error"]["limit"] == "ctx_size" and "--ctx-size" in r.json()["error"]["message"]
    assert kit.re_value(httpx.get(f"{url}/metrics", timeout=30).text, 'ort_serve_requests_refused_total{reason="context"}') == 1
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "t1", "temperature": -1}, timeout=30)
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/completions", json={"prompt": [3, 999], "max_tokens": 2}, timeout=30)
    assert r.status_code == 400 and "[999]" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/completions", json={"prompt": kit.PROMPTS[2], "max_tokens": 5, "temperature": 0,
                                                  "return_token_ids": True}, timeout=30)
    assert r.json()["choices"][0]["token_ids"] == kit.alone(server[1], kit.PROMPTS[2], 5)  # a prompt of token ids
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "t1", "logprobs": 2}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
    r = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", timeout=30)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]


def test_eight_concurrent_clients_equal_alone_within_budget(kit, server):
    import httpx

    url, folder, initial = server
    lengths = [12, 3, 20, 7, 16, 1, 9, 5]

    async def one(http, prompt, n):
        r = await http.post(f"{url}/v1/completions", json={"prompt": kit.text_of(prompt), "max_tokens": n,
                                                           "temperature": 0, "return_token_ids": True})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["token_ids"]

    async def main():
        async with httpx.AsyncClient(timeout=120) as http:
            return await asyncio.gather(*(one(http, p, n) for p, n in zip(kit.PROMPTS, lengths)))

    before = httpx.get(f"{url}/metrics", timeout=30).text
    got = asyncio.run(main())
    for prompt, n, out in zip(kit.PROMPTS, lengths, got):
        assert out == kit.alone(folder, prompt, n), prompt
    health = httpx.get(f"{url}/health", timeout=30).json()
    assert health["decoding"] == "batched"
    (gpu,) = health["devices"].values()
    assert gpu["capacity"] == 1500 << 10 and 0 < gpu["peak"] <= gpu["capacity"], gpu
    assert gpu["peak"] == next(iter(initial.values()))["peak"]  # nothing allocated beyond the initial plan
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    for name in ("queue_depth", "time_to_first_token_seconds_count", "tokens_per_second", "kv_blocks_in_use",
                 "device_bytes_in_use", "device_budget_bytes"):
        assert f"ort_serve_{name}" in metrics
    assert kit.re_value(metrics, "ort_serve_generated_tokens_total") >= sum(lengths)
    assert kit.re_value(metrics, "ort_serve_kv_blocks_total") == 48 and kit.re_value(metrics, "ort_serve_kv_blocks_in_use") == 0
    assert (health["kv_block"], health["kv_blocks"]) == (8, 48)
    steps, sequences = (kit.re_value(metrics, name) - kit.re_value(before, name)
                        for name in ("ort_serve_decode_steps_total", "ort_serve_decode_step_sequences_total"))
    assert sequences / steps > 1.5, (sequences, steps)  # the clients' decode steps ran as batches


def test_queue_full_is_429_and_a_gone_client_frees_its_slot(kit, server):
    import httpx

    url, _, _ = server

    async def one(http, i):
        return await http.post(f"{url}/v1/completions", json={"prompt": kit.text_of([i + 1]), "max_tokens": 40,
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
    while not kit.cancelled(url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kit.cancelled(url) == 1 and httpx.get(f"{url}/health", timeout=5).json()["active"] == 0
