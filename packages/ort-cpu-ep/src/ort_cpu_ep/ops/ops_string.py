"""String ops on numpy object arrays: StringNormalizer, StringSplit, StringConcat, RegexFullMatch."""

from __future__ import annotations

import re

import numpy as np
from onnx import TensorProto as T

from ._registry import Decline, OpImpl, register
from ._util import check_all, decline_attr, rank

_STR = frozenset({T.STRING})


@register("StringNormalizer", since=10)
class StringNormalizer(OpImpl):
    def supports(self, node, inputs, opset):
        act = node.attr("case_change_action", "NONE")
        if act not in ("NONE", "LOWER", "UPPER"):
            return decline_attr("case_change_action", act, "'NONE', 'LOWER', 'UPPER'")
        r = rank(inputs, 0)
        if r is not None and r not in (1, 2) or (r == 2 and inputs[0].shape[0] not in (1, None)):
            return Decline(rejected=f"input shape {inputs[0].shape}", accepts="[C] or [1, C]")
        return check_all(inputs, _STR)

    def compute(self, node, inputs):
        x = inputs[0]
        words = [str(w) for w in x.reshape(-1)]
        stops = set(node.attr("stopwords") or [])
        if stops:
            if node.attr("is_case_sensitive", 0):
                words = [w for w in words if w not in stops]
            else:
                low = {s.lower() for s in stops}
                words = [w for w in words if w.lower() not in low]
        act = node.attr("case_change_action", "NONE")
        if act == "LOWER":
            words = [w.lower() for w in words]
        elif act == "UPPER":
            words = [w.upper() for w in words]
        if not words:
            words = [""]
        out = np.array(words, dtype=object)
        return [out.reshape(1, -1) if x.ndim == 2 else out]


@register("StringSplit", since=20)
class StringSplit(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, _STR)

    def compute(self, node, inputs):
        x = inputs[0]
        delim = node.attr("delimiter") or None
        maxsplit = node.attr("maxsplit")
        ms = -1 if maxsplit is None else int(maxsplit)
        parts = [str(s).split(delim, ms) if delim else str(s).split(None, ms) for s in x.reshape(-1)]
        width = max((len(p) for p in parts), default=0)
        y = np.full((len(parts), width), "", dtype=object)
        for i, p in enumerate(parts):
            y[i, :len(p)] = p
        counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
        return [y.reshape(x.shape + (width,)), counts]


@register("StringConcat", since=20)
class StringConcat(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, _STR)

    def compute(self, node, inputs):
        a, b = np.broadcast_arrays(inputs[0], inputs[1])
        out = np.array([str(p) + str(q) for p, q in zip(a.reshape(-1), b.reshape(-1))], dtype=object)
        return [out.reshape(a.shape)]


@register("RegexFullMatch", since=20)
class RegexFullMatch(OpImpl):
    def supports(self, node, inputs, opset):
        try:
            re.compile(node.attr("pattern", ""))
        except re.error as e:
            return decline_attr("pattern", node.attr("pattern"), f"a Python-compatible regular expression ({e})")
        return check_all(inputs, _STR)

    def compute(self, node, inputs):
        rx = re.compile(node.attr("pattern", ""))
        x = inputs[0]
        return [np.array([rx.fullmatch(str(s)) is not None for s in x.reshape(-1)], dtype=bool).reshape(x.shape)]

