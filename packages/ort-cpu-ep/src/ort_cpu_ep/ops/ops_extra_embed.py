"""com.microsoft EmbedLayerNormalization (ONNX Runtime's transformers optimizer, BERT embeddings):
LayerNorm(word[ids] + position[pos] (+ segment[seg])) * gamma + beta; mask_index = the number of nonzero
entries of each mask row (0 without a mask); embedding_sum (output 2) is the pre-norm sum.

float32 tables compute into the output blocks: the gathered rows go straight into embedding_sum's block (or
a declared slot when it is not requested), the position / segment rows through a second slot, the row
statistics through a third. float16 tables gather their rows first and compute in float32 (never the whole
table converted). Ids outside the tables are an error naming the input, as in onnxruntime.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, register, workspace_nbytes
from .ops_extra_attention import requested

MS = "com.microsoft"
_T = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})
_SUM, _ROWS, _STATS = 0, 1, 2


def _opt(inputs: list, i: int) -> np.ndarray | None:
    return inputs[i] if len(inputs) > i else None


def _rows(table: np.ndarray, ids: np.ndarray, what: str, out: np.ndarray | None = None) -> np.ndarray:
    """table[ids] (into `out` when given), ids checked against the table's rows."""
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= table.shape[0]):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(f"EmbedLayerNormalization: {what} {bad} is outside the table of {table.shape[0]} rows; "
                         f"ids must be in [0, {table.shape[0]})")
    if out is None:
        return np.take(table, ids, axis=0)
    return np.take(table, ids, axis=0, out=out, mode="clip")


@register("EmbedLayerNormalization", domain=MS)
class EmbedLayerNormalization(OpImpl):
    writes_output = True  # float32 tables

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        for i in (0, 1, 7, 8):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype != TensorProto.INT32:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="int32 ids and mask",
                               remedy="cast ids and mask to int32")
        for i in (2, 3, 4, 5, 6):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in _T:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="float32, float16")
        return None

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        ids = input_shapes[0] if input_shapes else None
        word = input_shapes[2] if len(input_shapes) > 2 else None
        if ids is None or word is None or len(ids) != 2 or len(word) != 2:
            return []
        b, s, d = int(ids[0]), int(ids[1]), int(word[1])
        rows = workspace_nbytes((b, s, d), np.float32)
        slots = [(_ROWS, rows), (_STATS, workspace_nbytes((2, b, s, 1), np.float32))]
        if not (len(node.outputs) > 2 and node.outputs[2]):
            slots.append((_SUM, rows))
        return slots

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        f32 = np.float32
        ids, seg, word, pos_emb = inputs[0], _opt(inputs, 1), inputs[2], inputs[3]
        seg_emb, gamma, beta = _opt(inputs, 4), inputs[5], inputs[6]
        mask, pos_ids = _opt(inputs, 7), _opt(inputs, 8)
        b, s = ids.shape
        d = word.shape[1]
        pos = np.broadcast_to(np.arange(s), (b, s)) if pos_ids is None else np.broadcast_to(pos_ids, (b, s))
        into = word.dtype == np.float32 and all(
            t is None or t.dtype == np.float32 for t in (pos_emb, seg_emb, gamma, beta))
        with_sum = len(node.outputs) > 2 and bool(node.outputs[2])
        if into:
            emb = self.output(2, (b, s, d), f32) if with_sum else self.workspace(_SUM, (b, s, d), f32)
            _rows(word, ids, "input_ids", emb)
            t = self.workspace(_ROWS, (b, s, d), f32)
            emb += _rows(pos_emb, pos, "position id", t)
            if seg is not None and seg_emb is not None:
                emb += _rows(seg_emb, seg, "segment id", t)
        else:
            emb = _rows(word, ids, "input_ids").astype(f32) + _rows(pos_emb, pos, "position id").astype(f32)
            if seg is not None and seg_emb is not None:
                emb += _rows(seg_emb, seg, "segment id").astype(f32)
        eps = f32(node.attr("epsilon", 1e-12))
        stats = self.workspace(_STATS, (2, b, s, 1), f32)
        mean, var = stats[0], stats[1]
        np.mean(emb, axis=-1, keepdims=True, out=mean)
        sq = self.workspace(_ROWS, (b, s, d), f32) if into else np.empty_like(emb)
        np.multiply(emb, emb, out=sq)
        np.mean(sq, axis=-1, keepdims=True, out=var)
        var -= mean * mean
        var += eps
        np.sqrt(var, out=var)
        y = self.output(0, (b, s, d), f32) if into else np.empty((b, s, d), f32)
        np.subtract(emb, mean, out=y)
        y /= var
        y *= gamma.astype(f32, copy=False)
        y += beta.astype(f32, copy=False)
        mask_index = self.output(1, (b,), np.int32)
        if mask is not None:
            np.copyto(mask_index, np.count_nonzero(np.asarray(mask), axis=1), casting="unsafe")
        else:
            mask_index.fill(0)
        if into:
            return requested(node, [y, mask_index, emb if with_sum else None])
        return requested(node, [y.astype(word.dtype), mask_index, emb.astype(word.dtype)])


__all__ = ["EmbedLayerNormalization"]
