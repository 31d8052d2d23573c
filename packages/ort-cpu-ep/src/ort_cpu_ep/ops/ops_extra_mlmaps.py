"""ai.onnx.ml ops on maps (Python dicts) and sequences of maps: ZipMap, DictVectorizer, CastMap (ORT semantics).

- ZipMap: (N, C) float scores -> a list of N dicts {class label: score}.
- DictVectorizer: a dict -> (1, len(vocabulary)) with each vocabulary key's value, 0 where absent.
- CastMap: an int64-keyed dict -> (1, n): values in key order (DENSE) or at their keys up to max_map (SPARSE),
  cast to float32, int64 or strings ("%f").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

ML = "ai.onnx.ml"


@register("ZipMap", since=1, domain=ML)
class ZipMap(OpImpl):
    """(N, C) float scores -> a sequence (list) of N maps (dicts) {class label: score}."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        if inputs[0].dtype and inputs[0].dtype != TensorProto.FLOAT:
            return Decline(rejected=f"input dtype {dtype_name(inputs[0].dtype)}", accepts="float32")
        a = attrs_of(node)
        if bool(a.get("classlabels_int64s")) == bool(a.get("classlabels_strings")):
            return Decline(rejected="classlabels_int64s and classlabels_strings both or neither set",
                           accepts="exactly one of them", remedy="fix the node attributes")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[object]:
        a = attrs_of(node)
        labels = [str(v) for v in a["classlabels_strings"]] if a.get("classlabels_strings") else \
            [int(v) for v in a["classlabels_int64s"]]
        x = inputs[0]
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        return [[dict(zip(labels, (float(v) for v in row))) for row in rows]]


@register("DictVectorizer", since=1, domain=ML)
class DictVectorizer(OpImpl):
    """A map (dict) -> (1, len(vocabulary)): the value of each vocabulary key, 0 where absent."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        if bool(a.get("int64_vocabulary")) == bool(a.get("string_vocabulary")):
            return Decline(rejected="int64_vocabulary and string_vocabulary both or neither set",
                           accepts="exactly one vocabulary", remedy="fix the node attributes")
        return None

    def compute(self, node: Node, inputs: list[object]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        m = inputs[0]
        vocab = [int(v) for v in a["int64_vocabulary"]] if a.get("int64_vocabulary") else \
            [str(v) for v in a["string_vocabulary"]]
        sample = next(iter(m.values()), 0.0)
        if isinstance(sample, str):
            return [np.asarray([[m.get(k, "") for k in vocab]], dtype=object)]
        dtype = np.asarray(sample).dtype if isinstance(sample, np.generic) else (
            np.int64 if isinstance(sample, (int, np.integer)) else np.float32)
        return [np.asarray([[m.get(k, 0) for k in vocab]], dtype=dtype)]


@register("CastMap", since=1, domain=ML)
class CastMap(OpImpl):
    """A map int64 -> value to a (1, n) tensor: values in key order (DENSE) or at their keys (SPARSE, max_map)."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        if str(a.get("cast_to", "TO_FLOAT")) not in ("TO_FLOAT", "TO_STRING", "TO_INT64"):
            return Decline(rejected=f"cast_to={a['cast_to']!r}", accepts="TO_FLOAT, TO_STRING, TO_INT64",
                           remedy="fix cast_to")
        if str(a.get("map_form", "DENSE")) not in ("DENSE", "SPARSE"):
            return Decline(rejected=f"map_form={a['map_form']!r}", accepts="DENSE, SPARSE", remedy="fix map_form")
        if str(a.get("map_form", "DENSE")) == "SPARSE" and str(a.get("cast_to", "TO_FLOAT")) == "TO_STRING":
            return Decline(rejected="map_form='SPARSE' with cast_to='TO_STRING' (the fill string is unspecified; "
                           "onnxruntime writes '0.f')", accepts="SPARSE with TO_FLOAT / TO_INT64, or DENSE",
                           remedy="cast to float first")
        return None

    def compute(self, node: Node, inputs: list[object]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        m = {int(k): v for k, v in inputs[0].items()}
        to = str(a.get("cast_to", "TO_FLOAT"))
        if str(a.get("map_form", "DENSE")) == "SPARSE":
            size = int(a.get("max_map", 1))
            vals = [m.get(i, 0.0) for i in range(size)]
        else:
            vals = [m[k] for k in sorted(m)]
        if to == "TO_STRING":
            out = np.asarray([[v if isinstance(v, str) else f"{float(v):f}" for v in vals]], dtype=object)
        elif to == "TO_INT64":
            out = np.asarray([[int(float(v)) for v in vals]], np.int64)
        else:
            out = np.asarray([[float(v) for v in vals]], np.float32)
        return [out]


__all__ = ["CastMap", "DictVectorizer", "ZipMap"]
