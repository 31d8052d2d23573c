"""Typed tensors over device buffers: what device kernels receive as inputs and fill as outputs.

A DeviceTensor borrows or owns exactly what its DeviceBuffer does; freeing stays with the
allocator that made the buffer (see `_buffers`). Host <-> device transfers are explicit calls."""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np

from ._buffers import Allocator, Device, DeviceBuffer, copy_device_to_host, copy_host_to_device

__all__ = ["DeviceTensor", "empty_tensor", "tensor_from_host", "tensor_to_host"]


def _as_dtype(value: object) -> np.dtype:
    """np.dtype as an attrs converter: a Python function, so attrs need not parse np.dtype's text signature
    (6 ms on the first run that imports this module)."""
    return np.dtype(value)  # type: ignore[call-overload]


@attrs.define(eq=False)
class DeviceTensor:
    """`shape` and `dtype` over the first bytes of `buffer` (C-contiguous)."""

    buffer: DeviceBuffer
    shape: tuple[int, ...] = attrs.field(converter=lambda s: tuple(int(d) for d in s))
    dtype: np.dtype = attrs.field(converter=_as_dtype)

    def __attrs_post_init__(self) -> None:
        if self.nbytes > self.buffer.nbytes:
            raise ValueError(f"a tensor of shape {self.shape!r} and dtype {self.dtype} needs {self.nbytes} bytes; "
                             f"the buffer has {self.buffer.nbytes}")

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    @property
    def device(self) -> Device:
        return self.buffer.device

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def reshaped(self, shape: Sequence[int]) -> DeviceTensor:
        """A borrowed view with another shape over the same bytes."""
        shape = tuple(int(d) for d in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot view {self.shape!r} as {shape!r}: element counts differ")
        return DeviceTensor(self.buffer.view(0, self.nbytes), shape, self.dtype)

    def __repr__(self) -> str:
        return f"DeviceTensor({self.shape!r}, {self.dtype}, on {self.device})"


def empty_tensor(allocator: Allocator, shape: Sequence[int], dtype: object) -> DeviceTensor:
    """A new owned tensor (free it with `allocator.free(tensor.buffer)`)."""
    dt = np.dtype(dtype)  # type: ignore[call-overload]
    shape = tuple(int(d) for d in shape)
    return DeviceTensor(allocator.alloc(math.prod(shape) * dt.itemsize), shape, dt)


def tensor_from_host(allocator: Allocator, host: np.ndarray) -> DeviceTensor:
    """Explicit host -> device copy into a new owned tensor."""
    host = np.asarray(host, order="C")
    t = empty_tensor(allocator, host.shape, host.dtype)
    if t.nbytes:
        copy_host_to_device(host, t.buffer.view(0, t.nbytes))
    return t


def tensor_to_host(tensor: DeviceTensor, out: np.ndarray | None = None) -> np.ndarray:
    """Explicit device -> host copy, into `out` (C-contiguous, same shape and dtype) or a new array."""
    if out is None:
        out = np.empty(tensor.shape, tensor.dtype)
    elif out.shape != tensor.shape or out.dtype != tensor.dtype:
        raise ValueError(f"out is {out.shape!r} {out.dtype}, the tensor {tensor.shape!r} {tensor.dtype}; they must match")
    if tensor.nbytes:
        copy_device_to_host(tensor.buffer.view(0, tensor.nbytes), out)
    return out
