"""ollama's API: /api/generate and /api/chat (NDJSON lines when `stream`, ollama's default; one object when
`"stream": false`), /api/tags. Options as ollama names them: num_predict, temperature, top_k, top_p, min_p,
seed, stop, repeat_penalty, presence_penalty, frequency_penalty."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from ._engine import Engine
from ._sampling import SamplingParams
from ._server import BadRequest, chat_messages, collect, field, generate, stop_field


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def ollama_params(engine: Engine, body: dict[str, Any], prompt: list[int]) -> SamplingParams:
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise BadRequest(f"options={options!r}: expected an object", "options")
    num = (int, float)
    predict = field(options, "num_predict", int)
    if predict is not None and predict < -2:
        raise BadRequest(f"num_predict={predict!r}: expected -1 (until the context ends) or a positive int",
                         "num_predict")
    predict = None if predict is None or predict < 0 else predict
    if predict == 0:
        raise BadRequest("num_predict=0: nothing to generate; give a positive int or -1", "num_predict")
    return engine.params(temperature=field(options, "temperature", num), top_k=field(options, "top_k", int),
                         top_p=field(options, "top_p", num), min_p=field(options, "min_p", num),
                         repetition_penalty=field(options, "repeat_penalty", num),
                         presence_penalty=field(options, "presence_penalty", num),
                         frequency_penalty=field(options, "frequency_penalty", num),
                         seed=field(options, "seed", int), stop=stop_field(options.get("stop"), "options.stop"),
                         max_new_tokens=engine.scheduler.check(prompt, predict))


async def _ollama(engine: Engine, body: dict[str, Any], text: str, chat: bool) -> Response:
    prompt = engine.encode(text)
    params = ollama_params(engine, body, prompt)
    start = time.perf_counter_ns()
    req, events = await generate(engine, prompt, params)

    def line(piece: str, done: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"model": engine.name, "created_at": _now()}
        if chat:
            out["message"] = {"role": "assistant", "content": piece}
        else:
            out["response"] = piece
        out["done"] = done
        return out

    def final(piece: str, finish: str) -> dict[str, Any]:
        first = req.first_token or time.perf_counter()
        out = line(piece, True)
        out.update(done_reason=finish, total_duration=time.perf_counter_ns() - start,
                   prompt_eval_count=len(req.prompt), prompt_eval_duration=int((first - req.arrived) * 1e9),
                   eval_count=len(req.output), eval_duration=int((time.perf_counter() - first) * 1e9))
        if not chat:
            out["context"] = [*req.prompt, *req.output]  # ollama's: the tokens of this exchange
        return out

    if not field(body, "stream", bool, True):
        text, finish = await collect(events)
        if finish.startswith("error"):
            return JSONResponse({"error": finish}, status_code=500)
        return JSONResponse(final(text, finish))

    async def lines() -> AsyncIterator[str]:
        async for piece, finish in events:
            if finish is not None and finish.startswith("error"):
                yield json.dumps({"error": finish}) + "\n"
            elif finish is not None:
                yield json.dumps(final(piece, finish), ensure_ascii=False) + "\n"
            elif piece:
                yield json.dumps(line(piece, False), ensure_ascii=False) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def ollama_generate(engine: Engine, body: dict[str, Any]) -> Response:
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise BadRequest(f"prompt={prompt!r}: expected a string", "prompt")
    if body.get("raw") or engine.template is None:  # ollama: the model's template around it unless raw
        return await _ollama(engine, body, prompt, chat=False)
    system = body.get("system")
    messages = ([{"role": "system", "content": system}] if isinstance(system, str) else []) + \
        [{"role": "user", "content": prompt}]
    return await _ollama(engine, body, engine.render_chat(messages), chat=False)


async def ollama_chat(engine: Engine, body: dict[str, Any]) -> Response:
    return await _ollama(engine, body, engine.render_chat(chat_messages(body)), chat=True)


async def ollama_tags(engine: Engine, body: dict[str, Any]) -> Response:
    return JSONResponse({"models": [{"name": engine.name, "model": engine.name, "modified_at": _now(),
                                     "details": {"format": "onnx"}}]})
