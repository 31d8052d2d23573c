"""Recurrent ops RNN, GRU and LSTM (opsets 7-22, `layout` from 14): the ONNX equations, ORT's activation rules.

Per direction, X @ W^T for all time steps is one matmul; the time loop then does one (batch, hidden) @ R^T
per step. sequence_lens masks steps t >= len[b] (outputs zero there, state carried), so a reverse direction
starts at each entry's own last valid step; an entry of length 0 ends in zero states (as onnxruntime). `clip`
bounds the gate pre-activations. Activation functions (Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu,
ScaledTanh, HardSigmoid, Elu, Softsign, Softplus) consume activation_alpha / activation_beta entries in order,
only those that take them (as ONNX Runtime). float32 nodes without `activations` run as the C kernel instead
(csrc/rnn_kernel.c, `_c_rnn_rules`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register
from .ops_extra_attention import requested

_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16})

# name -> (number of alpha/beta parameters used, defaults)
_ACTS: dict[str, tuple[int, tuple[float, float]]] = {
    "relu": (0, (0, 0)), "tanh": (0, (0, 0)), "sigmoid": (0, (0, 0)), "softsign": (0, (0, 0)),
    "softplus": (0, (0, 0)), "affine": (2, (1.0, 0.0)), "leakyrelu": (1, (0.01, 0)),
    "thresholdedrelu": (1, (1.0, 0)), "scaledtanh": (2, (1.0, 1.0)), "hardsigmoid": (2, (0.2, 0.5)),
    "elu": (1, (1.0, 0)),
}


def _act(name: str, alpha: float, beta: float) -> Callable[[np.ndarray], np.ndarray]:
    n = name.lower()
    if n == "relu":
        return lambda x: np.maximum(x, 0)
    if n == "tanh":
        return np.tanh
    if n == "sigmoid":
        return lambda x: 1 / (1 + np.exp(-x))
    if n == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if n == "softplus":
        return lambda x: np.logaddexp(0, x)
    if n == "affine":
        return lambda x: alpha * x + beta
    if n == "leakyrelu":
        return lambda x: np.where(x >= 0, x, alpha * x)
    if n == "thresholdedrelu":
        return lambda x: np.where(x > alpha, x, 0)
    if n == "scaledtanh":
        return lambda x: alpha * np.tanh(beta * x)
    if n == "hardsigmoid":
        return lambda x: np.clip(alpha * x + beta, 0, 1)
    if n == "elu":
        return lambda x: np.where(x >= 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1))
    raise ValueError(f"unknown activation {name!r}")


class _RecurrentBase(OpImpl):
    gates: ClassVar[int] = 1
    default_acts: ClassVar[tuple[str, ...]] = ("Tanh",)

    def _activations(self, node: Node, num_dir: int) -> list[list[Callable[[np.ndarray], np.ndarray]]]:
        a = attrs_of(node)
        names = list(a.get("activations") or [])
        per = len(self.default_acts)
        if not names:
            names = list(self.default_acts) * num_dir
        elif len(names) == per and num_dir == 2:
            names = names * 2
        alphas, betas = list(a.get("activation_alpha") or []), list(a.get("activation_beta") or [])
        fns, ai, bi = [], 0, 0
        for name in names:
            used, (da, db) = _ACTS[name.lower()]
            al, be = da, db
            if used >= 1 and ai < len(alphas):
                al, ai = alphas[ai], ai + 1
            if used >= 2 and bi < len(betas):
                be, bi = betas[bi], bi + 1
            fns.append(_act(name, al, be))
        return [fns[d * per:(d + 1) * per] for d in range(num_dir)]

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        for i in (0, 1, 2, 3, 5, 6, 7):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in _FLOATS:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}",
                               accepts="float16, float32, double")
        direction = str(a.get("direction", "forward"))
        if direction not in ("forward", "reverse", "bidirectional"):
            return Decline(rejected=f"direction={direction!r}", accepts="forward, reverse, bidirectional",
                           remedy="fix the direction attribute")
        for name in a.get("activations") or []:
            if name.lower() not in _ACTS:
                return Decline(rejected=f"activation {name!r}", accepts=", ".join(sorted(_ACTS)),
                               remedy="use a standard activation function")
        num_dir = 2 if direction == "bidirectional" else 1
        names = a.get("activations") or []
        per = len(self.default_acts)
        if names and len(names) not in (per, per * num_dir):
            return Decline(rejected=f"{len(names)} activations for direction={direction!r}",
                           accepts=f"{per} per direction", remedy="fix the activations attribute")
        if int(a.get("hidden_size", 0)) <= 0 and len(inputs) > 2 and inputs[2].shape is None:
            return Decline(rejected="hidden_size unset and R's shape unknown",
                           accepts="hidden_size attribute or a static R shape", remedy="set hidden_size")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x, w, r = inputs[0], inputs[1], inputs[2]
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        b, seq_lens, h0 = get(3), get(4), get(5)
        layout = int(a.get("layout", 0))
        direction = str(a.get("direction", "forward"))
        num_dir = 2 if direction == "bidirectional" else 1
        hidden = int(a.get("hidden_size", 0)) or r.shape[-1]
        dt = x.dtype
        ct = np.float64 if dt == np.float64 else np.float32
        if layout:
            x = x.transpose(1, 0, 2)
            h0 = None if h0 is None else h0.transpose(1, 0, 2)
        seq, batch = x.shape[0], x.shape[1]
        x = x.astype(ct)
        lens = np.full(batch, seq, np.int64) if seq_lens is None else np.asarray(seq_lens, np.int64)
        g = self.gates
        bias = np.zeros((num_dir, 2 * g * hidden), ct) if b is None else b.astype(ct)
        init_h = np.zeros((num_dir, batch, hidden), ct) if h0 is None else h0.astype(ct)
        extra = self._extra_inputs(inputs, layout, num_dir, batch, hidden, ct)
        acts = self._activations(node, num_dir)
        clip = a.get("clip")
        y = np.zeros((seq, num_dir, batch, hidden), ct)
        finals: list[list[np.ndarray]] = []
        for d in range(num_dir):
            reverse = direction == "reverse" or d == 1
            xw = x @ w[d].astype(ct).T + bias[d, : g * hidden]  # (seq, batch, G*hidden)
            rt = r[d].astype(ct).T
            rb = bias[d, g * hidden:]
            state = self._init_state(init_h[d], extra, d)
            steps = range(seq - 1, -1, -1) if reverse else range(seq)
            for t in steps:
                active = (t < lens)[:, None]
                new = self._step(xw[t], state, rt, rb, acts[d], clip, extra, d, hidden, a)
                state = [np.where(active, n_, s_) for n_, s_ in zip(new, state)]
                y[t, d] = np.where(active, state[0], 0)
            finals.append([np.where((lens == 0)[:, None], 0, s_) for s_ in state])  # as onnxruntime: zeros
        outs = requested(node, self._outputs(y, finals, layout, dt))
        return [None, *outs[1:]] if node.outputs and not node.outputs[0] else outs  # an omitted Y: no block for it

    def _outputs(self, y: np.ndarray, finals: list[list[np.ndarray]], layout: int, dt: np.dtype) -> list[np.ndarray]:
        res = [y]
        for k in range(len(finals[0])):
            res.append(np.stack([f[k] for f in finals]))
        if layout:
            res = [res[0].transpose(2, 0, 1, 3)] + [s.transpose(1, 0, 2) for s in res[1:]]
        return [o.astype(dt) for o in res]

    def _extra_inputs(self, inputs, layout, num_dir, batch, hidden, ct) -> dict:
        return {}

    def _init_state(self, h0: np.ndarray, extra: dict, d: int) -> list[np.ndarray]:
        return [h0]

    @staticmethod
    def _clip(v: np.ndarray, clip: float | None) -> np.ndarray:
        return v if clip is None else np.clip(v, -clip, clip)

    def _step(self, xw_t, state, rt, rb, acts, clip, extra, d, hidden, a) -> list[np.ndarray]:
        raise NotImplementedError


@register("RNN", since=7)
class RNN(_RecurrentBase):
    """H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""

    def _step(self, xw_t, state, rt, rb, acts, clip, extra, d, hidden, a):
        return [acts[0](self._clip(xw_t + state[0] @ rt + rb, clip))]


