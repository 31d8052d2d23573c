"""Losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss."""

from __future__ import annotations

import numpy as np

from ._registry import OpImpl, register
from ._util import FLOATS_BF, INDEX, check_dtype, decline_attr, upcast


def nll(logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None, reduction: str,
        ignore_index: int | None) -> np.ndarray:
    """Per-element -logp[n, t, ...] * w[t] reduced as ONNX defines (mean divides by the weight sum)."""
    t = target.astype(np.int64)
    valid = np.ones(t.shape, dtype=bool) if ignore_index is None else t != ignore_index
    safe = np.where(valid, t, 0)
    picked = np.take_along_axis(logp, np.expand_dims(safe, 1), axis=1).squeeze(1)
    w = np.ones(t.shape, dtype=logp.dtype) if weight is None else weight.astype(logp.dtype)[safe]
    w = np.where(valid, w, 0).astype(logp.dtype)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum())
    den = w.sum()
    return np.asarray(loss.sum() / den if den != 0 else loss.sum() * 0)


class _LossBase(OpImpl):
    def supports(self, node, inputs, opset):
        r = node.attr("reduction", "mean")
        if r not in ("none", "sum", "mean"):
            return decline_attr("reduction", r, "'none', 'sum', 'mean'")
        return check_dtype(inputs, 0, FLOATS_BF) or check_dtype(inputs, 1, INDEX) or \
            check_dtype(inputs, 2, FLOATS_BF)


@register("NegativeLogLikelihoodLoss", since=12)
class NegativeLogLikelihoodLoss(_LossBase):
    def compute(self, node, inputs):
        x, t = inputs[0], inputs[1]
        w = inputs[2] if len(inputs) > 2 else None
        out = nll(upcast(x), t, None if w is None else upcast(w), node.attr("reduction", "mean"),
                  node.attr("ignore_index"))
        return [out.astype(x.dtype)]


@register("SoftmaxCrossEntropyLoss", since=12)
class SoftmaxCrossEntropyLoss(_LossBase):
    def compute(self, node, inputs):
        x, t = inputs[0], inputs[1]
        w = inputs[2] if len(inputs) > 2 else None
        xf = upcast(x)
        s = xf - xf.max(axis=1, keepdims=True)
        logp = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
        loss = nll(logp, t, None if w is None else upcast(w), node.attr("reduction", "mean"),
                   node.attr("ignore_index"))
        return [loss.astype(x.dtype), logp.astype(x.dtype)]
