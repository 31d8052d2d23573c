"""DeformConv (ops_extra_deform) against onnxruntime: groups, offset groups, strides, dilations, pads, mask, bias."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo
from ort_cpu_ep.ops.ops_extra_deform import DeformConv

# Called directly: the op table may hold another DeformConv from a standard-op module; `find` picks one.
DEFORMCONV = DeformConv()


def _out(size, k, s, d, p0, p1):
    return (size + p0 + p1 - ((k - 1) * d + 1)) // s + 1


@pytest.mark.parametrize("group,offset_group", [(1, 1), (2, 1), (1, 2), (2, 4)])
@pytest.mark.parametrize("strides,dilations,pads", [((1, 1), (1, 1), (0, 0, 0, 0)), ((2, 1), (1, 2), (1, 0, 2, 1))])
@pytest.mark.parametrize("with_mask,with_bias", [(False, False), (True, True)])
def test_deform_conv_matches_onnxruntime(kit, rng, group, offset_group, strides, dilations, pads, with_mask,
                                         with_bias):
    n, c, h, w, oc, kh, kw = 2, 4, 7, 6, 4, 3, 2
    oh = _out(h, kh, strides[0], dilations[0], pads[0], pads[2])
    ow = _out(w, kw, strides[1], dilations[1], pads[1], pads[3])
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c // group, kh, kw)).astype(np.float32)
    off = (rng.standard_normal((n, offset_group * kh * kw * 2, oh, ow)) * 2).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32) if with_bias else None
    mask = rng.random((n, offset_group * kh * kw, oh, ow)).astype(np.float32) if with_mask else None
    attrs = dict(group=group, offset_group=offset_group, strides=list(strides), dilations=list(dilations),
                 pads=list(pads), kernel_shape=[kh, kw])
    ins = [x, wt, off, b, mask]
    ref = kit.ort("DeformConv", ins, 1, domain="", opset=19, **attrs)[0]
    got = kit.ours("DeformConv", ins, 1, domain="", opset=19, impl=DEFORMCONV, **attrs)[0]
    assert got.shape == ref.shape == (n, oc, oh, ow)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_deform_conv_declines_3d(kit):
    F = TensorProto.FLOAT
    d = kit.decline_of("DeformConv", [InputInfo(F, (1, 2, 4, 4, 4)), InputInfo(F, (2, 2, 2, 2, 2)),
                                      InputInfo(F, (1, 48, 3, 3, 3))], domain="", opset=19,
                       impl=DEFORMCONV)
    assert d is not None and "rank 5" in d.rejected
