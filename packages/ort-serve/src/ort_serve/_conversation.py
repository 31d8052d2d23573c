"""A conversation with one model that keeps its KV cache between turns (`ortrun chat`'s engine).

Each turn renders the whole conversation with the model's chat template (generation prompt included), tokenizes
it without adding special tokens (the template writes them, as transformers' `apply_chat_template` does), and
prefills only the tokens after the longest prefix already in the cache, in chunks of at most `batch` tokens.
Where the re-rendered conversation does not extend the cached tokens (a template that rewrites earlier turns, a
tokenizer that merges across the answer's end, a stop string cut out of the answer), the cache is cut back to
the common prefix and the rest is prefilled again; the turn's stats say so. The session is planned once for
the whole context with pre-allocated buffers, so no step allocates.

A turn that would not fit the context (its prompt, plus at least one new token) drops the oldest turns (a user
message and its answer each; the system prompt stays) until it fits, as ollama truncates a chat's history to its
context; the kept history is prefilled again once (after the system prompt, which stays cached) and the turn's
`dropped` count says how many went (`reply`'s `notice` hears one line of it before the answer). Only a message that
cannot fit even alone (with the system prompt) is refused, with a `ConversationError`, the conversation left as it
was. Answers stop at EOS, a stop string, `max_new_tokens`, or the end of the context (reason `context`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from ._chat_template import ChatTemplate, Message
from ._sampling import Sampler, SamplingParams, StopMatcher

__all__ = ["Conversation", "ConversationError", "TurnStats"]


class ConversationError(ValueError):
    """A turn the conversation cannot take (it would not fit the context), with the sizes and the way on."""


@attrs.define
class TurnStats:
    """What one answer cost: tokens prefilled and found cached, tokens generated, the times, why it stopped."""

    prefill: int
    cached: int
    reprefilled: bool = False
    generated: int = 0
    prefill_s: float = 0.0
    generate_s: float = 0.0
    allocations: int = 0
    reason: str = "length"  # eos | stop | length | context | interrupted
    dropped: int = 0  # the oldest turns dropped for this one to fit the context

    def dropped_line(self) -> str:
        """What the user is told when turns were dropped (empty when none was)."""
        if not self.dropped:
            return ""
        return f"(context full: dropped the {'oldest turn' if self.dropped == 1 else f'{self.dropped} oldest turns'})"

    def line(self) -> str:
        rate = (self.generated - 1) / self.generate_s if self.generated > 1 and self.generate_s > 0 else 0.0
        text = (f"{self.generated} tokens, {rate:.1f} tokens/s; prefill {self.prefill} tokens (cached {self.cached}) "
                f"in {self.prefill_s * 1e3:.1f} ms")
        if self.reprefilled:
            text += f"; the conversation no longer extended the cache: re-prefilled from token {self.cached}"
        reasons = {"eos": "stopped at EOS", "stop": "stopped at a stop string", "length": "stopped at -n",
                   "context": "stopped at the end of the context", "interrupted": "interrupted (Ctrl-C)"}
        return f"{text}; {reasons[self.reason]}; {self.allocations} runtime allocations"


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Conversation:
    """Messages so far and the KV cache of their tokens. `state` is ort-session's `DecodeState` over a session
    planned for `context` tokens; `codec` encodes and decodes text (ort-session's TextCodec)."""

    def __init__(self, state: Any, codec: Any, template: ChatTemplate, params: SamplingParams, context: int,
                 batch: int = 512, system: str | None = None) -> None:
        self.state, self.codec, self.template, self.params = state, codec, template, params
        self.context, self.batch = context, max(1, batch)
        self.system = system
        self.messages: list[Message] = []
        self.cached: list[int] = []  # the tokens whose keys and values the cache holds
        self.rng = np.random.default_rng(params.seed)
        self.stop_requested = False  # set from a signal handler: the answer ends at the next step boundary

    def request_stop(self) -> None:
        """End the current answer before its next step (what Ctrl-C does in `ortrun chat`): no run is cut
        short, so the cache stays whole."""
        self.stop_requested = True

    def clear(self) -> None:
        """Forget the conversation (the system prompt stays) and empty the cache."""
        self.messages, self.cached = [], []
        self.state.reset()

    def set_system(self, text: str | None) -> None:
        self.system = text or None

    def prompt_ids(self, user: str, skip: int = 0) -> list[int]:
        """The tokens of the conversation with `user`'s message and the assistant's opening (the oldest `skip`
        turns left out)."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        messages = [*head, *self.messages[2 * skip:], {"role": "user", "content": user}]
        return self.codec.encode(self.template.render(messages, add_generation_prompt=True), add_special_tokens=False)

    def _fit(self, user: str) -> tuple[list[int], int]:
        """The turn's tokens and how many of the oldest turns must go for them to leave room for an answer."""
        ids, skip, turns = self.prompt_ids(user), 0, len(self.messages) // 2
        while len(ids) >= self.context and skip < turns:
            skip += 1
            ids = self.prompt_ids(user, skip)
        if len(ids) >= self.context:
            earlier = "the earlier turn" if turns == 1 else f"all {turns} earlier turns"
            what = (f"this message alone makes the turn {len(ids)} tokens ({earlier} dropped"
                    f"{', the system prompt kept' if self.system else ''})" if turns
                    else f"this turn makes the conversation {len(ids)} tokens")
            raise ConversationError(f"{what}, more than the context of {self.context} holds with room to answer; "
                                    "shorten the message (or restart with a larger -c/--ctx-size)")
        return ids, skip

    def _step(self, ids: list[int], stats: TurnStats, done: list[int]) -> np.ndarray:
        logits = self.state.step(ids)
        self.cached = done + ids  # only once the step returned: the cache holds these now
        stats.allocations += getattr(self.state.session.last_run_stats, "allocations", 0)
        return logits

    def _prefill(self, ids: list[int], stats: TurnStats) -> np.ndarray:
        start = stats.cached
        if start < len(self.cached) and not self.state.truncate(start):
            self.state.reset()
            start = stats.cached = 0
        self.cached = ids[:start]
        stats.prefill = len(ids) - start
        logits = None
        for at in range(start, len(ids), self.batch):
            if self.stop_requested:
                raise KeyboardInterrupt
            logits = self._step(ids[at:at + self.batch], stats, ids[:at])
        assert logits is not None  # start < len(ids): at least one chunk
        return logits

    def reply(self, user: str, emit: Callable[[str], None],
              notice: Callable[[str], None] | None = None) -> TurnStats:
        """Answer `user`'s message, `emit`ting the text as it is made (`notice`: a line for the user before it, when
        the oldest turns are dropped to fit the context); Ctrl-C (KeyboardInterrupt) ends the answer where it is
        (what was shown becomes the assistant's message), as `request_stop()` does at the next step boundary.
        Returns the turn's stats."""
        from ort_session._tokenizer import StreamDecoder

        ids, dropped = self._fit(user)
        cached = min(_common_prefix(self.cached, ids), len(ids) - 1)  # at least one token to prefill
        stats = TurnStats(prefill=len(ids) - cached, cached=cached, reprefilled=cached < len(self.cached),
                          dropped=dropped)
        if dropped:
            self.messages = self.messages[2 * dropped:]
            if notice is not None:
                notice(stats.dropped_line())
        shown: list[str] = []
        self.stop_requested = False
        t0 = time.perf_counter()
        try:
            logits = self._prefill(ids, stats)
            stats.prefill_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            sampler = Sampler(self.params, ids)
            sampler.rng = self.rng  # one generator for the whole conversation: turns do not repeat draws
            stream, stop = StreamDecoder(self.codec, ids[-4:]), StopMatcher(self.params.stop)
            eos = set(self.params.eos_ids)
            room = min(self.params.max_new_tokens, self.context - len(ids))
            while True:
                token = sampler.pick(logits)
                if token in eos:
                    stats.reason = "eos"
                    break
                stats.generated += 1
                piece = stop.push(stream.push(token))
                if piece:
                    shown.append(piece)
                    emit(piece)
                if stop.done:
                    stats.reason = "stop"
                    break
                if stats.generated >= room:
                    stats.reason = "length" if room == self.params.max_new_tokens else "context"
                    break
                if self.stop_requested:
                    raise KeyboardInterrupt
                logits = self._step([token], stats, self.cached)
                stats.generate_s = time.perf_counter() - t1
            if stats.reason != "stop":
                tail = stop.push(stream.flush()) + stop.flush()
                if tail:
                    shown.append(tail)
                    emit(tail)
        except KeyboardInterrupt:
            stats.reason = "interrupted"
            if not stats.prefill_s:
                stats.prefill_s = time.perf_counter() - t0
        if stats.generated or stats.reason != "interrupted":
            self.messages += [{"role": "user", "content": user}, {"role": "assistant", "content": "".join(shown)}]
        return stats
