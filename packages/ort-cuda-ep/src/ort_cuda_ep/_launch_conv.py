"""Host-side launch of Conv (kernels/conv.cu): geometry from ``_conv_recipe``, then one launch per
chunk of at most 65,535 x 64 output-pixel rows (grid.y), grid (ceil(OCg/64), row tiles, groups)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ._compile import DTYPE_SUFFIX
from ._conv_recipe import ROWS_PER_LAUNCH, ConvGeometry, conv_geometry
from ._errors import KernelLaunchError
from ._runtime import CudaRuntime, DeviceArray, i32, i64, ptr

__all__ = ["conv"]


def conv(rt: CudaRuntime, new: Callable[[int, tuple[int, ...], np.dtype], DeviceArray], node: str,
         inputs: Sequence[Any], attrs: Mapping[str, Any], workspace: Callable[[int], int]) -> DeviceArray:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if x.dtype not in DTYPE_SUFFIX or w.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise KernelLaunchError(f"Conv: X, W and B must share one float type (float32/float16/bfloat16), got "
                                f"{[None if t is None else str(t.dtype) for t in (x, w, bias)]!r}")
    geom = conv_geometry(x.shape, w.shape, attrs)
    if not isinstance(geom, ConvGeometry):
        raise KernelLaunchError(f"Conv: {geom}")
    if bias is not None and bias.shape != (geom.OC,):
        raise KernelLaunchError(f"Conv: bias {bias.shape!r}; expected [{geom.OC}]")
    out_shape = (geom.N, geom.OC, geom.OW) if len(x.shape) == 3 else (geom.N, geom.OC, geom.OH, geom.OW)
    y = new(0, out_shape, x.dtype)
    workspace(0)  # implicit GEMM: records that none was used
    if y.size == 0:
        return y
    g = geom
    ocg = g.OC // g.groups
    sfx = DTYPE_SUFFIX[x.dtype]
    for m0 in range(0, g.rows, ROWS_PER_LAUNCH):
        rows = min(ROWS_PER_LAUNCH, g.rows - m0)
        rt.launch("conv", f"conv2d_{sfx}", (math.ceil(ocg / 64), math.ceil(rows / 64), g.groups), (256,),
                  [ptr(x), ptr(w), ptr(bias), ptr(y), i32(g.C), i32(g.H), i32(g.W), i32(g.OC), i32(g.OH), i32(g.OW),
                   i32(g.KH), i32(g.KW), i32(g.sh), i32(g.sw), i32(g.ph), i32(g.pw), i32(g.dh), i32(g.dw),
                   i32(g.groups), i64(m0), i32(rows)])
    return y
