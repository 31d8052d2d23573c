"""`OrtValue`: ONNX Runtime's value handle (a tensor, or a sequence / map / optional as the model gives it).

Values are host-resident here. `device_type="cuda"` records where the caller wants the value (a CUDA
device must be present: it is refused otherwise); the session copies it to its device in the run's
boundary copies, as it does with a numpy feed. Device-resident I/O (a bound buffer in device memory,
no host round trip) is issue 16's work; until then `data_ptr()` is a host address for every value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import ort_graph

from ._errors import InvalidInputError

DEVICE_TYPES = ("cpu", "cuda")


def type_string(dtype: int) -> str:
    """ONNX Runtime's type string of an ONNX element type: 1 -> 'tensor(float)'."""
    import onnx

    if not dtype:
        return "tensor(undefined)"
    return f"tensor({onnx.TensorProto.DataType.Name(dtype).lower()})"


def _check_device(device_type: Any, device_id: Any) -> tuple[str, int]:
    kind = device_type.lower() if isinstance(device_type, str) else device_type
    if kind not in DEVICE_TYPES:
        raise InvalidInputError(f"device_type {device_type!r}: expected one of {list(DEVICE_TYPES)!r}")
    if isinstance(device_id, bool) or not isinstance(device_id, int | np.integer) or device_id < 0:
        raise InvalidInputError(f"device_id {device_id!r}: expected a non-negative int")
    if kind == "cuda":
        from ._ort_api import cuda_device_count

        count = cuda_device_count()
        if device_id >= count:
            raise InvalidInputError(f"device_type 'cuda', device_id {device_id}: this machine has {count} CUDA "
                                    "device(s); use device_type='cpu' (a session copies host values to its device)")
    return kind, int(device_id)


class OrtValue:
    """A value passed to or returned from `run_with_ortvalues` and `IOBinding`."""

    __slots__ = ("_value", "_device")

    def __init__(self, value: Any, device_type: str = "cpu", device_id: int = 0) -> None:
        self._value = value
        self._device = _check_device(device_type, device_id)

    # -- construction (ONNX Runtime's static methods) ---------------------------------------
    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """Wrap an array. ONNX Runtime shares a C-contiguous CPU array's memory; so does this (a
        non-contiguous array is copied first), so `update_inplace` and writes by a bound output are seen."""
        if not isinstance(numpy_obj, np.ndarray):
            raise InvalidInputError(f"ortvalue_from_numpy expects a numpy array, got {type(numpy_obj).__name__}; "
                                    "convert it with np.asarray(...)")
        if numpy_obj.dtype == object:
            numpy_obj = numpy_obj.astype(str)
        return OrtValue(np.ascontiguousarray(numpy_obj), device_type, device_id)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0) -> OrtValue:
        """An uninitialized tensor of this shape and numpy element type (ONNX Runtime leaves it uninitialized
        too; zero-filled here so that nothing stale is ever read)."""
        if isinstance(shape, str | bytes) or not all(isinstance(d, int | np.integer) and d >= 0 for d in shape):
            raise InvalidInputError(f"shape {shape!r}: expected a sequence of non-negative ints")
        try:
            dtype = np.dtype(element_type)
        except TypeError as e:
            raise InvalidInputError(f"element_type {element_type!r} is not a numpy type; e.g. np.float32") from e
        return OrtValue(np.zeros(tuple(int(d) for d in shape), dtype), device_type, device_id)

    # -- queries ----------------------------------------------------------------------------
    def numpy(self) -> Any:
        """The tensor as a numpy array (the value itself, not a copy: as ONNX Runtime for CPU values)."""
        return self._value

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list) and all(isinstance(v, np.ndarray) for v in self._value)

    def is_sparse_tensor(self) -> bool:
        return False

    def has_value(self) -> bool:
        return self._value is not None

    def _tensor(self, what: str) -> np.ndarray:
        if not isinstance(self._value, np.ndarray):
            raise InvalidInputError(f"OrtValue.{what}() needs a tensor; this value is a {type(self._value).__name__}")
        return self._value

    def shape(self) -> list[int]:
        return list(self._tensor("shape").shape)

    def data_type(self) -> str:
        """'tensor(float)', 'tensor(int64)', ... ('seq(tensor(float))' for a sequence of tensors)."""
        if self.is_tensor_sequence() and self._value:
            return f"seq({type_string(ort_graph.from_numpy_dtype(self._value[0].dtype))})"
        arr = self._tensor("data_type")
        return type_string(ort_graph.from_numpy_dtype(arr.dtype))

    def element_type(self) -> int:
        """The ONNX element type (1 for float, 7 for int64...), as ONNX Runtime returns it."""
        return int(ort_graph.from_numpy_dtype(self._tensor("element_type").dtype))

    def device_name(self) -> str:
        return self._device[0]

    def tensor_size_in_bytes(self) -> int:
        return int(self._tensor("tensor_size_in_bytes").nbytes)

    def data_ptr(self) -> int:
        """The host address of the data (see the module docstring: values are host-resident)."""
        return int(self._tensor("data_ptr").ctypes.data)

    def update_inplace(self, np_arr: Any) -> None:
        """Overwrite the tensor's elements with `np_arr` (same shape and dtype)."""
        arr = self._tensor("update_inplace")
        src = np.asarray(np_arr)
        if src.shape != arr.shape or src.dtype != arr.dtype:
            raise InvalidInputError(f"update_inplace: got {src.dtype}{list(src.shape)}, the value is "
                                    f"{arr.dtype}{list(arr.shape)}; give an array of the same shape and dtype")
        np.copyto(arr, src)

    def __repr__(self) -> str:
        if isinstance(self._value, np.ndarray):
            return f"OrtValue({self.data_type()}, shape={self.shape()}, device={self._device[0]}:{self._device[1]})"
        return f"OrtValue({type(self._value).__name__})"


def as_feed(value: Any) -> Any:
    """A run's feed from an OrtValue (or a numpy array / python value, passed through)."""
    return value.numpy() if isinstance(value, OrtValue) else value


__all__ = ["OrtValue", "type_string"]