@register("GRU", since=7)
class GRU(_RecurrentBase):
    """Gates z, r, h; linear_before_reset chooses where r applies."""

    gates = 3
    default_acts = ("Sigmoid", "Tanh")

    def _step(self, xw_t, state, rt, rb, acts, clip, extra, d, hidden, a):
        f, g = acts
        h = state[0]
        hr = h @ rt  # (batch, 3*hidden): recurrent parts of z, r, h (h part only used with linear_before_reset)
        z = f(self._clip(xw_t[:, :hidden] + hr[:, :hidden] + rb[:hidden], clip))
        r = f(self._clip(xw_t[:, hidden:2 * hidden] + hr[:, hidden:2 * hidden] + rb[hidden:2 * hidden], clip))
        if int(a.get("linear_before_reset", 0)):
            pre = xw_t[:, 2 * hidden:] + r * (hr[:, 2 * hidden:] + rb[2 * hidden:])
        else:
            pre = xw_t[:, 2 * hidden:] + (r * h) @ rt[:, 2 * hidden:] + rb[2 * hidden:]
        hh = g(self._clip(pre, clip))
        return [(1 - z) * hh + z * h]


@register("LSTM", since=7)
class LSTM(_RecurrentBase):
    """Gates i, o, f, c with optional peepholes P (i, o, f) and input_forget coupling; outputs Y, Y_h, Y_c."""

    gates = 4
    default_acts = ("Sigmoid", "Tanh", "Tanh")

    def _extra_inputs(self, inputs, layout, num_dir, batch, hidden, ct) -> dict:
        c0 = inputs[6] if len(inputs) > 6 else None
        p = inputs[7] if len(inputs) > 7 else None
        if c0 is not None and layout:
            c0 = c0.transpose(1, 0, 2)
        return {"c0": np.zeros((num_dir, batch, hidden), ct) if c0 is None else c0.astype(ct),
                "p": np.zeros((num_dir, 3 * hidden), ct) if p is None else p.astype(ct)}

    def _init_state(self, h0, extra, d):
        return [h0, extra["c0"][d]]

    def _step(self, xw_t, state, rt, rb, acts, clip, extra, d, hidden, a):
        f, g, hf = acts
        h, c = state
        pre = xw_t + h @ rt + rb
        p = extra["p"][d]
        hs = hidden
        i = f(self._clip(pre[:, :hs] + p[:hs] * c, clip))
        if int(a.get("input_forget", 0)):
            fg = 1 - i
        else:
            fg = f(self._clip(pre[:, 2 * hs:3 * hs] + p[2 * hs:] * c, clip))
        cc = g(self._clip(pre[:, 3 * hs:], clip))
        c_new = fg * c + i * cc
        o = f(self._clip(pre[:, hs:2 * hs] + p[hs:2 * hs] * c_new, clip))
        return [o * hf(c_new), c_new]


__all__ = ["GRU", "LSTM", "RNN"]
