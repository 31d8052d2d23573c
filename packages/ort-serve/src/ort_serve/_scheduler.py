"""Continuous batching: one engine thread runs the decode steps of every active request as one batch, sequences
joining and leaving between steps, and a newcomer's prefill (one chunk per iteration) interleaved with the others'
decode.

Admission lives here (never in an execution provider): a request's prompt + max_tokens must fit the context (and
the pool's positions); max_tokens is capped at what they leave, and a prompt that leaves no room is refused (503).
It then waits in a bounded queue (`max_queue`; the lowest `priority` first, FIFO within one; beyond it 429) until a
slot of the decode batch is free and the paged KV pool has its prompt's blocks free, plus one: only the prompt's
blocks are taken then, and a sequence takes one more block whenever it grows past its last, so more sequences run
at once where answers are short.
Preemption: when a running sequence needs a block and none is free, the least urgent running sequence (the highest
`priority`, then the latest admitted; the one needing the block itself, if it is that) gives its blocks back and
goes to the front of its priority's queue with its prompt and the tokens it made so far; readmitted, it prefills
them again (recompute) and goes on, its client seeing one uninterrupted answer. The most urgent sequence is never
preempted and always fits the pool alone, so every admitted request ends. The device never holds more than the
plan: the pool is host memory, and the batched past a step feeds is the planned, pre-allocated graph input."""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence

import attrs

from ort_session._tokenizer import StreamDecoder, TextCodec

from ._batch_runner import BatchRunner
from ._kv_pool import blocks_for
from ._sampling import Sampler, SamplingParams, StopMatcher
from ._serve_errors import AdmissionError

log = logging.getLogger("ort_serve")

_ids = itertools.count(1)


@attrs.define(eq=False)
class Request:
    """One generation: prompt ids, sampling, and where its events go (`emit(text, finish)`: a text piece
    and a finish reason on the last event: stop / length / cancelled / error: ...); `output` holds the ids."""

    prompt: list[int]
    params: SamplingParams
    emit: Callable[[str, str | None], None]
    priority: int = 0  # lower is served first among those waiting (vLLM's `priority`); FIFO within one
    id: int = attrs.field(factory=lambda: next(_ids))
    arrived: float = attrs.field(factory=time.perf_counter)
    first_token: float | None = None
    slot: int | None = None
    context: list[int] = attrs.field(factory=list)  # what the slot's KV must hold before decoding: prompt + output
    prefilled: int = 0
    admitted: int = 0  # admission order (the latest admitted is preempted first)
    preempted: int = 0  # times it gave its blocks back
    output: list[int] = attrs.field(factory=list)
    cancelled: bool = False
    sampler: Sampler | None = None
    text: StreamDecoder | None = None
    stop: StopMatcher | None = None
    last_logits: object = None

    def cancel(self) -> None:
        self.cancelled = True


@attrs.define
class Metrics:
    """What /metrics shows: counters and the last measured values."""

    requests: int = 0
    refused: dict[str, int] = attrs.field(factory=dict)
    finished: dict[str, int] = attrs.field(factory=dict)  # by finish reason
    prompt_tokens: int = 0
    generated_tokens: int = 0
    decode_steps: int = 0
    decoded_tokens: int = 0  # over decode_steps: the mean batch
    preemptions: int = 0
    recomputed_tokens: int = 0  # prefilled again after a preemption
    ttft: list[float] = attrs.field(factory=list)  # seconds, the last 1000
    step_tokens: collections.deque = attrs.field(factory=lambda: collections.deque(maxlen=64))  # (time, tokens)

    def tokens_per_second(self) -> float:
        if len(self.step_tokens) < 2:
            return 0.0
        span = self.step_tokens[-1][0] - self.step_tokens[0][0]
        return sum(n for _, n in list(self.step_tokens)[1:]) / span if span > 0 else 0.0


def _rank(req: Request) -> tuple[int, int]:
    """Running sequences, the most urgent first: the lowest priority value, then the earliest admitted."""
    return req.priority, req.admitted


def _queue_order(req: Request) -> tuple[int, bool, int]:
    """Waiting requests, the next to admit first: by priority; within one the preempted (by their admission
    order) before the new (by arrival)."""
    return req.priority, not req.preempted, req.admitted if req.preempted else req.id


