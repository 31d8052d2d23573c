"""com.microsoft QAttention: the Attention ORT's dynamic quantizer writes for a fused BERT / GPT-2 Attention.

Inputs: input (B, S, D) int8 / uint8 (a DynamicQuantizeLinear before it), weight (D, 3 * hidden) int8 / uint8,
bias (3 * hidden) float, input_scale, weight_scale (per tensor or per column), mask_index, input_zero_point,
weight_zero_point (per tensor or per column), past (2, B, N, P, H). The projection is
(input - izp) @ (weight - wzp) accumulated exactly (`_int_matmul`'s bands, declared), scaled by
input_scale * weight_scale, plus bias; the attention itself (scores slot, masks, past / present) is
com.microsoft Attention's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._int_matmul import int_matmul_into, int_matmul_slots
from ._registry import Decline, InputInfo, attrs_of, register, workspace_nbytes
from .ops_extra_mha import Attention, attention_workspace_bytes

MS = "com.microsoft"
_Q8 = frozenset({TensorProto.INT8, TensorProto.UINT8})
_F = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})
_SCORES, _PROJ = 4, 5  # the attention scores and the float32 projection (0..3 are the integer matmul's)


def _as_attention(items: Sequence, absent):
    """QAttention's inputs in com.microsoft Attention's order: input, weight, bias, mask_index, past."""
    get = lambda i: items[i] if len(items) > i else absent  # noqa: E731
    return [get(0), get(1), get(2), get(5), get(8)]


@register("QAttention", domain=MS)
class QAttention(Attention):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        for i, ok, what in ((0, _Q8, "input"), (1, _Q8, "weight"), (2, _F, "bias"), (3, _F, "input_scale"),
                            (4, _F, "weight_scale"), (6, _Q8, "input_zero_point"), (7, _Q8, "weight_zero_point")):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in ok:
                return Decline(rejected=f"{what} dtype {dtype_name(inputs[i].dtype)}",
                               accepts=", ".join(sorted(dtype_name(d) for d in ok)))
        for i, what in ((3, "input_scale"), (6, "input_zero_point")):
            if i < len(inputs) and inputs[i].present and inputs[i].shape is not None and \
                    int(np.prod([d if isinstance(d, int) else 2 for d in inputs[i].shape])) != 1:
                return Decline(rejected=f"{what} shape {inputs[i].shape!r}", accepts=f"a per-tensor {what}",
                               remedy="quantize the input per tensor (DynamicQuantizeLinear does)")
        w = inputs[1].shape
        if w is not None and len(w) != 2:
            return Decline(rejected=f"weight rank {len(w)}", accepts="weight (D, 3 * hidden)", remedy="reshape it")
        absent = InputInfo(0, None, present=False)
        view = _as_attention(list(inputs), absent)
        view = [InputInfo(TensorProto.FLOAT, i.shape, i.present) if k < 2 else i for k, i in enumerate(view)]
        return super().supports(node, view, opset)

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        x = input_shapes[0] if input_shapes else None
        w = input_shapes[1] if len(input_shapes) > 1 else None
        if x is None or w is None or len(x) != 3 or len(w) != 2:
            return []
        scores = attention_workspace_bytes(node, _as_attention(list(input_shapes), None))
        m = int(x[0]) * int(x[1])
        return (int_matmul_slots(m, int(w[0]), int(w[1])) + [(_SCORES, n + np.dtype(np.float32).alignment) for _s, n in scores]
                + [(_PROJ, workspace_nbytes((m, int(w[1])), np.float32))])

    def _scores_buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.workspace(_SCORES, shape, np.float32)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        x, w, bias, x_scale, w_scale = inputs[0], inputs[1], get(2), inputs[3], inputs[4]
        izp, wzp = get(6), get(7)
        b, s, d = x.shape
        n = w.shape[1]
        proj = self.workspace(_PROJ, (b * s, n), np.float32)
        mult = np.float32(np.asarray(x_scale, np.float32).reshape(())) * np.asarray(w_scale, np.float32).reshape(-1)

        def finish(acc: np.ndarray, j0: int, j1: int) -> None:
            band = proj[:, j0:j1]
            np.copyto(band, acc, casting="unsafe")
            band *= mult if mult.size == 1 else mult[j0:j1]

        azp = np.zeros((), np.float64) if izp is None else np.asarray(izp).reshape(()).astype(np.float64)
        bzp = None if wzp is None else np.asarray(wzp).reshape(-1)
        int_matmul_into(self, x.reshape(b * s, d), azp, w, bzp if bzp is None or bzp.size > 1 else bzp.reshape(()),
                        finish)
        if bias is not None:
            proj += bias.astype(np.float32)
        dtype = np.asarray(x_scale).dtype
        return self.attend_projection(node, attrs_of(node), proj.reshape(b, s, n), n, get(5), get(8), None, dtype)


__all__ = ["QAttention"]
