"""`ortrun serve`'s HTTP application (Starlette): OpenAI's /v1/chat/completions, /v1/completions and /v1/models
(server-sent events when `stream`, usage counts), ollama's /api/generate and /api/chat (NDJSON streaming),
/health and Prometheus /metrics. Requests go to the engine's scheduler; the HTTP layer only translates."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ._chat_template import ChatTemplateError
from ._engine import Engine
from ._sampling import SamplingError, SamplingParams
from ._scheduler import Request
from ._serve_errors import AdmissionError


class BadRequest(ValueError):
    """A request body the API does not accept (HTTP 400), naming the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def error_response(message: str, status: int, kind: str, param: str | None = None, **extra: Any) -> JSONResponse:
    """OpenAI's error body: {"error": {"message", "type", "param", "code"}} (extra keys name a limit)."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status, **extra}},
                        status_code=status)


def admission_response(e: AdmissionError) -> JSONResponse:
    kind = "rate_limit_exceeded" if e.status == 429 else "invalid_request_error" if e.status == 400 else "unavailable"
    return error_response(str(e), e.status, kind, limit=e.limit, limit_value=e.value)


async def read_json(request: HTTPRequest) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not JSON: {e}") from e
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def field(body: dict[str, Any], name: str, kinds: type | tuple[type, ...], default: Any = None) -> Any:
    """`body[name]` when it is one of `kinds` (a bool is not a number here), `default` when absent or null."""
    value = body.get(name, default)
    if value is None:
        return default
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = "a number" if float in kinds else " or ".join(
            {"int": "an integer", "bool": "true or false", "str": "a string"}.get(k.__name__, k.__name__) for k in kinds)
        raise BadRequest(f"{name}={value!r}: expected {names}", name)
    return value


def stop_field(value: Any, name: str = "stop") -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise BadRequest(f"{name}={value!r}: expected a string or a list of strings", name)


async def generate(engine: Engine, prompt: list[int], params: SamplingParams, priority: int = 0
                   ) -> tuple[Request, AsyncIterator]:
    """Submit to the scheduler (AdmissionError when refused); the request and its (text, finish) events."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def emit(piece: str, finish: str | None) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, (piece, finish))
        except RuntimeError:  # the loop is closed: the server is stopping
            pass

    req = Request(prompt, params, emit, priority=priority)
    engine.scheduler.submit(req)

    async def stream() -> AsyncIterator[tuple[str, str | None]]:
        try:
            while True:
                piece, finish = await events.get()
                yield piece, finish
                if finish is not None:
                    return
        finally:
            req.cancel()  # a client gone (or done): the slot is freed at the next step

    return req, stream()


async def collect(events: AsyncIterator[tuple[str, str | None]]) -> tuple[str, str]:
    """The whole text of a non-streamed answer and its finish reason."""
    parts, finish = [], None
    async for piece, finish in events:  # noqa: B007 - the last event's finish reason is the answer's
        parts.append(piece)
    return "".join(parts), finish or "cancelled"


def usage(req: Request) -> dict[str, int]:
    return {"prompt_tokens": len(req.prompt), "completion_tokens": len(req.output),
            "total_tokens": len(req.prompt) + len(req.output)}


UNSERVED = {"logprobs": "log probabilities are not returned", "top_logprobs": "log probabilities are not returned",
            "echo": "the prompt is not echoed", "tools": "tool calls are not parsed",
            "logit_bias": "logit biases are not applied", "suffix": "insertion (a suffix) is not served"}


def openai_params(engine: Engine, body: dict[str, Any], prompt: list[int], default_max: int | None) -> SamplingParams:
    if field(body, "n", int, 1) != 1 or field(body, "best_of", int, 1) != 1:
        raise BadRequest("n / best_of: only 1 is served (one choice per request)", "n")
    for name, why in UNSERVED.items():
        if body.get(name) not in (None, False, [], {}, 0):
            raise BadRequest(f"{name}={body[name]!r}: {why} by this server; leave {name} out", name)
    max_tokens = field(body, "max_completion_tokens", int, field(body, "max_tokens", int, default_max))
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest(f"max_tokens={max_tokens!r}: expected an int >= 1", "max_tokens")
    num = (int, float)
    return engine.params(temperature=field(body, "temperature", num), top_p=field(body, "top_p", num),
                         top_k=field(body, "top_k", int), min_p=field(body, "min_p", num),
                         repetition_penalty=field(body, "repetition_penalty", num),
                         presence_penalty=field(body, "presence_penalty", num),
                         frequency_penalty=field(body, "frequency_penalty", num), seed=field(body, "seed", int),
                         stop=stop_field(body.get("stop")),
                         max_new_tokens=engine.scheduler.check(prompt, max_tokens))


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: expected a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}]={m!r}: expected an object with a string 'role'", "messages")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI's content parts: the text ones, in order
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        out.append({**m, "content": content if content is not None else ""})
    return out