class Scheduler:
    """The engine thread over a `BatchRunner`: `submit(request)` admits or refuses, `start()` / `stop()`."""

    def __init__(self, runner: BatchRunner, codec: TextCodec, max_queue: int = 64) -> None:
        self.runner, self.codec, self.max_queue = runner, codec, max_queue
        self.waiting: collections.deque[Request] = collections.deque()
        self.active: list[Request] = []
        self.metrics = Metrics()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.error: str | None = None
        self._admissions = itertools.count(1)

    @property
    def ctx(self) -> int:
        return self.runner.ctx

    @property
    def limit(self) -> int:
        """Positions one sequence may reach: the context, at most what the whole KV pool holds."""
        return min(self.ctx, self.runner.pool.positions)

    def check(self, prompt: Sequence[int], max_tokens: int | None) -> int:
        """The max_tokens a request gets (at most what the context leaves), or AdmissionError (503)."""
        if not prompt:
            raise AdmissionError("the prompt encodes to no token; give a non-empty prompt", 400, "prompt", 0)
        room = self.limit - len(prompt)
        pool = self.runner.pool
        if room < 1:
            self.metrics.refused["context"] = self.metrics.refused.get("context", 0) + 1
            if pool.positions < self.ctx:
                raise AdmissionError(f"the prompt is {len(prompt)} tokens; this server's KV pool holds {pool.positions} "
                                     f"positions in all (--kv-blocks {pool.blocks} x --kv-block {pool.block}), which "
                                     "leaves no room for a new token: shorten the prompt or give a larger --kv-blocks",
                                     503, "kv_blocks", pool.blocks)
            raise AdmissionError(f"the prompt is {len(prompt)} tokens; this server's context (--ctx-size) is "
                                 f"{self.ctx}, which leaves no room for a new token: shorten the prompt",
                                 503, "ctx_size", self.ctx)
        return room if max_tokens is None else min(max_tokens, room)

    def submit(self, req: Request) -> None:
        """Queue `req` (AdmissionError 429 when `max_queue` requests already wait, 503 when the engine stopped)."""
        with self._cv:
            if self._stopping or self.error:
                raise AdmissionError(f"the engine is not running ({self.error or 'stopping'})", 503, "engine", 0)
            if len(self.waiting) - len(self.runner.pool.free) >= self.max_queue:  # free slots take waiters at once
                self.metrics.refused["queue_full"] = self.metrics.refused.get("queue_full", 0) + 1
                raise AdmissionError(f"{len(self.waiting)} requests already wait for one of the {self.runner.pool.slots} "
                                     f"slots (--max-queue {self.max_queue}); try again later", 429, "max_queue",
                                     self.max_queue)
            req.sampler = Sampler(req.params, req.prompt)
            req.text = StreamDecoder(self.codec, req.prompt)
            req.stop = StopMatcher(req.params.stop)
            self.metrics.requests += 1
            self.waiting.append(req)
            self._cv.notify()

    def queue_depth(self) -> int:
        return len(self.waiting)

    def start(self) -> None:
        """Run the engine in a thread of its own (in-process use; `ortrun serve` runs it in the main thread with
        `run`, where the CPU provider's BLAS thread limit applies: OpenBLAS ignores limits set from other threads)."""
        self._thread = threading.Thread(target=self.run, name="ort-serve-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    # the engine thread ---------------------------------------------------------------------------------------

    def run(self, alive: Callable[[], bool] = lambda: True) -> None:
        """The engine loop in the calling thread, until `stop()` or `alive()` turns false (checked twice a second
        while idle)."""
        try:
            while True:
                with self._cv:
                    while not (self._stopping or self.waiting or self.active):
                        if not alive():
                            self._stopping = True
                            break
                        self._cv.wait(0.5)
                    if self._stopping:
                        break
                    self._admit()
                self.step()
        except Exception as e:  # noqa: BLE001 - every request in flight hears why the engine ended
            log.exception("the engine stopped")
            self.error = f"{type(e).__name__}: {e}"
            for req in [*self.active, *self.waiting]:
                req.emit("", f"error: {self.error}")
            self.active.clear()
            self.waiting.clear()
        for req in [*self.active, *self.waiting]:
            req.emit("", "cancelled")

    def _admit(self) -> None:
        """Waiting requests into free slots, the most urgent first while the pool has their blocks (+ one)."""
        pool = self.runner.pool
        for req in [r for r in self.waiting if r.cancelled]:
            self.waiting.remove(req)
            req.emit("", "cancelled")
        while self.waiting and pool.free:
            req = min(self.waiting, key=_queue_order)
            context = [*req.prompt, *req.output]  # a preempted request resumes by recompute
            final = max(min(len(req.prompt) + req.params.max_new_tokens, self.limit), len(context))
            need = min(blocks_for(len(context), pool.block) + 1, blocks_for(final, pool.block))
            if len(pool.free_blocks) < need:
                return  # strict order: the most urgent waits for blocks, the others behind it
            self.waiting.remove(req)
            req.slot, req.context, req.prefilled = pool.take(), context, 0
            pool.grow(req.slot, len(context))
            req.admitted = next(self._admissions)
            self.active.append(req)

    def step(self) -> None:
        """One iteration: drop cancelled requests, the blocks the decoding sequences grow into (preempting where
        none is free), one prefill chunk of the oldest newcomer, one decode step of every request whose prompt is
        in."""
        for req in [r for r in self.active if r.cancelled]:
            self._finish(req, "cancelled")
        ready = self._make_room([r for r in self.active if r.prefilled == len(r.context)])
        newcomer = next((r for r in self.active if r.prefilled < len(r.context)), None)
        if newcomer is not None:
            chunk = newcomer.context[newcomer.prefilled:newcomer.prefilled + self.runner.chunk]
            logits = self.runner.prefill(newcomer.slot, chunk)
            newcomer.prefilled += len(chunk)
            if newcomer.preempted:
                self.metrics.recomputed_tokens += len(chunk)
            else:
                self.metrics.prompt_tokens += len(chunk)
            if newcomer.prefilled == len(newcomer.context):
                self._accept(newcomer, logits)  # its first (or, resumed, its next) token
        if ready:
            logits = self.runner.decode([r.slot for r in ready], [r.output[-1] for r in ready])
            self.metrics.decode_steps += 1
            self.metrics.decoded_tokens += len(ready)
            for req, row in zip(ready, logits):
                self._accept(req, row)
        n = len(ready) + (newcomer is not None and newcomer.prefilled == len(newcomer.context))
        if n:
            self.metrics.step_tokens.append((time.perf_counter(), n))

    def _make_room(self, ready: list[Request]) -> list[Request]:
        """A block for each of `ready` whose next position is past its last block, the most urgent first;
        preempting the least urgent running sequence while none is free. The ones still running."""
        pool = self.runner.pool
        for req in sorted(ready, key=_rank):
            while req in self.active and not pool.grow(req.slot, pool.lengths[req.slot] + 1):
                self._preempt(max(self.active, key=_rank))
        return [r for r in ready if r in self.active]

    def _preempt(self, req: Request) -> None:
        """`req` gives its slot and blocks back and waits at the front of its priority, to resume by recompute."""
        self.active.remove(req)
        self.runner.release(req.slot)
        req.slot, req.prefilled = None, 0
        req.preempted += 1
        self.metrics.preemptions += 1
        self.waiting.append(req)
        log.debug("preempted request %d (priority %d) after %d tokens", req.id, req.priority, len(req.output))

    def _accept(self, req: Request, logits) -> None:
        token = req.sampler.pick(logits)
        now = time.perf_counter()
        if req.first_token is None:
            req.first_token = now
            self.metrics.ttft = [*self.metrics.ttft[-999:], now - req.arrived]
        req.output.append(token)
        self.metrics.generated_tokens += 1
        if token in req.params.eos_ids:
            tail = req.stop.push(req.text.flush())
            return self._finish(req, "stop", tail + req.stop.flush())
        piece = req.stop.push(req.text.push(token))
        if req.stop.done:
            return self._finish(req, "stop", piece)
        if len(req.output) >= req.params.max_new_tokens or len(req.prompt) + len(req.output) > self.limit:
            tail = req.stop.push(req.text.flush())
            return self._finish(req, "length", piece + tail + ("" if req.stop.done else req.stop.flush()))
        req.emit(piece, None)

    def _finish(self, req: Request, reason: str, piece: str = "") -> None:
        self.active.remove(req)
        self.runner.release(req.slot)
        self.metrics.finished[reason] = self.metrics.finished.get(reason, 0) + 1
        req.emit(piece, reason)
