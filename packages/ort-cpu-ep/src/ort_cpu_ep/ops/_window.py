"""Sliding-window helpers shared by Conv and the pooling ops (N-D, strided, dilated, padded)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def conv_pads(node, in_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int]) -> list[int]:
    """Begin pads followed by end pads, resolving auto_pad like ONNX Runtime."""
    n = len(kernel)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(n):
            out = -(-in_shape[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_shape[i], 0)
            small = total // 2
            if auto == "SAME_UPPER":
                begin.append(small)
                end.append(total - small)
            else:
                begin.append(total - small)
                end.append(small)
        return begin + end
    if auto == "VALID":
        return [0] * (2 * n)
    return list(node.attr("pads") or [0] * (2 * n))


def out_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil: bool, truncate: bool = False) -> int:
    """Output extent of one spatial axis. `truncate`: the pooling rule of onnxruntime and onnx's shape inference,
    whose integer division rounds toward zero, so a window overhanging the input by less than a stride still has
    one output position."""
    dk = (k - 1) * d + 1
    span = size + pb + pe - dk
    if ceil:
        o = math.ceil(span / s) + 1
        if (o - 1) * s >= size + pb:  # the last window must start inside the input or its begin pad
            o -= 1
        return max(o, 0)
    if truncate:
        return (span // s if span >= 0 else -(-span // s)) + 1
    return max(span // s + 1, 0)


def windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
            pads: Sequence[int], outs: Sequence[int], fill) -> np.ndarray:
    """View (N, C, *out, *kernel) of x's spatial windows; out-of-range cells hold `fill`."""
    n = len(kernel)
    width = [(0, 0), (0, 0)]
    for i in range(n):
        dk = (kernel[i] - 1) * dilations[i] + 1
        need = (outs[i] - 1) * strides[i] + dk
        width.append((pads[i], max(need - x.shape[2 + i] - pads[i], 0)))
    xp = np.pad(x, width, constant_values=fill) if any(w != (0, 0) for w in width) else x
    dks = [(kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    v = sliding_window_view(xp, dks, axis=tuple(range(2, 2 + n)))
    sl = [slice(None), slice(None)]
    sl += [slice(0, (outs[i] - 1) * strides[i] + 1, strides[i]) for i in range(n)]
    sl += [slice(None, None, dilations[i]) for i in range(n)]
    return v[tuple(sl)]
