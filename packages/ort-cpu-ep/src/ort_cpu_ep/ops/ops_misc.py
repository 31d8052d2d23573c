"""Assorted ops: Dropout (inference), BitCast, SwiGLU, CausalConvWithState, LinearAttention,
NonMaxSuppression, AffineGrid."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ort_graph import Node, constant_initializer, dtype_name

from ._registry import Decline, OpImpl, register
from ._util import ANY, FLOATS_BF, check_all, check_dtype, decline_attr, np_dtype, upcast, write_output


def const_input(node: Node, index: int) -> np.ndarray | None:
    """The value of input `index` when it is a constant initializer of an enclosing graph (not one a run may
    feed: `ort_graph.constant_initializer`) or a Constant's output (else None)."""
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    g = node.graph
    while g is not None:
        if node.inputs[index] in g.initializers:
            t = constant_initializer(g, node.inputs[index])
            return None if t is None else t.numpy()
        v = g.values.get(node.inputs[index])
        if v is not None and v.producer is not None and v.producer.op_type == "Constant":
            from .ops_cast import Constant

            return Constant().compute(v.producer, [])[0]
        g = g.parent_node.graph if g.parent_node is not None else None
    return None


@register("Dropout", since=1)
class Dropout(OpImpl):
    """Inference-mode Dropout (identity). Training mode with a non-zero ratio draws random numbers
    and is declined."""

    def supports(self, node, inputs, opset):
        if node.attr("is_test", 1 if opset < 7 else 0) == 0 and opset < 7:
            return decline_attr("is_test", 0, "is_test=1 (inference)")
        if opset >= 12 and len(node.inputs) > 2 and node.inputs[2]:
            tm = const_input(node, 2)
            if tm is None or bool(np.asarray(tm).reshape(-1)[0]):
                ratio = const_input(node, 1) if len(node.inputs) > 1 and node.inputs[1] else np.array(0.5)
                if tm is None or ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
                    return Decline(rejected="training_mode input that may be true at run time",
                                   accepts="inference mode (training_mode absent or constant false) or ratio 0",
                                   remedy="export the model for inference or make training_mode a false constant")
        return check_dtype(inputs, 0, FLOATS_BF)

    writes_output = True

    def compute(self, node, inputs):
        """Y written once into its planned block (in place where the plan put it over X); the all-true mask only
        when the node asks for it (squeezenet's 512 x 13 x 13 Dropout: 621 -> ~20 us)."""
        x = inputs[0]
        y = write_output(self, x)
        if len(node.outputs) < 2 or not node.outputs[1]:
            return [y]
        return [y, np.ones(x.shape, dtype=bool)]


@register("BitCast", since=26)
class BitCast(OpImpl):
    def supports(self, node, inputs, opset):
        to = node.attr("to")
        d = check_dtype(inputs, 0, ANY - {T.STRING})
        if d:
            return d
        if to not in ANY or to == T.STRING:
            return decline_attr("to", to, "any non-string type of the same bit width")
        if inputs and inputs[0].dtype and np_dtype(inputs[0].dtype).itemsize != np_dtype(to).itemsize:
            return Decline(rejected=f"{dtype_name(inputs[0].dtype)} -> {dtype_name(to)}",
                           accepts="types of equal bit width", remedy="use Cast")
        return None

    def compute(self, node, inputs):
        return [np.array(inputs[0], order="C").view(np_dtype(node.attr("to")))]


@register("SwiGLU", since=28)
class SwiGLU(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, FLOATS_BF)

    def compute(self, node, inputs):
        a, b = inputs
        alpha = node.attr("alpha", 1.0)
        af = upcast(a)
        with np.errstate(over="ignore"):
            y = af / (1 + np.exp(-alpha * af)) * upcast(b)
        return [y.astype(a.dtype)]


