"""Running a KV-cache decoder for many sequences: prefill chunks of one sequence, decode steps of many.

A decode step feeds every active slot's last token ([n, 1] ids) with the slots' past gathered from the pool
([n, kv, L, d], L the longest filled length) and an attention mask [n, L + 1] whose ones are each slot's filled
positions [0, len) and the new position L. Where the new token's K/V lands in `present` tells the layout:
- `seqlens` (onnxruntime-genai's GroupQueryAttention: seqlens_k = sum(mask) - 1): at row len of each entry;
- `append` (an explicit Concat of past and new with the mask applied in attention): at row L.
Which one holds is not guessed: `probe` runs two sequences of different lengths alone and together and keeps
the layout whose batched logits equal the alone ones (token for token in two steps). A model that matches
neither (no attention_mask input, positions from the past's length as the zoo decoders compute them) decodes
its sequences one at a time, round-robin (`mode == "round-robin"`; still continuous: they join and leave
between steps)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import ort_graph
from ort_session._generate import _bound_run, _kv_pairs

from ._kv_pool import DEFAULT_BLOCK, KVPool
from ._resident import ResidentPast
from ._serve_errors import ServeError

log = logging.getLogger("ort_serve")

LAYOUTS = ("seqlens", "append")


class BatchRunner:
    """The session's steps over a `KVPool`: `prefill(slot, ids)` and `decode(slots, tokens)` return logits."""

    def __init__(self, session, max_batch: int, ctx: int, prefill_chunk: int, kv_block: int = DEFAULT_BLOCK,
                 kv_blocks: int | None = None) -> None:
        self.session = session
        self.pairs = _kv_pairs(session)  # present -> past
        if "input_ids" not in session.input_names or not self.pairs:
            raise ServeError(f"model inputs {session.input_names!r} are not a KV-cache decoder: serving needs "
                             "input_ids and past_key_values.N.key/value inputs with present.N.key/value outputs")
        self.ctx, self.chunk = ctx, max(1, prefill_chunk)
        self.has_mask = "attention_mask" in session.input_names
        self.has_positions = "position_ids" in session.input_names
        self.pool = KVPool.allocate(self._kv_dims(), self._kv_dtypes(), max_batch, ctx, kv_block, kv_blocks)
        self.mode, self.reason = "round-robin", "not probed"
        logits = session.model.graph.values.get("logits")
        last = logits.shape[-1] if logits is not None and logits.shape else None
        self.vocab: int | None = last if isinstance(last, int) else None
        self.layout = "append"
        self.resident: ResidentPast | None = None  # the batched past kept on the device (keep_on_device)
        self.run_s = self.copy_s = 0.0  # seconds in the session's runs; gathering pasts and scattering new positions

    def _kv_dims(self) -> dict[str, tuple[int, int]]:
        graph, plan = self.session.model.graph, self.session.options.max_shapes or {}
        dims = {}
        for past in self.pairs.values():
            shape = plan.get(past) or graph.values[past].shape
            if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in (shape[1], shape[3])):
                raise ServeError(f"cannot tell the KV heads and head size of {past!r} (shape {shape!r}); "
                                 "pass --dim NAME=N for its symbolic dims")
            dims[past] = (int(shape[1]), int(shape[3]))
        return dims

    def _kv_dtypes(self) -> dict[str, np.dtype]:
        graph = self.session.model.graph
        return {p: np.dtype(ort_graph.to_numpy_dtype(graph.values[p].dtype)) for p in self.pairs.values()}

    def _run(self, feeds: dict, device: str | None = None) -> dict[str, Any]:
        """The step's logits and presents (`device`: the presents bound there, device values)."""
        names = ["logits", *self.pairs]
        t = time.perf_counter()
        outs = dict(zip(names, self.session.run(names, feeds) if device is None
                        else _bound_run(self.session, names, feeds, device)))
        self.run_s += time.perf_counter() - t
        return outs

    def _past(self, slots: Sequence[int], length: int) -> dict[str, np.ndarray]:
        t = time.perf_counter()
        past = self.pool.past(slots, length)
        self.copy_s += time.perf_counter() - t
        return past

    def prefill(self, slot: int, ids: Sequence[int]) -> np.ndarray:
        """Feed `ids` (one chunk, at most `chunk` tokens) after what `slot` holds; the last position's logits."""
        pool = self.pool
        start, n = pool.lengths[slot], len(ids)
        self._grow(slot, start + n)
        feeds = {"input_ids": np.asarray([ids], np.int64), **self._past([slot], start)}
        if self.has_mask:
            feeds["attention_mask"] = np.ones((1, start + n), np.int64)
        if self.has_positions:
            feeds["position_ids"] = np.arange(start, start + n, dtype=np.int64)[None, :]
        outs = self._run(feeds)
        t = time.perf_counter()
        for present, past in self.pairs.items():
            pool.write(past, slot, start, outs[present][0, :, start:start + n])
        self.copy_s += time.perf_counter() - t
        pool.lengths[slot] = start + n
        return outs["logits"][0, -1]

    def _grow(self, slot: int, positions: int) -> None:
        if not self.pool.grow(slot, positions):
            pool = self.pool
            raise ServeError(f"the KV pool has {len(pool.free_blocks)} of its {pool.blocks} blocks free, too few for "
                             f"{positions} positions of one sequence (--kv-block {pool.block}); give a larger "
                             "--kv-blocks")

    def decode(self, slots: Sequence[int], tokens: Sequence[int]) -> list[np.ndarray]:
        """One step for `slots` (each fed its token); each slot's logits. Round-robin: one run per slot."""
        if self.mode == "round-robin" or len(slots) == 1:
            return [self.prefill(s, [t]) for s, t in zip(slots, tokens)]
        return self._decode_batched(list(slots), list(tokens), self.layout)

    def _decode_batched(self, slots: list[int], tokens: list[int], layout: str) -> list[np.ndarray]:
        pool, resident = self.pool, self.resident if layout == self.layout else None
        lens = [pool.lengths[s] for s in slots]
        on_device = resident is not None and resident.matches(slots)
        if on_device:  # the same batch as the last step: its presents, on the device, are this step's past
            past, mask = resident.values, resident.mask()
        else:
            if resident is not None:
                resident.sync()
            longest = max(lens)
            past = self._past(slots, longest)
            mask = np.zeros((len(slots), longest + 1), np.int64)
            for i, n in enumerate(lens):
                mask[i, :n] = 1
            mask[:, longest] = 1
        feeds = {"input_ids": np.asarray(tokens, np.int64)[:, None], **past, "attention_mask": mask}
        if self.has_positions:
            feeds["position_ids"] = np.asarray(lens, np.int64)[:, None]
        for s, n in zip(slots, lens):
            self._grow(s, n + 1)
        if resident is not None:
            if not on_device:
                resident.start(slots, lens, longest, layout)
            outs = self._run(feeds, resident.device)
            resident.keep({past: outs[present] for present, past in self.pairs.items()}, layout, lens)
            resident.steps += on_device
        else:
            rows = np.concatenate([pool.rows(s, n, n + 1) for s, n in zip(slots, lens)])
            outs = self._run(feeds)
            t = time.perf_counter()
            batch = np.arange(len(slots))
            src = np.asarray(lens) if layout == "seqlens" else np.full(len(slots), longest)
            for present, name in self.pairs.items():
                pool.write_rows(name, rows, outs[present][batch, :, src])
            self.copy_s += time.perf_counter() - t
        for s, n in zip(slots, lens):
            pool.lengths[s] = n + 1
        logits = outs["logits"]
        return [logits[i, -1] for i in range(len(slots))]

    def release(self, slot: int) -> None:
        """A sequence ends (or is preempted): its slot and blocks back to the pool."""
        if self.resident is not None:
            t = time.perf_counter()
            self.resident.drop(slot)
            self.copy_s += time.perf_counter() - t
        self.pool.release(slot)

    def keep_on_device(self, device: str) -> None:
        """Batched decode steps from now on keep the batched past on `device` between steps (`_resident`)."""
        self.resident = ResidentPast(self.pool, device)

    def probe(self) -> None:
        """Choose batched decoding (and its layout) only where it equals decoding alone; else round-robin."""
        pool = self.pool
        if pool.slots < 2:
            self.mode, self.reason = "round-robin", "--max-batch 1"
            return
        if not self.has_mask:
            self.mode, self.reason = "round-robin", "the model has no attention_mask input (a ragged batch " \
                                                    "cannot mask each sequence's unused positions)"
            return
        top = self.vocab or 2
        prompts = [[(7 * i + 1) % top for i in range(min(5, self.ctx - 3))], [3 % top, 11 % top]]
        steps = [[1 % top, 2 % top], [5 % top, 9 % top]]
        try:
            alone = []
            for p, s in zip(prompts, steps):
                slot = pool.take()
                self._prefill_all(slot, p)
                alone.append([self.prefill(slot, [t]).copy() for t in s])
                pool.release(slot)
            for layout in LAYOUTS:
                slots = [pool.take(), pool.take()]
                for slot, p in zip(slots, prompts):
                    self._prefill_all(slot, p)
                got = [self._decode_batched(slots, [s[k] for s in steps], layout) for k in range(2)]
                for slot in slots:
                    pool.release(slot)
                if all(np.allclose(got[k][i], alone[i][k], rtol=1e-4, atol=1e-4 * float(np.abs(alone[i][k]).max() + 1))
                       for k in range(2) for i in range(2)):
                    self.mode, self.layout, self.reason = "batched", layout, f"ragged batches, {layout} KV layout"
                    return
            self.mode, self.reason = "round-robin", "batched logits differ from decoding alone in every KV layout"
        except Exception as e:  # noqa: BLE001 - a model that refuses ragged batches decodes one sequence at a time
            self.mode, self.reason = "round-robin", f"a batched step failed ({type(e).__name__}: {e})"
            for slot in range(pool.slots):
                pool.release(slot)

    def _prefill_all(self, slot: int, ids: Sequence[int]) -> np.ndarray:
        logits = None
        for i in range(0, len(ids), self.chunk):
            logits = self.prefill(slot, ids[i:i + self.chunk])
        return logits
