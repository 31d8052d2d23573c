"""Choosing the next token: the logits processors of Hugging Face transformers' `generate`, in its order.

Penalties first, on the raw logits: repetition (CTRL's: a positive logit of a token seen in the prompt or
output is divided by the penalty, a negative one multiplied), then presence and frequency (OpenAI's: minus
`presence` once for a token seen in the output, minus `frequency` per occurrence). Greedy when the temperature
is 0 (or `do_sample` is false in the model's generation config): the largest logit, the lowest id on a tie
(numpy's argmax, as torch's). Otherwise the logits are divided by the temperature, then cut by top-k, top-p
(the smallest set whose probability reaches p, the most probable token always kept) and min-p (tokens below
min_p times the top probability dropped), and a token is drawn with the request's own seeded generator.

Stop strings act on text: `StopMatcher` holds back what might be the start of a stop string and ends the
stream where one completes, the stop string itself not shown (OpenAI's behaviour).
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

__all__ = ["SamplingError", "SamplingParams", "Sampler", "StopMatcher", "generation_defaults"]


class SamplingError(ValueError):
    """A sampling parameter out of its range (named, with the range)."""


def _check(name: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) \
            or value < low or value > high or (low_open and value == low):
        bound = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise SamplingError(f"{name}={value!r} is out of range: expected a number in {bound}")


@attrs.frozen
class SamplingParams:
    """One request's sampling. `temperature` 0 is greedy; `top_k` 0 and `top_p` 1 and `min_p` 0 cut nothing."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = attrs.field(default=(), converter=lambda s: (s,) if isinstance(s, str) else tuple(s or ()))
    eos_ids: tuple[int, ...] = attrs.field(default=(), converter=lambda s: (s,) if isinstance(s, int) else tuple(s or ()))
    max_new_tokens: int = 256

    def __attrs_post_init__(self) -> None:
        _check("temperature", self.temperature, 0.0, 100.0)
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise SamplingError(f"top_k={self.top_k!r}: expected an int >= 0 (0: no top-k cut)")
        _check("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _check("min_p", self.min_p, 0.0, 1.0)
        _check("repetition_penalty", self.repetition_penalty, 0.0, 100.0, low_open=True)
        _check("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _check("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**64):
            raise SamplingError(f"seed={self.seed!r}: expected an int from 0 to 2**64-1")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise SamplingError(f"max_new_tokens={self.max_new_tokens!r}: expected an int >= 1")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise SamplingError(f"stop={self.stop!r}: expected non-empty strings")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    def evolve(self, **changes: Any) -> SamplingParams:
        """A copy with `changes` (None values leave a field as it is)."""
        return attrs.evolve(self, **{k: v for k, v in changes.items() if v is not None})


def generation_defaults(folder: str | pathlib.Path | None, genai_config: Mapping[str, Any] | None = None
                        ) -> dict[str, Any]:
    """SamplingParams fields a model folder sets: `generation_config.json` (transformers'), else genai_config.json's
    `search`. As in transformers and onnxruntime-genai, decoding samples only where `do_sample` is true: a folder
    that does not say so (or says false) decodes greedily (temperature 0), its other sampling fields kept for a
    caller that asks for sampling with a temperature of its own."""
    out: dict[str, Any] = {}
    sources: list[Mapping[str, Any]] = []
    if genai_config:
        sources.append(genai_config.get("search") or {})
    if folder is not None:
        path = pathlib.Path(folder) / "generation_config.json"
        if path.is_file():
            try:
                sources.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, UnicodeDecodeError):
                pass  # an unreadable file sets nothing: the defaults stand
    do_sample = False  # transformers' and genai's default
    for src in sources:  # later wins: generation_config.json over genai's search
        for key in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty"):
            value = src.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = type(getattr(SamplingParams(), key))(value)
        if isinstance(src.get("do_sample"), bool):
            do_sample = src["do_sample"]
        eos = src.get("eos_token_id")
        if isinstance(eos, int) and not isinstance(eos, bool):
            out["eos_ids"] = (eos,)
        elif isinstance(eos, list) and all(isinstance(e, int) for e in eos):
            out["eos_ids"] = tuple(eos)
    if not do_sample:
        out["temperature"] = 0.0
    return out


class Sampler:
    """Picks tokens for one sequence: its parameters, its own random generator and the counts of its output."""

    def __init__(self, params: SamplingParams, prompt_ids: Sequence[int] = ()) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        self._seen = set(int(t) for t in prompt_ids)  # repetition penalty: prompt and output
        self._counts: dict[int, int] = {}  # presence / frequency: output only

    def _penalized(self, logits: np.ndarray) -> np.ndarray:
        p = self.params
        if p.repetition_penalty != 1.0 and self._seen:
            ids = np.fromiter(self._seen, np.int64)
            ids = ids[ids < logits.shape[0]]
            vals = logits[ids]
            logits[ids] = np.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        if (p.presence_penalty or p.frequency_penalty) and self._counts:
            ids = np.fromiter(self._counts, np.int64)
            counts = np.fromiter(self._counts.values(), np.float64)
            keep = ids < logits.shape[0]
            logits[ids[keep]] -= p.presence_penalty + p.frequency_penalty * counts[keep]
        return logits

    def pick(self, logits: np.ndarray) -> int:
        """The next token from one position's logits (any float dtype, shape [vocab])."""
        x = self._penalized(np.array(logits, dtype=np.float64).reshape(-1))
        p = self.params
        if p.greedy:
            token = int(np.argmax(x))
        else:
            token = self._draw(x / p.temperature)
        self.accept(token)
        return token

    def accept(self, token: int) -> None:
        """Count `token` as output (for the penalties)."""
        self._seen.add(token)
        self._counts[token] = self._counts.get(token, 0) + 1

    def _draw(self, x: np.ndarray) -> int:
        p = self.params
        order = np.argsort(-x, kind="stable")
        if p.top_k and p.top_k < order.size:
            order = order[: p.top_k]
        z = x[order]
        probs = np.exp(z - z[0])
        probs /= probs.sum()
        if p.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p) + 1)  # reach p; the first always stays
            order, probs = order[:keep], probs[:keep]
        if p.min_p > 0.0:
            keep_mask = probs >= p.min_p * probs[0]
            order, probs = order[keep_mask], probs[keep_mask]
        probs = probs / probs.sum()
        return int(order[self.rng.choice(order.size, p=probs)])


class StopMatcher:
    """Text out of a stream, cut at the first stop string (not shown). `push(piece)` returns what may be shown
    now; `done` is set once a stop string completed; `flush()` returns what was held back at the end."""

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.done = False

    def push(self, piece: str) -> str:
        if self.done:
            return ""
        text = self._held + piece
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.done, self._held = True, ""
            return text[:cut]
        hold = 0  # the longest tail of text that begins some stop string
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        self._held = text[len(text) - hold:] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        held, self._held = ("" if self.done else self._held), ""
        return held
