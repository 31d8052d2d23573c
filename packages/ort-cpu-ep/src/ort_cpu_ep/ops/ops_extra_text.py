"""TfIdfVectorizer (opset 9): n-gram counts of int or string rows against a pool, weighted TF / IDF / TFIDF.

The pool holds, for n = 1, 2, ..., the n-grams of that length back to back (ngram_counts gives where each
length starts); n-gram k of the pool lands at output column ngram_indexes[k]. Rows are scanned for every
skip distance d = 1 .. max_skip_count + 1 (elements i, i + d, i + 2d, ...), lengths in [min_gram_length,
max_gram_length]; unigrams are counted once, not once per skip distance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

_IN = frozenset({TensorProto.INT32, TensorProto.INT64, TensorProto.STRING})


def _pool_table(a: dict) -> dict[tuple, int]:
    """n-gram tuple -> output column, for the lengths within [min_gram_length, max_gram_length]."""
    pool = list(a.get("pool_int64s") or []) or list(a.get("pool_strings") or [])
    counts = list(a.get("ngram_counts") or [])
    indexes = list(a.get("ngram_indexes") or [])
    lo, hi = int(a.get("min_gram_length", 1)), int(a.get("max_gram_length", 1))
    table: dict[tuple, int] = {}
    gram_id = 0
    for i, start in enumerate(counts):
        n = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        for j in range(start, end - n + 1, n):
            if lo <= n <= hi:
                table[tuple(pool[j:j + n])] = int(indexes[gram_id])
            gram_id += 1
    return table


@register("TfIdfVectorizer", since=9)
class TfIdfVectorizer(OpImpl):
    """Y[row, ngram_indexes[k]] = TF / IDF / TFIDF of pool n-gram k in that row (float32)."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        x = inputs[0]
        if x.dtype and x.dtype not in _IN:
            return Decline(rejected=f"input dtype {dtype_name(x.dtype)}", accepts="int32, int64, string")
        a = attrs_of(node)
        mode = str(a.get("mode", ""))
        if mode not in ("TF", "IDF", "TFIDF"):
            return Decline(rejected=f"mode={mode!r}", accepts="TF, IDF, TFIDF", remedy="set the mode attribute")
        if not a.get("ngram_indexes") or not a.get("ngram_counts"):
            return Decline(rejected="ngram_counts / ngram_indexes missing", accepts="both attributes",
                           remedy="fix the node attributes")
        if x.shape is not None and len(x.shape) not in (1, 2):
            return Decline(rejected=f"input rank {len(x.shape)}", accepts="rank 1 [C] or 2 [N, C]",
                           remedy="reshape the input")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x = inputs[0]
        table = _pool_table(a)
        width = max(int(i) for i in a["ngram_indexes"]) + 1
        lo, hi = int(a.get("min_gram_length", 1)), int(a.get("max_gram_length", 1))
        skips = int(a.get("max_skip_count", 0))
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        is_str = x.dtype.kind in "OUS"
        counts = np.zeros((rows.shape[0], width), np.float32)
        for r, row in enumerate(rows):
            vals = [str(v) for v in row] if is_str else [int(v) for v in row]
            length = len(vals)
            for d in range(1, skips + 2):
                for n in range(max(lo, 1 if d == 1 else 2), hi + 1):
                    for i in range(length - d * (n - 1)):
                        col = table.get(tuple(vals[i + d * k] for k in range(n)))
                        if col is not None:
                            counts[r, col] += 1
        mode = str(a["mode"])
        w = np.asarray(a.get("weights") or [], np.float32)
        if mode == "IDF":
            y = (counts > 0).astype(np.float32) * (w if w.size else np.float32(1))
        elif mode == "TFIDF":
            y = counts * w if w.size else counts
        else:
            y = counts
        return [y.reshape(width) if x.ndim == 1 else y]


__all__ = ["TfIdfVectorizer"]
