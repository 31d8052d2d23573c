"""com.microsoft BiasAdd (ONNX Runtime's transformers optimizer, Stable Diffusion UNet fusions): Y = X + bias + skip
with X and skip (N, S, C) and bias (C,), computed into the output block (no temporaries: its estimate is 0 bytes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node

from ._registry import Decline, InputInfo, OpImpl, register

MS = "com.microsoft"


@register("BiasAdd", domain=MS)
class BiasAdd(OpImpl):
    dtypes = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})
    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = super().supports(node, inputs, opset)
        if d is not None:
            return d
        if len(inputs) != 3:
            return Decline(rejected=f"{len(inputs)} inputs", accepts="X, bias, skip", remedy="fix the node inputs")
        x, bias, skip = (i.shape for i in inputs)
        if x is not None and len(x) != 3:
            return Decline(rejected=f"X rank {len(x)}", accepts="X (N, S, C)", remedy="reshape X to 3-D")
        if bias is not None and len(bias) != 1:
            return Decline(rejected=f"bias rank {len(bias)}", accepts="bias (C,)", remedy="reshape the bias to 1-D")
        if x is not None and skip is not None and tuple(skip) != tuple(x):
            return Decline(rejected=f"skip shape {list(skip)!r} for X {list(x)!r}", accepts="skip shaped like X")
        return None

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return []  # a known estimate: none beyond the output

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, bias, skip = inputs[0], inputs[1], inputs[2]
        out = self.output(0, x.shape, x.dtype)
        np.add(x, bias, out=out)
        out += skip
        return [out]


__all__ = ["BiasAdd"]
