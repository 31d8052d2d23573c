"""`ortrun chat MODEL`: an interactive chat with a model folder (llama.cpp's llama-cli, ollama's run).

One session planned for the whole context (prefill chunks and every decode step in the same pre-allocated
buffers), the model's chat template, its generation defaults under the command line's flags, and the KV cache
kept between turns (`Conversation`). On a terminal: a `>>> ` prompt with readline's line editing and history,
Ctrl-C ends the current answer, Ctrl-D or `/bye` leaves. From a pipe: one turn per line, no prompt."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

DEFAULT_CONTEXT = 4096  # without -c: the model's context length, at most this (llama.cpp's default n_ctx)
HELP = ("/clear: forget the conversation; /system [TEXT]: set (or show) the system prompt; /bye: leave; "
        "Ctrl-C: stop the answer; Ctrl-D: leave")


def add_parser(sub: argparse._SubParsersAction, model_options: Callable[[argparse.ArgumentParser], None]) -> list[str]:
    from ort_session._cli_args import positive_int, seed_arg

    sp = sub.add_parser("chat", help="an interactive chat with a model folder (its chat template, KV cache kept "
                                     "between turns)")
    model_options(sp)
    sp.add_argument("--system", metavar="TEXT", help="the system prompt, e.g. --system 'You are terse.'")
    sp.add_argument("-n", "--n-predict", dest="n_predict", type=positive_int, metavar="N",
                    help="new tokens per answer at most (default 256; an answer also stops at EOS, a stop string "
                         "or the end of the context), e.g. -n 128")
    sp.add_argument("-c", "--ctx-size", type=positive_int, metavar="N",
                    help=f"the context planned for (one plan and KV cache for the whole conversation; default the "
                         f"model's context length, at most {DEFAULT_CONTEXT}), e.g. -c 2048")
    sp.add_argument("-b", "--batch-size", type=positive_int, default=512, metavar="N",
                    help="prompt tokens prefilled per step at most (default 512), e.g. -b 128")
    sp.add_argument("--tokenizer", metavar="PATH", help="tokenizer.json, tokenizer.model or vocab.txt (default: "
                                                        "the model folder's), e.g. --tokenizer ./tokenizer.json")
    sp.add_argument("--chat-template", metavar="FILE", help="a Jinja2 chat template instead of the folder's "
                                                            "tokenizer_config.json one, e.g. --chat-template chatml.jinja")
    g = sp.add_argument_group("sampling (the model folder's generation_config.json / genai_config.json defaults "
                              "apply to what is not given)")
    g.add_argument("--temperature", type=float, metavar="T", help="0 is greedy, e.g. --temperature 0.7")
    g.add_argument("--top-k", type=int, metavar="K", help="keep the K most probable tokens (0: all), e.g. --top-k 40")
    g.add_argument("--top-p", type=float, metavar="P", help="nucleus sampling, e.g. --top-p 0.9")
    g.add_argument("--min-p", type=float, metavar="P", help="drop tokens under P x the top one's, e.g. --min-p 0.05")
    g.add_argument("--repeat-penalty", type=float, metavar="X", help="repetition penalty, e.g. --repeat-penalty 1.1")
    g.add_argument("--presence-penalty", type=float, metavar="X", help="OpenAI's, e.g. --presence-penalty 0.5")
    g.add_argument("--frequency-penalty", type=float, metavar="X", help="OpenAI's, e.g. --frequency-penalty 0.5")
    g.add_argument("--seed", type=seed_arg, metavar="N", help="sampling seed, e.g. --seed 1")
    g.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="end the answer at TEXT (repeatable), e.g. --stop 'User:'")
    g.add_argument("--ignore-eos", action="store_true", help="do not stop at the model's EOS ids")
    sp.set_defaults(fn=cmd_chat)
    return ["chat"]


def sampling_params(args: argparse.Namespace, folder: Any, config: Any, eos_ids: tuple[int, ...]) -> Any:
    """The model folder's generation defaults, the command line's flags over them."""
    from ._sampling import SamplingParams, generation_defaults

    defaults = generation_defaults(folder, config)
    defaults.setdefault("eos_ids", tuple(eos_ids))
    if args.ignore_eos:
        defaults["eos_ids"] = ()
    params = SamplingParams(**defaults)
    return params.evolve(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                         repetition_penalty=args.repeat_penalty, presence_penalty=args.presence_penalty,
                         frequency_penalty=args.frequency_penalty, seed=args.seed, stop=tuple(args.stop) or None,
                         max_new_tokens=args.n_predict)


def _template(args: argparse.Namespace, folder: Any) -> Any:
    import pathlib

    from ._chat_template import ChatTemplate, ChatTemplateError

    source = None
    if args.chat_template:
        path = pathlib.Path(args.chat_template)
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ChatTemplateError(f"--chat-template {str(path)!r}: cannot read it: {e}") from e
    if folder is None:
        if source is None:
            raise ChatTemplateError("the built-in demo decoder has no chat template: give a model folder, or a "
                                    "template with --chat-template FILE")
        return ChatTemplate.from_config({"chat_template": source})
    return ChatTemplate.from_folder(folder, source=source)


def build_conversation(args: argparse.Namespace) -> Any:
    """The model loaded and planned once for the context, its tokenizer, template and sampling."""
    from ort_session._cli_commands import _load, _options, _say, _session
    from ort_session._cli_text import plan_once, text_codec
    from ort_session._context_limits import check_ctx_size
    from ort_session._generate import DecodeState, generation_max_shapes

    from ._conversation import Conversation

    model, label, files = _load(args)
    folder = files.folder if files is not None else None
    template = _template(args, folder)
    params = sampling_params(args, folder, files.config if files else None, files.eos_ids if files else ())
    codec = text_codec(args, model, files)
    positions = check_ctx_size(model.graph, args.ctx_size)
    context = args.ctx_size or min((files.context_length if files else None) or positions or DEFAULT_CONTEXT,
                                   DEFAULT_CONTEXT)
    if positions is not None:
        context = min(context, positions)
    batch = min(args.batch_size, context)
    dims = dict(args.dim)
    opts = _options(args, dims, model)
    plan_once(opts, generation_max_shapes(model, batch, context, dims))  # every prefill chunk and decode step
    sess = _session(args, model, label, opts)
    _say(f"context {context} tokens, prefill batch {batch}; tokenizer {codec.kind}; sampling "
         + ("greedy" if params.greedy else f"temperature {params.temperature}, top-k {params.top_k}, top-p "
            f"{params.top_p}, min-p {params.min_p}")
         + (f"; stopping at EOS {list(params.eos_ids)}" if params.eos_ids else ""))
    return Conversation(DecodeState(sess, context), codec, template, params, context, batch, args.system)


def _command(conv: Any, line: str, say: Callable[[str], None]) -> bool | None:
    """A /command: True to leave, False when handled, None when `line` is not a command."""
    word, _, rest = line.partition(" ")
    if word in ("/bye", "/exit", "/quit"):
        return True
    if word == "/clear":
        conv.clear()
        say("conversation cleared")
    elif word == "/system":
        if rest.strip():
            conv.set_system(rest.strip())
            say("system prompt set (it applies from the next turn)")
        else:
            say(f"system prompt: {conv.system!r}")
    elif word in ("/help", "/?"):
        say(HELP)
    elif word.startswith("/") and len(word) > 1 and word[1:].isalpha():
        say(f"unknown command {word!r}; {HELP}")
    else:
        return None
    return False


@contextlib.contextmanager
def _ctrl_c_stops(conv: Any) -> Iterator[None]:
    """While an answer is made, Ctrl-C (SIGINT) asks the conversation to stop at the next step boundary instead of
    raising inside a run; a second Ctrl-C before that raises as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if conv.stop_requested:
            raise KeyboardInterrupt
        conv.request_stop()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def chat_loop(conv: Any, stdin: TextIO, out: TextIO, say: Callable[[str], None], interactive: bool) -> int:
    """Read turns until /bye or end of input; each answer streamed to `out`, its stats to `say`."""
    save_history = _readline_history() if interactive else (lambda: None)
    if interactive:
        say(f"chatting; {HELP}")
    try:
        return _turns(conv, stdin, out, say, interactive)
    finally:
        save_history()