def token_prompt(value: Any, vocab: int | None) -> list[int]:
    """OpenAI's prompt given as token ids (a list of ints, each in the vocabulary)."""
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise BadRequest(f"prompt={str(value)[:80]!r}: expected a string or a list of token ids (one prompt per "
                         "request)", "prompt")
    bad = [t for t in value if t < 0 or (vocab is not None and t >= vocab)]
    if bad:
        raise BadRequest(f"prompt token ids {bad[:5]!r} are outside the vocabulary [0, {vocab})", "prompt")
    return list(value)


def sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def openai_completion(engine: Engine, body: dict[str, Any], chat: bool) -> Response:
    if chat:
        text = engine.render_chat(chat_messages(body))
    else:
        text = body.get("prompt")
        if isinstance(text, list) and len(text) == 1 and isinstance(text[0], str | list):
            text = text[0]
    prompt = engine.encode(text) if isinstance(text, str) else token_prompt(text, engine.runner.vocab)
    params = openai_params(engine, body, prompt, None if chat else 16)
    req, events = await generate(engine, prompt, params, field(body, "priority", int, 0))
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
    created, obj = int(time.time()), "chat.completion" if chat else "text_completion"
    base = {"id": rid, "created": created, "model": engine.name}
    if not field(body, "stream", bool, False):
        content, finish = await collect(events)
        if finish.startswith("error"):
            return error_response(finish, 500, "server_error")
        choice = ({"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": None,
                   "finish_reason": finish} if chat else
                  {"index": 0, "text": content, "logprobs": None, "finish_reason": finish})
        if body.get("return_token_ids"):  # vLLM's extension: the generated ids
            choice["token_ids"] = list(req.output)
        return JSONResponse({**base, "object": obj, "choices": [choice], "usage": usage(req)})
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    chunk_obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(piece: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
        if chat:
            delta = ({"role": "assistant", "content": ""} if first else {"content": piece} if piece else {})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}
        return {**base, "object": chunk_obj, "choices": [choice], **({"usage": None} if include_usage else {})}

    async def body_stream() -> AsyncIterator[str]:
        if chat:
            yield sse(chunk(None, None, first=True))
        async for piece, finish in events:
            if finish is not None and finish.startswith("error"):
                yield sse({"error": {"message": finish, "type": "server_error", "code": 500}})
                break
            if piece or finish is not None:
                yield sse(chunk(piece, finish))
        if include_usage:
            yield sse({**base, "object": chunk_obj, "choices": [], "usage": usage(req)})
        yield "data: [DONE]\n\n"

    return StreamingResponse(body_stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def handler(engine: Engine, fn: Any) -> Any:
    """A route: bad bodies answer 400, refused requests 429/503, each with OpenAI's error body."""
    async def route(request: HTTPRequest) -> Response:
        try:
            return await fn(engine, await read_json(request) if request.method == "POST" else {})
        except BadRequest as e:
            return error_response(str(e), 400, "invalid_request_error", e.param)
        except (SamplingError, ChatTemplateError) as e:
            return error_response(str(e), 400, "invalid_request_error", str(e).split("=")[0])
        except AdmissionError as e:
            return admission_response(e)
    return route


async def models(engine: Engine, body: dict[str, Any]) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": engine.name, "object": "model", "created": engine.created,
                                                     "owned_by": "ort-serve"}]})


def build_app(engine: Engine) -> Starlette:
    from ._server_ollama import ollama_chat, ollama_generate, ollama_tags
    from ._server_status import health, metrics

    async def chat(e: Engine, body: dict[str, Any]) -> Response:
        return await openai_completion(e, body, chat=True)

    async def completions(e: Engine, body: dict[str, Any]) -> Response:
        return await openai_completion(e, body, chat=False)

    routes = [Route("/v1/chat/completions", handler(engine, chat), methods=["POST"]),
              Route("/v1/completions", handler(engine, completions), methods=["POST"]),
              Route("/v1/models", handler(engine, models), methods=["GET"]),
              Route("/api/generate", handler(engine, ollama_generate), methods=["POST"]),
              Route("/api/chat", handler(engine, ollama_chat), methods=["POST"]),
              Route("/api/tags", handler(engine, ollama_tags), methods=["GET"]),
              Route("/health", handler(engine, health), methods=["GET"]),
              Route("/metrics", handler(engine, metrics), methods=["GET"])]
    return Starlette(routes=routes)
