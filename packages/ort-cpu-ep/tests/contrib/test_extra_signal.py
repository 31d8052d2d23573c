"""DFT / STFT / window functions / MelWeightMatrix (ops_extra_signal) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo


def _close(got, ref, tol=1e-4):
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))


# onesided needs a real signal (complex + onesided is declined: test_signal_declines)
_MODES = [(c, inv, one) for c in (False, True) for inv, one in ((0, 0), (0, 1), (1, 0)) if not (c and one)]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("complex_in,inverse,onesided", _MODES)
@pytest.mark.parametrize("length", [None, 6, 12])
@pytest.mark.parametrize("axis", [1, 2])
def test_dft_matches_onnxruntime(kit, rng, opset, complex_in, inverse, onesided, length, axis):
    x = rng.standard_normal((2, 8, 5, 2 if complex_in else 1)).astype(np.float32)
    ins = [x, None if length is None else np.array(length, np.int64)]
    attrs = dict(inverse=inverse, onesided=onesided)
    if opset == 17:
        attrs["axis"] = axis
    else:
        ins.append(np.array(axis, np.int64))
    ref = kit.ort("DFT", ins, 1, domain="", opset=opset, **attrs)[0]
    got = kit.ours("DFT", ins, 1, domain="", opset=opset, **attrs)[0]
    _close(got, ref)


@pytest.mark.parametrize("with_window", [True, False])
@pytest.mark.parametrize("onesided,complex_in", [(0, False), (1, False), (0, True)])
def test_stft_matches_onnxruntime(kit, rng, with_window, onesided, complex_in):
    x = rng.standard_normal((2, 64, 2 if complex_in else 1)).astype(np.float32)
    step = np.array(6, np.int64)
    window = np.hanning(16).astype(np.float32) if with_window else None
    frame = None if with_window else np.array(16, np.int64)
    ins = [x, step, window, frame]
    ref = kit.ort("STFT", ins, 1, domain="", opset=17, onesided=onesided)[0]
    got = kit.ours("STFT", ins, 1, domain="", opset=17, onesided=onesided)[0]
    _close(got, ref)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("out", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_windows_match_onnxruntime(kit, op, periodic, out):
    ins = [np.array(10, np.int64)]
    ref = kit.ort(op, ins, 1, domain="", opset=17, periodic=periodic, output_datatype=out)[0]
    got = kit.ours(op, ins, 1, domain="", opset=17, periodic=periodic, output_datatype=out)[0]
    _close(got, ref, 1e-6)


@pytest.mark.parametrize("num_mel,dft_len,rate,lo,hi", [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7000.0),
                                                         (5, 32, 8000, 100.0, 3000.0)])
def test_mel_weight_matrix_matches_onnxruntime(kit, num_mel, dft_len, rate, lo, hi):
    ins = [np.array(num_mel, np.int64), np.array(dft_len, np.int64), np.array(rate, np.int64),
           np.array(lo, np.float32), np.array(hi, np.float32)]
    ref = kit.ort("MelWeightMatrix", ins, 1, domain="", opset=17)[0]
    got = kit.ours("MelWeightMatrix", ins, 1, domain="", opset=17)[0]
    _close(got, ref, 1e-6)


def test_signal_declines(kit):
    F = TensorProto.FLOAT
    d = kit.decline_of("DFT", [InputInfo(F, (2, 8, 3))], domain="", opset=20)
    assert d is not None and "last dim 3" in d.rejected
    d = kit.decline_of("DFT", [InputInfo(F, (2, 8, 2))], domain="", opset=20, onesided=1)
    assert d is not None and "onesided" in d.rejected
    d = kit.decline_of("STFT", [InputInfo(F, (2, 64, 1)), InputInfo(TensorProto.INT64, ())], domain="", opset=17)
    assert d is not None and "window" in d.rejected
    d = kit.decline_of("HannWindow", [InputInfo(F, ())], domain="", opset=17)
    assert d is not None and "FLOAT" in d.rejected