def _readline_history() -> Callable[[], None]:
    """Line editing and history for input() where readline exists; the history is kept in $ORTRUN_CHAT_HISTORY
    (default ~/.ortrun_chat_history; empty: not kept). Returns what saves it."""
    try:
        import readline
    except ImportError:
        return lambda: None
    path = os.environ.get("ORTRUN_CHAT_HISTORY", os.path.expanduser("~/.ortrun_chat_history"))
    if not path:
        return lambda: None
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(1000)

    def save() -> None:
        with contextlib.suppress(OSError):
            readline.write_history_file(path)
    return save


def _turns(conv: Any, stdin: TextIO, out: TextIO, say: Callable[[str], None], interactive: bool) -> int:
    from ._conversation import ConversationError

    while True:
        try:
            line = input(">>> ") if interactive else stdin.readline()
        except KeyboardInterrupt:
            print(file=out, flush=True)
            say("Ctrl-C stops an answer; Ctrl-D or /bye leaves")
            continue
        except EOFError:
            if interactive:
                print(file=out, flush=True)
            return 0
        if not interactive and not line:
            return 0
        line = line.rstrip("\n")
        if not line.strip():
            continue
        handled = _command(conv, line.strip(), say)
        if handled is True:
            return 0
        if handled is False:
            continue
        try:
            with _ctrl_c_stops(conv):
                stats = conv.reply(line, lambda piece: print(piece, end="", file=out, flush=True), notice=say)
        except ConversationError as e:
            say(f"error: {e}")
            continue
        print(file=out, flush=True)
        say(stats.line())


def cmd_chat(args: argparse.Namespace) -> int:
    from ort_session._cli_commands import _say

    conv = build_conversation(args)
    try:
        return chat_loop(conv, sys.stdin, sys.stdout, _say, sys.stdin.isatty())
    finally:
        conv.state.session.close()
