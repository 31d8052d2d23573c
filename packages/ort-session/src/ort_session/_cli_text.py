"""`ortrun generate`: the prompt (argument or stdin), the model's tokenizer and genai_config.json, one plan for
prefill and every decode step, tokens streamed as they are made, stopping at EOS."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

import attrs

from ._cli_commands import _load, _options, _say, _session, device_lines
from ._context_limits import check_ctx_size, inputs_bytes, memory_room
from ._errors import InvalidOptionError


@attrs.define
class GenerationTiming:
    """llama.cpp's two speeds: prompt processing (the prefill, up to the first new token: the time to first
    token) and generation (every later token), each in tokens per second."""

    prompt_tokens: int
    start: float = attrs.field(factory=time.perf_counter)
    first: float | None = None
    last: float | None = None
    count: int = 0

    def token(self) -> None:
        now = time.perf_counter()
        self.first = now if self.first is None else self.first
        self.last, self.count = now, self.count + 1

    def summary(self) -> str:
        if self.first is None or self.last is None:
            return f"no token generated in {time.perf_counter() - self.start:.2f} s"
        ttft = self.first - self.start
        text = (f"prompt {self.prompt_tokens} tokens in {ttft * 1e3:.1f} ms ({self.prompt_tokens / max(ttft, 1e-9):.1f} "
                f"tokens/s; time to first token {ttft * 1e3:.1f} ms)")
        decoded = self.count - 1
        if decoded > 0:
            span = self.last - self.first
            text += f", generation {decoded} tokens in {span:.2f} s ({decoded / max(span, 1e-9):.1f} tokens/s)"
        return f"{self.count} tokens: {text}"


def read_prompt(prompt: str | None, stdin: TextIO | None = None) -> str:
    """`--prompt TEXT`; `-` or no prompt with stdin not a terminal reads stdin (a trailing newline dropped)."""
    stdin = stdin if stdin is not None else sys.stdin
    if prompt == "-" or (prompt is None and stdin is not None and not stdin.isatty()):
        text = stdin.read()
        return text[:-1] if text.endswith("\n") else text
    if prompt is None:
        raise SystemExit("ortrun generate: error: give a prompt: -p TEXT, -p - (stdin), or pipe it in")
    return prompt


def text_codec(args: argparse.Namespace, model: Any, files: Any) -> Any:
    """The model's tokenizer: `--tokenizer`, else the folder's; bytes modulo the logits' vocabulary without one."""
    from ._tokenizer import load_tokenizer

    logits = model.graph.values.get("logits")
    vocab = logits.shape[-1] if logits is not None and logits.shape and isinstance(logits.shape[-1], int) else 256
    return load_tokenizer(args.tokenizer or (files.tokenizer if files is not None else None), int(vocab))


def plan_once(opts: Any, maxes: dict[str, list[int]] | None) -> None:
    """One plan for the prefill and every decode step (each step's inputs are no larger than `maxes`): zero
    allocations per token; without `maxes`, say that each new shape is planned on its first step."""
    if maxes is not None:
        opts.max_shapes = maxes
        opts.add_session_config_entry("session.pre_allocate_execution_buffers", "1")
    else:
        _say("note: cannot tell every input dimension of the decode steps ahead; each new shape is planned on "
             "its first step, outside the initial plan — pass --dim NAME=N for the model's symbolic dims")


def generate_text(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from ._generate import generate, generation_max_shapes
    from ._tokenizer import StreamDecoder

    out = out if out is not None else sys.stdout
    prompt = read_prompt(args.prompt)
    model, label, files = _load(args)
    codec = text_codec(args, model, files)
    ids = codec.encode(prompt)
    if not ids:
        raise SystemExit("ortrun generate: error: the prompt encodes to no token; give a longer prompt")
    positions = check_ctx_size(model.graph, args.ctx_size)
    context = args.ctx_size or (files.context_length if files is not None else None)
    if positions is not None:
        context = min(context or positions, positions)
    if context is not None and len(ids) >= context:
        raise InvalidOptionError(f"the prompt is {len(ids)} tokens, the context {context}"
                                 f"{' (the positions the model holds)' if context == positions else ''}; shorten it"
                                 f"{'' if context == positions else ' or raise -c/--ctx-size'}")
    new_tokens = min(args.max_new_tokens, context - len(ids)) if context is not None else args.max_new_tokens
    # -c plans the whole context (llama.cpp's KV size); otherwise the plan covers what this run can reach
    max_total = args.ctx_size or len(ids) + new_tokens
    dims = dict(args.dim)
    opts = _options(args, dims, model)
    maxes = generation_max_shapes(model, len(ids), max_total, dims)
    if maxes is not None and context is None:  # no positions told: the longest step's inputs must fit somewhere
        need, room = inputs_bytes(model.graph, maxes), memory_room(args.budget)
        if need > room:
            raise InvalidOptionError(f"-n {args.max_new_tokens}: a context of {max_total} tokens needs "
                                     f"{need} bytes of inputs (the KV cache) at its last step, more than this machine's "
                                     f"memory and the device budgets hold ({room} bytes); lower -n or give -c/--ctx-size")
    plan_once(opts, maxes)
    sess = _session(args, model, label, opts)
    eos = files.eos_ids if files is not None else ()
    _say(f"prompt: {len(ids)} tokens ({codec.kind}); up to {new_tokens} new, planned context {max_total}"
         + (f", stopping at EOS {list(eos)}" if eos else ""))
    print(prompt, end="", flush=True, file=out)
    stream = StreamDecoder(codec, ids)
    timing = GenerationTiming(len(ids))
    allocations, stopped, interrupted = 0, False, False
    try:
        for token in generate(sess, ids, new_tokens, args.top_k, args.temperature, args.seed, eos_id=eos):
            timing.token()
            allocations += sess.last_run_stats.allocations
            if token in eos:
                stopped = True
                break
            piece = stream.push(token)
            if piece:
                print(piece, end="", flush=True, file=out)
    except KeyboardInterrupt:  # Ctrl-C: end the line, say what was made and how fast, exit 130 as shells expect
        interrupted = True
    print(stream.flush(), file=out, flush=True)
    _say(timing.summary() + (", stopped at EOS" if stopped else "") + (", interrupted (Ctrl-C)" if interrupted else "")
         + f"; {allocations} runtime allocations in total ({sess.last_run_stats.layout})")
    device_lines(sess, _say)
    sess.close()
    return 130 if interrupted else 0
