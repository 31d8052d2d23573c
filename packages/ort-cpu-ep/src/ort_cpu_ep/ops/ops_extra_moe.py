"""com.microsoft MoE: top-k mixture of experts (Mixtral / Phi-MoE / gpt-oss exports), ORT CPU semantics.

Routing: softmax of router_probs over the experts (float32), the k largest (ties to the lower expert id),
renormalized to sum 1 when normalize_routing_weights. Expert e: h = x W1[e]^T (+ b1), activated (relu, gelu
with the tanh approximation as ORT's CPU kernel, silu, identity, or swiglu:
G * sigmoid(alpha G) * (L + beta) with G clamped above and L clamped to +-swiglu_limit; alpha default 1,
beta 0; gate/up interleaved (swiglu_fusion 1), concatenated (2) or from fc3 (0)), optionally times fc3's
product for non-swiglu activations, then y += weight * (h W2[e]^T (+ b2)). Tokens are gathered per expert,
so each expert runs two matmuls over exactly the tokens routed to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

MS = "com.microsoft"
_T = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})
_ACTS = ("relu", "gelu", "silu", "identity", "swiglu")


def route(router: np.ndarray, k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """(expert ids (T, k), weights (T, k)) from router logits (T, E)."""
    r = router.astype(np.float32)
    p = np.exp(r - r.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ids = np.argsort(-p, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(p, ids, axis=1)
    if normalize:
        w = w / w.sum(axis=1, keepdims=True)
    return ids, w


def activate(h: np.ndarray, a: dict, fc3: np.ndarray | None) -> np.ndarray:
    act = str(a.get("activation_type", "relu"))
    f = np.float32
    if act == "swiglu":
        fusion = int(a.get("swiglu_fusion", 0))
        if fusion == 1:
            g, lin = h[:, 0::2], h[:, 1::2]
        elif fusion == 2:
            half = h.shape[1] // 2
            g, lin = h[:, :half], h[:, half:]
        else:
            g, lin = h, fc3
        limit = a.get("swiglu_limit")
        if limit is not None:
            g = np.minimum(g, f(limit))
            lin = np.clip(lin, -f(limit), f(limit))
        alpha, beta = f(a.get("activation_alpha", 1.0)), f(a.get("activation_beta", 0.0))
        return g / (f(1) + np.exp(-alpha * g)) * (lin + beta)
    if act == "relu":
        out = np.maximum(h, f(0))
    elif act == "gelu":
        out = f(0.5) * h * (f(1) + np.tanh(f(0.7978845608028654) * (h + f(0.044715) * h * h * h)))
    elif act == "silu":
        out = h / (f(1) + np.exp(-h))
    else:
        out = h
    return out * fc3 if fc3 is not None else out


@register("MoE", domain=MS)
class MoE(OpImpl):
    """MoE(input, router_probs, fc1_w, fc1_b?, fc2_w, fc2_b?, fc3_w?, fc3_b?) with float weights."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        for i in range(min(len(inputs), 8)):
            if inputs[i].present and inputs[i].dtype and inputs[i].dtype not in _T:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="float32, float16",
                               remedy="use QMoE for quantized experts or cast to float")
        act = str(a.get("activation_type", "relu"))
        if act not in _ACTS:
            return Decline(rejected=f"activation_type={act!r}", accepts=", ".join(_ACTS),
                           remedy="run this activation on ONNX Runtime's CUDA EP")
        if int(a.get("use_sparse_mixer", 0)):
            return Decline(rejected="use_sparse_mixer=1", accepts="use_sparse_mixer=0",
                           remedy="run sparse-mixer routing on ONNX Runtime's CUDA EP")
        if int(a.get("swiglu_limit_after_activation", 0)):
            return Decline(rejected="swiglu_limit_after_activation=1", accepts="0 (clamp the inputs)",
                           remedy="run it on ONNX Runtime's CUDA EP")
        fc3 = len(inputs) > 6 and inputs[6].present
        if act == "swiglu" and int(a.get("swiglu_fusion", 0)) == 0 and not fc3:
            return Decline(rejected="swiglu with swiglu_fusion=0 and no fc3 weights",
                           accepts="swiglu_fusion 1 or 2, or fc3_experts_weights", remedy="fix the node")
        k = int(a.get("k", 1))
        r = inputs[1].shape if len(inputs) > 1 else None
        if r is not None and len(r) == 2 and isinstance(r[1], int) and not 0 < k <= r[1]:
            return Decline(rejected=f"k={k!r} for {r[1]!r} experts", accepts="0 < k <= num_experts", remedy="fix k")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        x, router, w1, b1, w2, b2, w3, b3 = (get(i) for i in range(8))
        f = np.float32
        xt = x.reshape(-1, x.shape[-1]).astype(f)
        ids, wts = route(router.reshape(xt.shape[0], -1), int(a.get("k", 1)),
                         bool(int(a.get("normalize_routing_weights", 0))))
        y = np.zeros_like(xt)
        for e in np.unique(ids):
            tok, slot = np.nonzero(ids == e)
            xe = xt[tok]
            h = xe @ w1[e].astype(f).T
            if b1 is not None:
                h = h + b1[e].astype(f)
            g3 = None
            if w3 is not None:
                g3 = xe @ w3[e].astype(f).T + (b3[e].astype(f) if b3 is not None else f(0))
            h = activate(h, a, g3)
            out = h @ w2[e].astype(f).T
            if b2 is not None:
                out = out + b2[e].astype(f)
            np.add.at(y, tok, out * wts[tok, slot][:, None])
        return [y.reshape(x.shape).astype(x.dtype)]


__all__ = ["MoE", "activate", "route"]
