"""Greedy / top-k decoding with a KV cache for decoder models whose inputs and outputs follow the
`past_key_values.N.{key,value}` -> `present.N.{key,value}` convention (genai builder, torch exports).
When the layers making the KV cache are on a device with its own memory, the cache stays there between
steps (IOBinding with device OrtValues: `kv_device`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

import ort_graph

from ._errors import InvalidInputError
from ._ortvalue import OrtValue
from ._session import InferenceSession

_KV = re.compile(r"(\d+)\.(key|value)$")


def _kv_pairs(session: InferenceSession) -> dict[str, str]:
    """present output name -> past input name."""
    pasts = {}
    for name in session.input_names:
        m = _KV.search(name)
        if m and "past" in name:
            pasts[m.groups()] = name
    pairs = {}
    for name in session.output_names:
        m = _KV.search(name)
        if m and m.groups() in pasts:
            pairs[name] = pasts[m.groups()]
    return pairs


def generation_max_shapes(model: ort_graph.Model, prompt_len: int, max_total: int,
                          dims: Mapping[str, int] | None = None) -> dict[str, list[int]] | None:
    """Largest input shapes of a prefill of `prompt_len` tokens followed by decoding up to `max_total`
    tokens: plan once for these and every step fits the same pre-allocated buffers (llama.cpp's way):
    each step's inputs are no larger, extent by extent (prefill: past 0, mask `prompt_len`; step t: one
    token, past t-1, mask t). Axes the steps do not set come from `dims` (the user's `--dim`), then from
    what the model pins. None when a dimension cannot be told (then the session plans per shape)."""
    from ._feeds import required_inputs
    from ._input_defaults import symbol_hints

    trial = ort_graph.copy_model(model)
    ort_graph.resolve_shapes(trial)
    hints = {**symbol_hints(trial.graph), **dict(dims or {})}
    out: dict[str, list[int]] = {}
    for name in required_inputs(trial.graph):
        shape = model.graph.values[name].shape
        if shape is None:
            return None
        if name in ("input_ids", "position_ids"):
            want: list[int | None] = [1, prompt_len]
        elif name == "attention_mask":
            want = [1, max_total]
        elif _KV.search(name) and "past" in name and len(shape) == 4:
            want = [1, None, max_total - 1, None]
        else:
            want = [None] * len(shape)
        dims = []
        for d, w in zip(shape, want):
            value = w if w is not None else d if isinstance(d, int) else hints.get(d) if isinstance(d, str) else None
            if value is None:
                return None
            dims.append(int(value))
        if len(dims) != len(shape):
            return None
        out[name] = dims
    return out


def is_kv_decoder(session: InferenceSession) -> bool:
    return "input_ids" in session.input_names and bool(_kv_pairs(session))


def _empty_past(session: InferenceSession, name: str, present: str, batch: int, head_dim_hint: int | None) -> np.ndarray:
    shape = session.model.graph.values[name].shape or ()
    resolved = session.model.graph.values[present].shape or ()
    dims = []
    for axis, d in enumerate(shape):
        if axis == 0:
            dims.append(batch)
        elif axis == 2:
            dims.append(0)
        elif isinstance(d, int):
            dims.append(d)
        elif axis < len(resolved) and isinstance(resolved[axis], int):
            dims.append(resolved[axis])
        elif head_dim_hint:
            dims.append(head_dim_hint)
        else:
            raise InvalidInputError(f"cannot tell dimension {axis} ({d!r}) of {name!r}; pass --dim {d}=N")
    return np.zeros(dims, ort_graph.to_numpy_dtype(session.model.graph.values[name].dtype))


class DecodeState:
    """A KV-cache decoder's state between steps: the past keys and values of the tokens fed so far (on the host,
    or bound on `kv_device`'s device). `step(ids)` feeds tokens after those (a prefill chunk or one decode
    step) and returns the last position's logits; the cache is replaced only once the run returned, so an
    interrupted step (Ctrl-C) leaves the state of the previous one. `truncate(n)` keeps the first n tokens."""

    def __init__(self, session: InferenceSession, max_total: int | None = None,
                 head_dim_hint: int | None = None) -> None:
        if not is_kv_decoder(session):
            raise InvalidInputError(
                f"model inputs {session.input_names!r} do not look like a KV-cache decoder; generate needs input_ids "
                "and past_key_values.N.key/value inputs with matching present.N.key/value outputs")
        self.session, self.head_dim_hint = session, head_dim_hint
        self.pairs = _kv_pairs(session)
        self.device = kv_device(session, max_total)
        self.reset()

    def reset(self) -> None:
        """Forget every token (empty pasts)."""
        self._state: tuple[dict[str, Any], int] = (
            {p: _empty_past(self.session, p, pres, 1, self.head_dim_hint) for pres, p in self.pairs.items()}, 0)

    @property
    def length(self) -> int:
        """Tokens in the cache."""
        return self._state[1]

    def step(self, ids: list[int]) -> np.ndarray:
        pasts, done = self._state
        total = done + len(ids)
        feeds: dict[str, Any] = {**pasts, "input_ids": np.array([ids], dtype=np.int64)}
        if "attention_mask" in self.session.input_names:
            feeds["attention_mask"] = np.ones((1, total), np.int64)
        if "position_ids" in self.session.input_names:
            feeds["position_ids"] = np.arange(done, total, dtype=np.int64)[None, :]
        names = ["logits", *self.pairs]
        outs = dict(zip(names, self.session.run(names, feeds) if self.device is None
                        else _bound_run(self.session, names, feeds, self.device)))
        self._state = ({past: outs[present] for present, past in self.pairs.items()}, total)
        return outs["logits"][0, -1].astype(np.float64)

    def truncate(self, n: int) -> bool:
        """Keep the first `n` tokens' keys and values (host caches only); False where it cannot (device caches:
        then `reset` and feed again)."""
        pasts, done = self._state
        if n >= done:
            return True
        if any(not isinstance(v, np.ndarray) for v in pasts.values()):
            return False
        self._state = ({k: np.ascontiguousarray(v[:, :, :n]) for k, v in pasts.items()}, n)
        return True


def generate(session: InferenceSession, prompt_ids: list[int], max_new_tokens: int = 16, top_k: int = 1,
             temperature: float = 1.0, seed: int = 0, eos_id: int | Iterable[int] | None = None,
             head_dim_hint: int | None = None, pick: Callable[[np.ndarray], int] | None = None) -> Iterator[int]:
    """Yield new token ids one at a time (streaming). top_k=1 is greedy. Stops after an EOS id (one id or
    several, as genai_config.json's eos_token_id may list), which is yielded last. `pick(logits) -> id` chooses
    each token instead of the built-in greedy / top-k (ort-serve passes its Sampler's)."""
    eos = {eos_id} if isinstance(eos_id, int) else set(eos_id or ())
    state = DecodeState(session, len(prompt_ids) + max_new_tokens, head_dim_hint)
    if pick is None:
        rng = np.random.default_rng(seed)
        pick = lambda logits: _pick(logits, top_k, temperature, rng)  # noqa: E731
    ids = list(prompt_ids)
    for _ in range(max_new_tokens):
        token = int(pick(state.step(ids)))
        yield token
        if token in eos:
            return
        ids = [token]


def kv_device(session: InferenceSession, max_total: int | None = None, batch: int = 1) -> str | None:
    """The device whose memory holds the KV cache between steps, when every `present.*` output is made on
    that one device (copied back to the host only by its boundary copy) and, with `max_total` tokens (of each
    of `batch` sequences), the cache fits twice (past and present) beside what the plan holds there (weights,
    planned activations, pre-allocated buffers) within the device's budget: generate then binds the KV cache
    there (IOBinding), so no KV bytes cross to the host between steps. None: the host path (the plan's budget
    is kept)."""
    graph = session.model.graph
    producer = {o: n for n in graph.nodes for o in n.outputs}
    devices = set()
    for present in _kv_pairs(session):
        copy = producer.get(present)
        source = producer.get(copy.inputs[0]) if copy is not None and copy.op_type == "MemcpyToHost" else None
        devices.add(session.memory.device_of_node.get(source.index) if source is not None else None)
    (device,) = devices if len(devices) == 1 else (None,)
    if device not in session.memory.allocators:
        return None
    stage = session.memory.stages[device]
    if stage.budget is None:
        return device
    if max_total is None:
        return None
    need = 0
    for present in _kv_pairs(session):
        shape = graph.values[present].shape or ()
        dims = [batch if axis == 0 else max_total if axis == 2 else d for axis, d in enumerate(shape)]
        if len(dims) != 4 or not all(isinstance(d, int) for d in dims):
            return None  # the cache's size cannot be told: keep it on the host
        need += int(np.prod(dims)) * np.dtype(ort_graph.to_numpy_dtype(graph.values[present].dtype)).itemsize
    held = max(stage.allocator.bytes_in_use, stage.weights + stage.streaming_slots + stage.peak)
    return device if held + 2 * need <= stage.budget else None


def _bound_run(session: InferenceSession, names: list[str], feeds: dict[str, Any], device: str) -> list[Any]:
    """One step with the KV cache bound on `device`: past values that are device OrtValues are read there,
    present outputs stay there (device OrtValues, fed back as the next step's past); logits come to the host."""
    binding = session.io_binding()
    for name, value in feeds.items():
        if isinstance(value, OrtValue):
            binding.bind_ortvalue_input(name, value)
        else:
            binding.bind_cpu_input(name, value)
    binding.bind_output("logits")
    for name in names[1:]:
        binding.bind_output(name, device)
    session.run_with_iobinding(binding)
    outputs = binding.get_outputs()
    return [outputs[0].numpy(), *outputs[1:]]


def _pick(logits: np.ndarray, top_k: int, temperature: float, rng: np.random.Generator) -> int:
    if top_k <= 1:
        return int(np.argmax(logits))
    top = np.argpartition(-logits, top_k - 1)[:top_k]
    scaled = logits[top] / max(temperature, 1e-6)
    p = np.exp(scaled - scaled.max())
    return int(top[rng.choice(len(top), p=p / p.sum())])


StreamFn = Callable[[str], None]
