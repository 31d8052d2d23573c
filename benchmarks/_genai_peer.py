"""onnxruntime-genai's generator as the thin bench's peer: the `ort_graph.zoo` genai-layout decoder written into a
model folder in the genai builder's layout (model.onnx, genai_config.json; no tokenizer: token ids are fed as they
are), driven by `og.Generator` for a prefill of `prompt` tokens and `steps` decode steps, greedy; and this project's
session doing the same work: the same prefill, then `steps` steps of one token whose past grows by one each step
(presents fed back as pasts, genai's `past_present_share_buffer` off so that its past grows the same way), each
step's logits reduced to the next token by argmax as genai's greedy search does.

Ours plans once for the largest step (`generation_max_shapes`: prompt + steps, llama.cpp's way) with pre-allocated
buffers; every step then runs within that plan.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

import ort_graph
from ort_session import PRE_ALLOCATE, InferenceSession
from ort_session._generate import generation_max_shapes


def genai_available() -> bool:
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return False
    return True


def genai_config(cfg: Any, threads: int, max_length: int) -> dict[str, Any]:
    """genai_config.json for the zoo decoder in the builder's layout (see the published llama_l4 genai_int4_cpu
    folder), intra-op threads `threads`, greedy, no EOS stop before `max_length` (min_length = max_length)."""
    return {
        "model": {
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "type": "llama", "vocab_size": cfg.vocab,
            "context_length": cfg.max_positions,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "intra_op_num_threads": threads,
                                    "inter_op_num_threads": 1, "provider_options": []},
                "filename": "model.onnx", "head_size": cfg.head_dim, "hidden_size": cfg.hidden,
                "num_attention_heads": cfg.heads, "num_hidden_layers": cfg.layers, "num_key_value_heads": cfg.kv_heads,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
            },
        },
        "search": {"diversity_penalty": 0.0, "do_sample": False, "early_stopping": False, "length_penalty": 1.0,
                   "max_length": max_length, "min_length": max_length, "no_repeat_ngram_size": 0, "num_beams": 1,
                   "num_return_sequences": 1, "past_present_share_buffer": False, "repetition_penalty": 1.0,
                   "temperature": 1.0, "top_k": 1, "top_p": 1.0},
    }


class GenaiPeer:
    """og.Model on `model` in a temporary builder-layout folder (a context manager: the folder is removed at exit);
    `generation()` times one greedy generation with a fresh og.Generator."""

    def __init__(self, model: bytes, cfg: Any, threads: int, prompt: np.ndarray, steps: int) -> None:
        self.model, self.cfg, self.threads, self.prompt, self.steps = model, cfg, threads, prompt, steps
        self.max_length = prompt.size + steps + 1

    def __enter__(self) -> GenaiPeer:
        import onnxruntime_genai as og

        self._og = og
        self._tmp = tempfile.TemporaryDirectory(prefix="thin_genai_")
        folder = pathlib.Path(self._tmp.name)
        (folder / "model.onnx").write_bytes(self.model)
        config = genai_config(self.cfg, self.threads, self.max_length)
        (folder / "genai_config.json").write_text(json.dumps(config, indent=2))
        self._model = og.Model(str(folder))
        return self

    def __exit__(self, *exc: object) -> None:
        del self._model
        self._tmp.cleanup()

    def generation(self) -> tuple[float, float, list[int]]:
        """(prefill seconds, median seconds per decode step, the tokens generated)."""
        og = self._og
        params = og.GeneratorParams(self._model)
        params.set_search_options(max_length=self.max_length, min_length=self.max_length, do_sample=False)
        gen = og.Generator(self._model, params)
        t0 = time.perf_counter()
        gen.append_tokens(self.prompt.astype(np.int32).reshape(1, -1))  # the prefill runs here
        prefill = time.perf_counter() - t0
        gen.generate_next_token()  # the first token, picked from the prefill's logits (no model run)
        tokens, per_step = [int(gen.get_next_tokens()[0])], []
        for _ in range(self.steps):  # each: one decode step over the grown past, then the greedy pick
            t0 = time.perf_counter()
            gen.generate_next_token()
            per_step.append(time.perf_counter() - t0)
            tokens.append(int(gen.get_next_tokens()[0]))
        return prefill, float(np.median(per_step)), tokens


def ours_generation_session(model: bytes, threads: int, prompt_len: int, steps: int) -> InferenceSession:
    """Ours planned once for the largest step of the generation (prefill `prompt_len`, then up to `steps` more
    tokens), pre-allocated."""
    graph_model = ort_graph.from_proto(onnx.load_from_string(model))
    max_shapes = generation_max_shapes(graph_model, prompt_len, prompt_len + steps + 1)
    options = {"intra_op_num_threads": threads, PRE_ALLOCATE: "1", "max_shapes": max_shapes}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, options, providers=["CPUExecutionProvider"])


def loop_times(run: Callable[[dict[str, np.ndarray]], list[np.ndarray]], output_names: list[str], cfg: Any,
               prompt: np.ndarray, steps: int) -> tuple[float, float, list[int]]:
    """(prefill seconds, median seconds per decode step, the tokens generated) of `run` (a session's
    `run(None, feeds)`) doing `GenaiPeer.generation`'s work: the prefill from an empty past, then `steps` steps of
    one token, each step's presents fed back as its pasts and its logits reduced to the next token by argmax."""
    empty = np.zeros((1, cfg.kv_heads, 0, cfg.head_dim), np.float32)
    feeds: dict[str, np.ndarray] = {"input_ids": prompt.reshape(1, -1).astype(np.int64),
                                    "attention_mask": np.ones((1, prompt.size), np.int64)}
    for kind in ("key", "value"):
        for i in range(cfg.layers):
            feeds[f"past_key_values.{i}.{kind}"] = empty
    pasts = ["past_key_values." + name[len("present."):] for name in output_names[1:]]
    t0 = time.perf_counter()
    out = run(feeds)
    prefill = time.perf_counter() - t0
    token = int(np.argmax(out[0][0, -1]))
    tokens, per_step, total = [token], [], prompt.size
    for _ in range(steps):
        t0 = time.perf_counter()
        total += 1
        feeds = {"input_ids": np.array([[token]], np.int64), "attention_mask": np.ones((1, total), np.int64),
                 **dict(zip(pasts, out[1:], strict=True))}  # present.N.kind -> past_key_values.N.kind
        out = run(feeds)
        token = int(np.argmax(out[0][0, -1]))
        per_step.append(time.perf_counter() - t0)
        tokens.append(token)
    return prefill, float(np.median(per_step)), tokens
