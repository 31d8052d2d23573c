"""Continuous batching: one engine thread runs the decode steps of every active request as one batch, sequences
joining and leaving between steps, and a newcomer's prefill (one chunk per iteration) interleaved with the others'
decode.

Admission lives here (never in an execution provider): a request needs prompt + max_tokens <= ctx (its KV fits one
slot of the pool planned at initialization) and a free slot; without a free slot it waits in a bounded queue
(`max_queue`; the lowest `priority` first, FIFO within one), beyond which it is refused (429); a prompt that
cannot fit the context at all is refused (503).
Nothing is preempted: an admitted request keeps its slot until it ends (EOS, a stop string, max_tokens, the
context, or its client gone), so the device never holds more than the plan."""

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
    prefilled: int = 0
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
    ttft: list[float] = attrs.field(factory=list)  # seconds, the last 1000
    step_tokens: collections.deque = attrs.field(factory=lambda: collections.deque(maxlen=64))  # (time, tokens)

    def tokens_per_second(self) -> float:
        if len(self.step_tokens) < 2:
            return 0.0
        span = self.step_tokens[-1][0] - self.step_tokens[0][0]
        return sum(n for _, n in list(self.step_tokens)[1:]) / span if span > 0 else 0.0


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

    @property
    def ctx(self) -> int:
        return self.runner.ctx

    def check(self, prompt: Sequence[int], max_tokens: int | None) -> int:
        """The max_tokens a request gets (at most what the context leaves), or AdmissionError (503)."""
        if not prompt:
            raise AdmissionError("the prompt encodes to no token; give a non-empty prompt", 400, "prompt", 0)
        room = self.ctx - len(prompt)
        if room < 1:
            self.metrics.refused["context"] = self.metrics.refused.get("context", 0) + 1
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
        pool = self.runner.pool
        while self.waiting and pool.free:
            req = min(self.waiting, key=lambda r: (r.priority, r.id))  # the most urgent, then the oldest
            self.waiting.remove(req)
            if req.cancelled:
                req.emit("", "cancelled")
                continue
            req.slot = pool.take()
            self.active.append(req)

    def step(self) -> None:
        """One iteration: drop cancelled requests, one prefill chunk of the oldest newcomer, one decode step of
        every request whose prompt is in."""
        for req in [r for r in self.active if r.cancelled]:
            self._finish(req, "cancelled")
        newcomer = next((r for r in self.active if r.prefilled < len(r.prompt)), None)
        if newcomer is not None:
            chunk = newcomer.prompt[newcomer.prefilled:newcomer.prefilled + self.runner.chunk]
            logits = self.runner.prefill(newcomer.slot, chunk)
            newcomer.prefilled += len(chunk)
            self.metrics.prompt_tokens += len(chunk)
            if newcomer.prefilled == len(newcomer.prompt):
                self._accept(newcomer, logits)  # its first token
        ready = [r for r in self.active if r.prefilled == len(r.prompt) and r is not newcomer]
        if ready:
            logits = self.runner.decode([r.slot for r in ready], [r.output[-1] for r in ready])
            self.metrics.decode_steps += 1
            self.metrics.decoded_tokens += len(ready)
            for req, row in zip(ready, logits):
                self._accept(req, row)
        n = len(ready) + (newcomer is not None and newcomer.prefilled == len(newcomer.prompt))
        if n:
            self.metrics.step_tokens.append((time.perf_counter(), n))

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
        if len(req.output) >= req.params.max_new_tokens or self.runner.pool.lengths[req.slot] >= self.ctx:
            tail = req.stop.push(req.text.flush())
            return self._finish(req, "length", piece + tail + ("" if req.stop.done else req.stop.flush()))
        req.emit(piece, None)

    def _finish(self, req: Request, reason: str, piece: str = "") -> None:
        self.active.remove(req)
        self.runner.pool.release(req.slot)
        self.metrics.finished[reason] = self.metrics.finished.get(reason, 0) + 1
        req.emit(piece, reason)
