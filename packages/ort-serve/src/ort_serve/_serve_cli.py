"""`ortrun serve MODEL`: the engine (continuous batching over a KV pool planned inside the budget) behind an
OpenAI- and ollama-compatible HTTP server (Starlette under uvicorn)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable

from ort_session._cli_args import non_negative_int, positive_int


def _port(text: str) -> int:
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a TCP port is 0 to 65535")
    return value


def add_parser(sub: argparse._SubParsersAction, model_options: Callable[[argparse.ArgumentParser], None]) -> list[str]:
    sp = sub.add_parser("serve", help="an OpenAI- and ollama-compatible HTTP server with continuous batching",
                        description="Serve MODEL over HTTP: /v1/chat/completions, /v1/completions, /v1/models, "
                                    "/api/generate, /api/chat, /health, /metrics.")
    model_options(sp)
    sp.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only), e.g. --host 0.0.0.0")
    sp.add_argument("--port", type=_port, default=8080, help="TCP port (default 8080), e.g. --port 11434")
    sp.add_argument("--max-batch", type=positive_int, default=8, metavar="N",
                    help="sequences decoded together (KV pool slots, planned at initialization; default 8), "
                         "e.g. --max-batch 4")
    sp.add_argument("--kv-block", type=positive_int, default=16, metavar="N",
                    help="positions per KV block (the pool is paged: a sequence holds ceil(len / N) blocks and takes "
                         "one more as it grows; default 16), e.g. --kv-block 32")
    sp.add_argument("--kv-blocks", type=positive_int, metavar="N",
                    help="KV blocks in the pool, allocated at initialization (default: --max-batch sequences of "
                         "--ctx-size); fewer admit as many short answers, preempting (and later resuming) the "
                         "latest admitted when the pool runs out, e.g. --kv-blocks 256")
    sp.add_argument("--kv-on-device", action="store_true",
                    help="keep the batched past on the device between decode steps while the batch is unchanged "
                         "(no KV bytes to the host; it must fit twice beside the plan within --budget)")
    sp.add_argument("-c", "--ctx-size", type=positive_int, metavar="N",
                    help="positions per sequence, prompt included (default: genai_config.json's context_length, "
                         "capped at the model's positions), e.g. -c 2048")
    sp.add_argument("--prefill-chunk", type=positive_int, default=32, metavar="N",
                    help="prompt tokens fed per step (a newcomer's prefill interleaves with the others' decode "
                         "chunk by chunk; default 32), e.g. --prefill-chunk 64")
    sp.add_argument("--max-queue", type=non_negative_int, default=64, metavar="N",
                    help="requests that may wait for a slot; more are refused with 429 (default 64), "
                         "e.g. --max-queue 16")
    sp.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json (default: the model folder's), e.g. --tokenizer ./tokenizer.json")
    sp.add_argument("--chat-template", metavar="FILE",
                    help="a Jinja2 chat template (default: the folder's tokenizer_config.json chat_template), "
                         "e.g. --chat-template chatml.jinja")
    sp.add_argument("--name", metavar="NAME", help="the model's name in the APIs (default: the folder's name), e.g. --name smollm2")
    sp.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                    help="uvicorn's log level (default info), e.g. --log-level warning")
    sp.set_defaults(fn=cmd_serve)
    return ["serve"]


def _template_or_none(args: argparse.Namespace, files) -> object:
    """`--chat-template FILE` (an error when unreadable), else the folder's; None with a warning without one."""
    from ._chat_cli import _template
    from ._chat_template import ChatTemplateError

    try:
        return _template(args, files.folder if files is not None else None)
    except ChatTemplateError as e:
        if args.chat_template:
            raise
        logging.getLogger("ort_serve").warning("no chat template (%s): chat requests are rendered as 'role: content' "
                                               "lines", e)
        return None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        from ._serve_errors import ServeError

        raise ServeError("`ortrun serve` needs Starlette and uvicorn: pip install './packages/ort-serve[serve]'") \
            from None
    from ort_session._cli_commands import _load, _options, _say, _session
    from ort_session._cli_text import text_codec

    from ._engine import Engine
    from ._server import build_app

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    model, label, files = _load(args)
    opts = _options(args, dict(args.dim), model)
    engine = Engine.build(model, files, opts, lambda o: _session(args, model, label, o), text_codec(args, model, files),
                          max_batch=args.max_batch, ctx_size=args.ctx_size, prefill_chunk=args.prefill_chunk,
                          max_queue=args.max_queue, name=args.name, template=_template_or_none(args, files),
                          kv_block=args.kv_block, kv_blocks=args.kv_blocks, kv_on_device=args.kv_on_device)
    runner = engine.runner
    pool = runner.pool
    _say(f"serving {engine.name!r}: {runner.mode} decoding ({runner.reason}), batch {pool.slots} x {runner.ctx} "
         f"positions, KV pool {pool.blocks} blocks x {pool.block} positions"
         f"{f' (a batch past kept on {runner.resident.device})' if runner.resident else ''}, prefill chunk {runner.chunk}, "
         f"queue {args.max_queue}")
    for device, usage in sorted(engine.session.device_memory().items()):
        _say(f"{device}: {usage['in_use']} bytes in use after initialization, budget {usage['capacity']}")
    config = uvicorn.Config(build_app(engine), host=args.host, port=args.port, log_level=args.log_level)
    server = uvicorn.Server(config)
    http = threading.Thread(target=server.run, name="ort-serve-http", daemon=True)
    previous = signal.signal(signal.SIGTERM, lambda *_: engine.scheduler.stop(timeout=0))
    http.start()
    try:  # the engine in the main thread: the CPU provider's BLAS thread limit holds there
        engine.scheduler.run(alive=http.is_alive)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.should_exit = True
        http.join(10)
        engine.close()
    if not server.started:
        _say(f"could not serve on {args.host}:{args.port} (see uvicorn's message above)")
        return 1
    return 0