@register("CausalConvWithState", since=27)
class CausalConvWithState(OpImpl):
    def supports(self, node, inputs, opset):
        act = node.attr("activation", "none")
        if act not in ("none", "silu", "swish"):
            return decline_attr("activation", act, "'none', 'silu', 'swish'")
        return check_all(inputs, FLOATS_BF)

    def compute(self, node, inputs):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        past = inputs[3] if len(inputs) > 3 else None
        b, c, length = x.shape
        k = w.shape[2]
        pad = np.zeros((b, c, k - 1), dtype=x.dtype) if past is None else past
        full = np.concatenate([pad, x], axis=2)
        win = np.lib.stride_tricks.sliding_window_view(upcast(full), k, axis=2)  # (B, C, L, k)
        y = np.einsum("bclk,ck->bcl", win, upcast(w)[:, 0, :])
        if bias is not None:
            y = y + upcast(bias)[None, :, None]
        y = y.astype(x.dtype)
        if node.attr("activation", "none") in ("silu", "swish"):
            yf = y.astype(np.float32)
            y = (yf / (1 + np.exp(-yf))).astype(x.dtype)
        return [y, full[:, :, full.shape[2] - (k - 1):]]


def _heads(x: np.ndarray, h: int) -> np.ndarray:
    b, t, hd = x.shape
    return x.reshape(b, t, h, hd // h).transpose(0, 2, 1, 3)


@register("LinearAttention", since=27)
class LinearAttention(OpImpl):
    """Recurrent linear attention; the recurrence runs token by token, vectorized over batch/heads."""

    def supports(self, node, inputs, opset):
        rule = node.attr("update_rule", "gated_delta")
        if rule not in ("linear", "gated", "delta", "gated_delta"):
            return decline_attr("update_rule", rule, "'linear', 'gated', 'delta', 'gated_delta'")
        qh, kvh = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if not qh or not kvh or qh % kvh:
            return Decline(rejected=f"q_num_heads={qh!r}, kv_num_heads={kvh!r}",
                           accepts="positive head counts with q_num_heads a multiple of kv_num_heads",
                           remedy="fix the attributes")
        gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        has = lambda i: len(inputs) > i and inputs[i].present  # noqa: E731
        if gating != has(4) or delta != has(5):
            return Decline(rejected=f"update_rule={rule!r} with decay {'given' if has(4) else 'absent'} and beta "
                                    f"{'given' if has(5) else 'absent'}",
                           accepts="decay exactly for gated rules, beta exactly for delta rules",
                           remedy="fix the inputs")
        return check_all(inputs, FLOATS_BF)

    def compute(self, node, inputs):
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        q, k, v, past, decay, beta = (get(i) for i in range(6))
        qh, kvh = node.attr("q_num_heads"), node.attr("kv_num_heads")
        rule = node.attr("update_rule", "gated_delta")
        b, t, _ = q.shape
        dk, dv = q.shape[-1] // qh, v.shape[-1] // kvh
        rep = qh // kvh
        q4, k4, v4 = (_heads(a, h).astype(np.float32) for a, h in ((q, qh), (k, kvh), (v, kvh)))
        g4 = None
        if decay is not None:
            g4 = (decay.reshape(b, t, kvh, 1).transpose(0, 2, 1, 3) if decay.shape[-1] == kvh
                  else _heads(decay, kvh)).astype(np.float32)
        b4 = None if beta is None else beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(np.float32)
        state = np.zeros((b, kvh, dk, dv), np.float32) if past is None else past.astype(np.float32).copy()
        scale = node.attr("scale", 0.0) or 1.0 / np.sqrt(dk)
        out = np.zeros((b, qh, t, dv), np.float32)
        for i in range(t):
            kt, vt = k4[:, :, i], v4[:, :, i]
            if g4 is not None:
                state = state * np.exp(g4[:, :, i])[..., None]
            if rule in ("delta", "gated_delta"):
                vt = b4[:, :, i] * (vt - np.einsum("bhdm,bhd->bhm", state, kt))
            state = state + kt[..., :, None] * vt[..., None, :]
            read = state if rep == 1 else np.repeat(state, rep, axis=1)
            out[:, :, i] = scale * np.einsum("bhd,bhdm->bhm", q4[:, :, i], read)
        y = out.transpose(0, 2, 1, 3).reshape(b, t, qh * dv).astype(q.dtype)
        return [y, state.astype(q.dtype if past is None else past.dtype)]


@register("NonMaxSuppression", since=10)
class NonMaxSuppression(OpImpl):
    def supports(self, node, inputs, opset):
        if node.attr("center_point_box", 0) not in (0, 1):
            return decline_attr("center_point_box", node.attr("center_point_box"), "0 or 1")
        return check_dtype(inputs, 0, {T.FLOAT})

    def compute(self, node, inputs):
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        boxes, scores = inputs[0], inputs[1]
        mob = get(2)
        max_out = int(mob.reshape(-1)[0]) if mob is not None and mob.size else 0
        iou_t = float(get(3).reshape(-1)[0]) if get(3) is not None and get(3).size else 0.0
        st = get(4)
        score_t = float(st.reshape(-1)[0]) if st is not None and st.size else None
        bx = boxes.astype(np.float64)
        if node.attr("center_point_box", 0):
            xc, yc, w, h = bx[..., 0], bx[..., 1], bx[..., 2], bx[..., 3]
            y1, x1, y2, x2 = yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
        else:
            y1 = np.minimum(bx[..., 0], bx[..., 2])
            y2 = np.maximum(bx[..., 0], bx[..., 2])
            x1 = np.minimum(bx[..., 1], bx[..., 3])
            x2 = np.maximum(bx[..., 1], bx[..., 3])
        area = (y2 - y1) * (x2 - x1)
        selected = []
        for bi in range(scores.shape[0]):
            iy1 = np.maximum(y1[bi][:, None], y1[bi][None, :])
            iy2 = np.minimum(y2[bi][:, None], y2[bi][None, :])
            ix1 = np.maximum(x1[bi][:, None], x1[bi][None, :])
            ix2 = np.minimum(x2[bi][:, None], x2[bi][None, :])
            inter = np.clip(iy2 - iy1, 0, None) * np.clip(ix2 - ix1, 0, None)
            union = area[bi][:, None] + area[bi][None, :] - inter
            with np.errstate(all="ignore"):
                iou = np.where((inter > 0) & (union > 0), inter / union, 0.0)
            for ci in range(scores.shape[1]):
                s = scores[bi, ci]
                cand = np.arange(s.shape[0]) if score_t is None else np.nonzero(s > score_t)[0]
                cand = cand[np.lexsort((cand, -s[cand]))]
                keep: list[int] = []
                for j in cand:
                    if len(keep) >= max_out:
                        break
                    if not keep or not (iou[j, keep] > iou_t).any():
                        keep.append(int(j))
                selected.extend((bi, ci, j) for j in keep)
        return [np.array(selected, dtype=np.int64).reshape(-1, 3)]


@register("AffineGrid", since=20)
class AffineGrid(OpImpl):
    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, FLOATS_BF)

    def compute(self, node, inputs):
        theta, size = inputs[0], [int(s) for s in inputs[1]]
        align = node.attr("align_corners", 0)
        n, spatial = size[0], size[2:]

        def lin(m):
            if align:
                return np.linspace(-1, 1, m) if m > 1 else np.zeros(1)
            return (np.arange(m) * 2 + 1) / m - 1

        axes = [lin(m) for m in reversed(spatial)]  # x, y, (z)
        grids = np.meshgrid(*axes[::-1], indexing="ij")[::-1]  # each shaped spatial
        base = np.stack(list(grids) + [np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
        out = np.einsum("pk,nrk->npr", base, upcast(theta).astype(np.float64))
        return [out.reshape(n, *spatial, len(spatial)).astype(theta.dtype)]
