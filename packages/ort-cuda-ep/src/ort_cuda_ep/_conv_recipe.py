"""Conv geometry and workspace recipe: one place for the output shape, the padding that auto_pad
resolves to, and the bytes the kernel needs.

The kernel (kernels/conv.cu) is an implicit GEMM: per group, rows are output pixels
``N*OH*OW``, columns the group's output channels, the reduction ``ICg*KH*KW``; the A operand
is gathered from X tile by tile in shared memory (never materialized as an im2col matrix) and
there is no split-K, so the workspace is **0 bytes for every shape** the kernel runs. The recipe
still validates the geometry (a shape it cannot run has no recipe: None), so Level 1, Level 2 and
the runtime agree on which nodes run at all. 1-D convolutions run as 2-D with H = 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._checked import MAX_DIM, dim, mul

__all__ = ["ConvGeometry", "conv_attributes", "conv_geometry", "conv_workspace_bytes", "MAX_GROUPS", "ROWS_PER_LAUNCH"]

MAX_GROUPS = 65535  # grid.z
ROWS_PER_LAUNCH = 65535 * 64  # grid.y x 64-row tiles
_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@attrs.define(frozen=True)
class ConvGeometry:
    """A 2-D view of one convolution (1-D: H = KH = 1, stride/dilation 1 and no padding along H)."""

    N: int
    C: int
    H: int
    W: int
    OC: int
    KH: int
    KW: int
    OH: int
    OW: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    groups: int

    @property
    def rows(self) -> int:
        return self.N * self.OH * self.OW

    @property
    def reduction(self) -> int:
        return (self.C // self.groups) * self.KH * self.KW


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _ints(attrs_: Mapping[str, Any], name: str, n: int, default: int) -> tuple[int, ...] | str:
    v = attrs_.get(name)
    if v is None:
        return (default,) * n
    v = tuple(int(x) for x in v)
    if len(v) != n:
        return f"{name}={list(v)!r} for {n // (2 if name == 'pads' else 1)} spatial dims"
    return v


def conv_attributes(attrs_: Mapping[str, Any], spatial: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], str] | str:
    """(strides, dilations, pads, auto_pad) validated, or a message naming the bad attribute."""
    auto = _text(attrs_.get("auto_pad", "NOTSET"))
    if auto not in _AUTO_PAD:
        return f"auto_pad={auto!r}"
    strides, dil, pads = (_ints(attrs_, "strides", spatial, 1), _ints(attrs_, "dilations", spatial, 1),
                          _ints(attrs_, "pads", 2 * spatial, 0))
    for name, v, lo in (("strides", strides, 1), ("dilations", dil, 1), ("pads", pads, 0)):
        if isinstance(v, str):
            return v
        if any(not lo <= x <= MAX_DIM for x in v):
            return f"{name}={list(v)!r} (each from {lo} to {MAX_DIM})"
    g = attrs_.get("group", 1)
    if not isinstance(g, int) or not 1 <= g <= MAX_GROUPS:
        return f"group={g!r} (1 to {MAX_GROUPS})"
    return strides, dil, pads, auto  # type: ignore[return-value]


def conv_geometry(x: Sequence[int], w: Sequence[int], attrs_: Mapping[str, Any]) -> ConvGeometry | str:
    """The geometry for static X and W shapes, or a message saying what is out of range."""
    if len(x) not in (3, 4) or len(w) != len(x):
        return f"X {tuple(x)!r} and W {tuple(w)!r} (3-D or 4-D X, W of the same rank)"
    xs, ws = [dim(d) for d in x], [dim(d) for d in w]
    if None in xs or None in ws:
        return f"X {tuple(x)!r} and W {tuple(w)!r} (extents from 0 to {MAX_DIM})"
    spatial = len(x) - 2
    got = conv_attributes(attrs_, spatial)
    if isinstance(got, str):
        return got
    strides, dil, pads, auto = got
    g = int(attrs_.get("group", 1))
    n, c, oc, icg = xs[0], xs[1], ws[0], ws[1]
    if c != icg * g or oc % g:
        return f"X channels {c} with W {tuple(w)!r} and group={g} (W[1] * group == C, W[0] a multiple of group)"
    ks = attrs_.get("kernel_shape")
    if ks is not None and tuple(int(v) for v in ks) != tuple(ws[2:]):
        return f"kernel_shape={list(ks)!r} with W {tuple(w)!r}"
    out, begin = [], []
    for i in range(spatial):
        size, k, s, d = xs[2 + i], ws[2 + i], strides[i], dil[i]
        eff = mul(d, k - 1)
        if k < 1 or eff is None or eff + 1 > MAX_DIM:
            return f"kernel extent {k} with dilation {d}"
        eff += 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            need = max(0, (o - 1) * s + eff - size)
            pb = need // 2 if auto == "SAME_UPPER" else need - need // 2
            pe = need - pb
        elif auto == "VALID":
            pb = pe = 0
        else:
            pb, pe = pads[i], pads[spatial + i]
        padded = size + pb + pe
        if padded > MAX_DIM or padded < eff:
            return f"input extent {size} with pads ({pb}, {pe}) against a dilated kernel extent {eff}"
        out.append((padded - eff) // s + 1)
        begin.append(pb)
    if spatial == 1:
        geom = ConvGeometry(n, c, 1, xs[2], oc, 1, ws[2], 1, out[0], 1, strides[0], 0, begin[0], 1, dil[0], g)
    else:
        geom = ConvGeometry(n, c, xs[2], xs[3], oc, ws[2], ws[3], out[0], out[1], strides[0], strides[1], begin[0],
                            begin[1], dil[0], dil[1], g)
    if mul(geom.N, geom.OH, geom.OW) is None or mul(icg, geom.KH, geom.KW) is None or geom.reduction > MAX_DIM:
        return f"X {tuple(x)!r} with W {tuple(w)!r}: the GEMM extents overflow"
    for total in ((geom.N, geom.C, geom.H, geom.W), (geom.N, geom.OC, geom.OH, geom.OW), tuple(ws)):
        if mul(*total) is None:
            return f"X {tuple(x)!r} with W {tuple(w)!r}: element counts overflow"
    return geom


def conv_workspace_bytes(x: Sequence[int], w: Sequence[int], attrs_: Mapping[str, Any]) -> int | None:
    """0 for every geometry the kernel runs (implicit GEMM, no im2col, no split-K); None otherwise."""
    return 0 if isinstance(conv_geometry(x, w, attrs_), ConvGeometry) else None
