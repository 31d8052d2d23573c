"""Conv claims (kernels/conv.cu, an implicit GEMM through NVRTC; no cuDNN).

Claimed: ai.onnx Conv (opset 1+) with a 3-D [N, C, L] or 4-D [N, C, H, W] X, W of the same rank,
an optional bias [OC]; float32, float16 or bfloat16 (one type for all); groups (depthwise
included), strides, dilations, explicit pads and every auto_pad (NOTSET, SAME_UPPER, SAME_LOWER,
VALID). Workspace: 0 bytes (``_conv_recipe``).

Declined, naming the input or attribute: 3-D convolutions (5-D X) and higher, unknown ranks or
dtypes, mixed or non-float types (integer ConvInteger-style inputs stay on the CPU), a W whose
channels do not match X and group, a kernel_shape that contradicts W, a group past 65,535 (the
grid's z extent), and static shapes whose output is empty of extent or overflows the kernel's
32-bit indices.
"""

from __future__ import annotations

from ._conv_recipe import ConvGeometry, conv_attributes, conv_geometry
from ._ops import NodeFacts, OpSpec, Rejection, _extents_fit, _first, _floats, _ranks_known

__all__ = ["CONV_SPEC"]

_CPU = "leave this node to the CPU EP (it is next in the list)"


def _conv(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_floats(f, (0, 1, 2)), _ranks_known(f, (0, 1, 2), 5), _extents_fit(f, (0, 1, 2)))
    if r:
        return r
    rank = f.rank(0)
    if rank not in (3, 4):
        what = f"{rank - 2}-D convolution" if rank and rank > 4 else "a convolution without spatial dims"
        return Rejection("shape", f"X (input 0, {f.inputs[0]!r}) has shape {f.shapes[0]!r} ({what})",
                         "1-D or 2-D convolutions (3-D or 4-D X)", _CPU)
    if f.rank(1) != rank:
        return Rejection("shape", f"W (input 1, {f.inputs[1]!r}) has shape {f.shapes[1]!r} for X {f.shapes[0]!r}",
                         "W of X's rank: [OC, C / group, kernel...]", "fix the model")
    bad = conv_attributes(f.attrs, rank - 2)
    if isinstance(bad, str):
        return Rejection("attribute", bad, "strides/dilations >= 1, pads >= 0 (one per spatial edge), "
                         "auto_pad in NOTSET/SAME_UPPER/SAME_LOWER/VALID, 1 <= group <= 65535", "fix the model, or " + _CPU)
    x, w = f.shapes[0], f.shapes[1]
    g = f.attrs.get("group", 1)
    c, oc, icg = x[1], w[0], w[1]  # type: ignore[index]
    if isinstance(oc, int) and oc % g or (isinstance(c, int) and isinstance(icg, int) and c != icg * g):
        return Rejection("shape", f"X {x!r}, W {w!r} with group={g}", "W[1] * group == C and W[0] a multiple of group",
                         "fix the model")
    ks = f.attrs.get("kernel_shape")
    if ks is not None and any(isinstance(d, int) and d != k for d, k in zip(w[2:], ks)):  # type: ignore[index]
        return Rejection("attribute", f"kernel_shape={list(ks)!r} with W {w!r}", "kernel_shape equal to W's spatial dims",
                         "fix the model")
    if f.present(2):
        b = f.shapes[2]
        if b is None or len(b) != 1 or (isinstance(b[0], int) and isinstance(oc, int) and b[0] != oc):
            return Rejection("shape", f"bias (input 2, {f.inputs[2]!r}) has shape {b!r} for W {w!r}", "a bias [OC]",
                             "fix the model")
    if all(isinstance(d, int) for d in (*x, *w)):  # type: ignore[misc]
        geom = conv_geometry(x, w, f.attrs)  # type: ignore[arg-type]
        if not isinstance(geom, ConvGeometry):
            return Rejection("shape", geom, "an output of at least one element per spatial dim, extents and counts the "
                             "kernel's 32-bit indices hold", "fix the model, or " + _CPU)
    return None


CONV_SPEC = OpSpec("Conv", "", 1, None, "conv", "conv", _conv)
