"""Signal ops: DFT (17, 20), STFT (17), Hann/Hamming/BlackmanWindow (17) and MelWeightMatrix (17).

Complex tensors use ONNX's layout: a trailing axis of 2 (real, imaginary); real signals have a trailing 1.
DFT pads or truncates the signal axis to dft_length; onesided keeps floor(n/2) + 1 bins; inverse divides by
n, and inverse + onesided is the inverse real FFT (a real output, trailing axis 1) as the ONNX reference
defines it. Transforms run through numpy.fft at the input's precision (float32 for float16).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, helper

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16})
_INTS = frozenset({TensorProto.INT32, TensorProto.INT64})


def _scalar(x: np.ndarray | None) -> int | None:
    return None if x is None else int(np.asarray(x).reshape(-1)[0])


def _to_complex(x: np.ndarray) -> np.ndarray:
    """Complex values of the trailing (real, imag) axis at the input's precision (complex64 for float32/16)."""
    xf = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
    if x.shape[-1] == 1:
        return xf[..., 0]
    return (xf[..., 0] + 1j * xf[..., 1]).astype(np.complex128 if x.dtype == np.float64 else np.complex64)


def _from_complex(c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1).astype(dtype)


def dft(x: np.ndarray, length: int | None, axis: int, inverse: bool, onesided: bool) -> np.ndarray:
    """ONNX DFT of x (..., 1|2) along `axis` (an axis of x, not the trailing complex one)."""
    axis = axis % x.ndim
    sig = _to_complex(x)
    if inverse and onesided:
        n = length if length is not None else 2 * (x.shape[axis] - 1)
        return np.fft.irfft(sig, n=n, axis=axis)[..., None].astype(x.dtype)
    n = length if length is not None else x.shape[axis]
    out = np.fft.ifft(sig, n=n, axis=axis) if inverse else np.fft.fft(sig, n=n, axis=axis)
    if onesided:
        out = np.take(out, np.arange(n // 2 + 1), axis=axis)
    return _from_complex(out, x.dtype)


class _DftBase(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        x = inputs[0]
        if x.dtype and x.dtype not in _FLOATS:
            return Decline(rejected=f"input 0 dtype {dtype_name(x.dtype)}", accepts="float16, float32, double")
        if x.shape is not None and x.shape and isinstance(x.shape[-1], int) and x.shape[-1] not in (1, 2):
            return Decline(rejected=f"input last dim {x.shape[-1]!r}", accepts="1 (real) or 2 (complex)",
                           remedy="add a trailing axis of 1 to a real signal")
        if int(node.attr("onesided", 0)) and x.shape is not None and x.shape and x.shape[-1] == 2 \
                and not int(node.attr("inverse", 0)):
            return Decline(rejected="onesided=1 with complex input", accepts="onesided=1 with real input",
                           remedy="use onesided=0 for complex signals")
        return None


@register("DFT", since=17, until=19)
class DFT17(_DftBase):
    """DFT with the signal axis as attribute (default 1)."""

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        length = _scalar(inputs[1]) if len(inputs) > 1 else None
        return [dft(inputs[0], length, int(a.get("axis", 1)), bool(a.get("inverse", 0)), bool(a.get("onesided", 0)))]


@register("DFT", since=20)
class DFT20(_DftBase):
    """DFT with the signal axis as input 2 (default -2)."""

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        length = _scalar(inputs[1]) if len(inputs) > 1 else None
        axis = _scalar(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else -2
        return [dft(inputs[0], length, axis, bool(a.get("inverse", 0)), bool(a.get("onesided", 0)))]


@register("STFT", since=17)
class STFT(OpImpl):
    """Frames of frame_length every frame_step, windowed, DFT'd: output (batch, frames, bins, 2)."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        x = inputs[0]
        if x.dtype and x.dtype not in _FLOATS:
            return Decline(rejected=f"signal dtype {dtype_name(x.dtype)}", accepts="float16, float32, double")
        window = inputs[2] if len(inputs) > 2 else InputInfo(0, None, False)
        frame_len = inputs[3] if len(inputs) > 3 else InputInfo(0, None, False)
        if not window.present and not frame_len.present:
            return Decline(rejected="neither window nor frame_length given", accepts="one of them",
                           remedy="give a window or a frame_length input")
        if int(node.attr("onesided", 1)) and x.shape is not None and len(x.shape) == 3 and x.shape[2] == 2:
            return Decline(rejected="onesided=1 with complex signal", accepts="onesided=0 for complex signals",
                           remedy="set onesided=0")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x = inputs[0]
        step = _scalar(inputs[1])
        window = inputs[2] if len(inputs) > 2 else None
        frame_len = _scalar(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else None
        if frame_len is None:
            frame_len = window.shape[0]
        if window is None:
            window = np.ones(frame_len, np.float64)
        n_frames = 1 + (x.shape[1] - frame_len) // step
        idx = np.arange(n_frames)[:, None] * step + np.arange(frame_len)[None, :]  # (frames, frame_len)
        sig = _to_complex(x)  # (batch, length)
        frames = sig[:, idx] * window.astype(sig.real.dtype)[None, None, :]
        out = np.fft.fft(frames, n=frame_len, axis=-1)
        if int(node.attr("onesided", 1)):
            out = out[..., : frame_len // 2 + 1]
        return [_from_complex(out, x.dtype)]


class _WindowBase(OpImpl):
    a0 = a1 = a2 = 0.0

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        if inputs[0].dtype and inputs[0].dtype not in _INTS:
            return Decline(rejected=f"size dtype {dtype_name(inputs[0].dtype)}", accepts="int32, int64")
        out = int(node.attr("output_datatype", TensorProto.FLOAT))
        if out in (TensorProto.STRING, TensorProto.BFLOAT16, TensorProto.COMPLEX64, TensorProto.COMPLEX128, 0):
            return Decline(rejected=f"output_datatype={out!r} ({dtype_name(out)})", accepts="numeric types but bfloat16",
                           remedy="use float32 and Cast afterwards")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        size = _scalar(inputs[0])
        periodic = int(node.attr("periodic", 1))
        denom = size if periodic else size - 1
        n = np.arange(size, dtype=np.float64)
        ang = 2 * np.pi * n / denom if denom else np.zeros(size)
        w = self.a0 - self.a1 * np.cos(ang) + self.a2 * np.cos(2 * ang)
        dtype = helper.tensor_dtype_to_np_dtype(int(node.attr("output_datatype", TensorProto.FLOAT)))
        return [w.astype(dtype)]


@register("HannWindow", since=17)
class HannWindow(_WindowBase):
    a0, a1 = 0.5, 0.5


@register("HammingWindow", since=17)
class HammingWindow(_WindowBase):
    a0, a1 = 25 / 46, 21 / 46


@register("BlackmanWindow", since=17)
class BlackmanWindow(_WindowBase):
    a0, a1, a2 = 0.42, 0.5, 0.08


@register("MelWeightMatrix", since=17)
class MelWeightMatrix(OpImpl):
    """Triangular mel filters (num_spectrogram_bins = dft_length // 2 + 1, num_mel_bins), as the ONNX reference."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        out = int(node.attr("output_datatype", TensorProto.FLOAT))
        if out in (TensorProto.STRING, TensorProto.BFLOAT16, 0):
            return Decline(rejected=f"output_datatype={out!r}", accepts="numeric types but bfloat16",
                           remedy="use float32 and Cast afterwards")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        num_mel, dft_len = _scalar(inputs[0]), _scalar(inputs[1])
        rate = _scalar(inputs[2])
        lo, hi = float(np.asarray(inputs[3]).reshape(-1)[0]), float(np.asarray(inputs[4]).reshape(-1)[0])
        bins = dft_len // 2 + 1
        lo_mel = 2595 * np.log1p(lo / 700) / np.log(10)
        hi_mel = 2595 * np.log1p(hi / 700) / np.log(10)
        step = (hi_mel - lo_mel) / (num_mel + 2)
        mel = np.arange(num_mel + 2) * step + lo_mel
        hz = 700 * np.expm1(mel / 2595 * np.log(10))
        points = (((dft_len + 1) * hz) // rate).astype(np.int64)
        out = np.zeros((bins, num_mel), np.float64)
        j = np.arange(bins)[:, None]
        left, center, right = points[None, :-2], points[None, 1:-1], points[None, 2:]
        up = (j >= left) & (j <= center) & (center > left)
        out = np.where(up, (j - left) / np.maximum(center - left, 1), out)
        down = (j >= center) & (j < right)
        out = np.where(down, (right - j) / np.maximum(right - center, 1), out)
        spike = (center == left) & (j == center)
        out = np.where(spike, 1.0, out)
        dtype = helper.tensor_dtype_to_np_dtype(int(node.attr("output_datatype", TensorProto.FLOAT)))
        return [out.astype(dtype)]


__all__ = ["DFT17", "DFT20", "STFT", "BlackmanWindow", "HammingWindow", "HannWindow", "MelWeightMatrix", "dft"]
