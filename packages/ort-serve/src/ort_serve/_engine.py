"""The serving engine: a model folder's session planned for `max_batch` sequences of `ctx` tokens (weights,
batched activations and the batched KV inputs in one plan, checked against the budget at initialization), its
tokenizer, chat template and generation defaults, and the scheduler over them."""

from __future__ import annotations

import logging
import time
from typing import Any

import attrs

from ort_session._context_limits import check_ctx_size
from ort_session._model_files import ModelFiles
from ort_session._tokenizer import TextCodec

from ._batch_runner import BatchRunner
from ._chat_template import ChatTemplate
from ._kv_pool import DEFAULT_BLOCK, plan_max_shapes
from ._sampling import SamplingParams, generation_defaults
from ._scheduler import Scheduler
from ._serve_errors import ServeError

log = logging.getLogger("ort_serve")

PRE_ALLOCATE = "session.pre_allocate_execution_buffers"


def serving_ctx(model: Any, files: ModelFiles | None, ctx_size: int | None) -> int:
    """--ctx-size, else genai_config.json's context_length, capped at the model's positions; ServeError without."""
    positions = check_ctx_size(model.graph, ctx_size)
    ctx = ctx_size or (files.context_length if files is not None else None) or positions
    if ctx is None:
        raise ServeError("the model tells no context length (no genai_config.json context_length, no position "
                         "table): pass --ctx-size N")
    return min(ctx, positions) if positions else ctx


def _keep_on_device(runner: BatchRunner, max_batch: int, ctx: int) -> None:
    """`--kv-on-device`: the batched past stays on the device that makes the presents between decode steps, where
    it fits twice (past and present) beside the plan within the budget; ServeError where it cannot."""
    from ort_session._generate import kv_device

    if runner.mode != "batched":
        log.warning("--kv-on-device: decoding is %s (%s), one sequence at a time: the past stays in the host pool",
                    runner.mode, runner.reason)
        return
    device = kv_device(runner.session, ctx, max_batch)
    if device is None:
        raise ServeError(f"--kv-on-device: the batched KV cache of {max_batch} sequences x {ctx} positions does not "
                         "fit twice (past and present) beside the plan within the device budget, or its layers are "
                         "not on one device (a CPU-only session has none to keep it on); drop --kv-on-device, give a "
                         "larger --budget, or a smaller --max-batch / --ctx-size")
    runner.keep_on_device(device)


@attrs.define
class Engine:
    name: str
    session: Any
    runner: BatchRunner
    scheduler: Scheduler
    codec: TextCodec
    template: ChatTemplate | None
    defaults: dict[str, Any]
    created: int = attrs.field(factory=lambda: int(time.time()))

    @classmethod
    def build(cls, model: Any, files: ModelFiles | None, opts: Any, make_session: Any, codec: TextCodec, *,
              max_batch: int, ctx_size: int | None, prefill_chunk: int = 32, max_queue: int = 64,
              name: str | None = None, template: ChatTemplate | None = None, kv_block: int = DEFAULT_BLOCK,
              kv_blocks: int | None = None, kv_on_device: bool = False) -> Engine:
        """`make_session(opts)` builds the InferenceSession (ortrun's, with its providers and progress lines);
        `codec` is the model's tokenizer, `template` its chat template (None: `role: content` lines); the KV pool
        holds `kv_blocks` blocks of `kv_block` positions (default: `max_batch` sequences of the context);
        `kv_on_device` keeps a batch's past on the device between decode steps (ServeError where it cannot fit)."""
        ctx = serving_ctx(model, files, ctx_size)
        dims = dict(opts.free_dimension_overrides or {})
        opts.max_shapes = {**plan_max_shapes(model, max_batch, ctx, prefill_chunk, dims), **(opts.max_shapes or {})}
        opts.add_session_config_entry(PRE_ALLOCATE, "1")
        session = make_session(opts)
        try:
            runner = BatchRunner(session, max_batch, ctx, prefill_chunk, kv_block, kv_blocks)
            runner.probe()
            if kv_on_device:
                _keep_on_device(runner, max_batch, ctx)
        except Exception:
            session.close()
            raise
        pool = runner.pool
        log.info("decoding: %s (%s); batch %d x %d positions; KV pool %d blocks x %d positions (%d bytes, host)%s",
                 runner.mode, runner.reason, max_batch, ctx, pool.blocks, pool.block, pool.nbytes,
                 f"; a batch's past kept on {runner.resident.device}" if runner.resident else "")
        defaults = generation_defaults(files.folder if files else None, files.config if files else None)
        if files is not None and files.eos_ids and "eos_ids" not in defaults:
            defaults["eos_ids"] = files.eos_ids
        label = name or (files.folder.name if files is not None and files.folder.name else "model")
        return cls(label, session, runner, Scheduler(runner, codec, max_queue), codec, template, defaults)

    def params(self, **request: Any) -> SamplingParams:
        """The model folder's defaults with what the request sets (None: not set)."""
        base = SamplingParams(**{k: v for k, v in self.defaults.items() if k in attrs.fields_dict(SamplingParams)})
        return base.evolve(**request)

    def render_chat(self, messages: list[dict[str, Any]]) -> str:
        if self.template is not None:
            return self.template.render(messages, add_generation_prompt=True)
        return "".join(f"{m.get('role', 'user')}: {m.get('content', '')}\n" for m in messages) + "assistant:"

    def encode(self, text: str) -> list[int]:
        return self.codec.encode(text)

    def device_lines(self) -> dict[str, dict[str, int | None]]:
        return self.session.device_memory()

    def close(self) -> None:
        self.scheduler.stop()
        self.session.close()

