"""Shared helpers of the ort-serve tests (pytest runs with --import-mode=importlib, so test modules reach them
through the `kit` fixture): tiny decoder model folders, an engine built over one, greedy answers of a sequence
served alone, and the engine loop driven by hand."""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import types
from typing import TYPE_CHECKING

import pytest

import ort_graph
from ort_graph import zoo
from ort_session import InferenceSession
from ort_session._generate import generate
from ort_session._model_files import resolve_model
from ort_session._options import NAME_BASED_ASSIGNMENT
from ort_session._tokenizer import load_tokenizer

if TYPE_CHECKING:
    from ort_serve._engine import Engine
    from ort_serve._scheduler import Request

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
    from ort_serve._engine import Engine
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
    from ort_serve._scheduler import Request

    reqs = []
    for prompt, k, fut in zip(prompts, n, done):
        params = engine.params(**{"temperature": 0.0, **sampling}, max_new_tokens=engine.scheduler.check(prompt, k))
        reqs.append(Request(prompt, params, lambda piece, finish, f=fut: finish and f.set_result(finish)))
        engine.scheduler.submit(reqs[-1])
    for fut in done:
        assert fut.result(timeout=120) in ("stop", "length")
    return [r.output for r in reqs]


def submit_greedy(engine: Engine, prompts: list[list[int]], n: list[int], priorities=None) -> list[Request]:
    """Requests queued (the engine thread not started): `drain` runs the engine loop by hand, deterministically."""
    from ort_serve._scheduler import Request

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


def re_value(text: str, name: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


def cancelled(url: str) -> float:
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=5).text
    return re_value(text, 'ort_serve_requests_finished_total{reason="cancelled"}') if "cancelled" in text else 0


@pytest.fixture(scope="session")
def kit() -> types.SimpleNamespace:
    """The helpers and constants above, for the test modules."""
    return types.SimpleNamespace(
        VOCAB=VOCAB, CTX=CTX, EOS=EOS, PROMPTS=PROMPTS, SIM=SIM, write_folder=write_folder, text_of=text_of,
        alone=alone, build_engine=build_engine, run_all=run_all, submit_greedy=submit_greedy, drain=drain,
        metric=metric, re_value=re_value, cancelled=cancelled)
