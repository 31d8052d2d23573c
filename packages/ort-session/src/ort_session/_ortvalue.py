"""`OrtValue`: ONNX Runtime's value handle (a tensor, or a sequence / map / optional as the model gives it).

A value is host-resident unless it is made for a session's device: `ortvalue_from_numpy(arr, "simgpu", 0,
session=sess)` (or "cuda", or `sess.ortvalue_on_device(arr)`) holds an `ort_abi.DeviceTensor` allocated from
that session's device allocator, so it counts against the device's budget while it lives (freed when the
value is garbage-collected). ONNX Runtime binds values to a device by name; here the session's provider owns
the device's allocator, hence the `session=` argument. Bound with `IOBinding`, such a value skips the run's
host<->device boundary copy. Without `session`, `device_type="cuda"` only records where the caller wants the
value (host memory; the session copies it in its boundary copies) and "simgpu" is refused.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

import ort_abi
import ort_graph

from ._errors import DeviceMemoryError, InvalidInputError

DEVICE_TYPES = ("cpu", "cuda", "simgpu")


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
    if kind == "simgpu" and device_id != 0:
        raise InvalidInputError(f"device_type 'simgpu', device_id {device_id!r}: the simulated GPU is device 0")
    if kind == "cuda":
        from ._ort_api import cuda_device_count

        count = cuda_device_count()
        if device_id >= count:
            raise InvalidInputError(f"device_type 'cuda', device_id {device_id}: this machine has {count} CUDA "
                                    "device(s); use device_type='cpu' (a session copies host values to its device)")
    return kind, int(device_id)


class OrtValue:
    """A value passed to or returned from `run_with_ortvalues` and `IOBinding`."""

    __slots__ = ("_value", "_device", "__weakref__")

    def __init__(self, value: Any, device_type: str = "cpu", device_id: int = 0) -> None:
        self._value = value
        self._device = _check_device(device_type, device_id) if not isinstance(value, ort_abi.DeviceTensor) \
            else (str(device_type).lower(), int(device_id))

    @staticmethod
    def _on_device(host: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype, device_type: str,
                   device_id: int, session: Any) -> OrtValue:
        """A value owning a DeviceTensor from `session`'s allocator for `device_type` (host data copied in)."""
        kind, index = _check_device(device_type, device_id)
        allocator = device_allocator(session, kind)
        try:
            tensor = ort_abi.empty_tensor(allocator, shape, dtype)
        except ort_abi.AllocationError as e:
            raise DeviceMemoryError(f"an OrtValue of {dtype}{list(shape)} on {kind!r} does not fit the device's "
                                    f"budget: {e}; free other device values or raise the budget") from e
        value = OrtValue(tensor, kind, index)
        weakref.finalize(value, _free_quietly, allocator, tensor.buffer)
        if host is not None and tensor.nbytes:
            ort_abi.copy_host_to_device(np.ascontiguousarray(host), tensor.buffer.view(0, tensor.nbytes))
        return value

    # -- construction (ONNX Runtime's static methods) ---------------------------------------
    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu", device_id: int = 0, *,
                            session: Any = None) -> OrtValue:
        """Wrap an array. ONNX Runtime shares a C-contiguous CPU array's memory; so does this (a
        non-contiguous array is copied first), so `update_inplace` and writes by a bound output are seen.
        With `session` and a device type other than "cpu": a copy in that session's device memory."""
        if not isinstance(numpy_obj, np.ndarray):
            raise InvalidInputError(f"ortvalue_from_numpy expects a numpy array, got {type(numpy_obj).__name__}; "
                                    "convert it with np.asarray(...)")
        if numpy_obj.dtype == object:
            numpy_obj = numpy_obj.astype(str)
        if session is not None and _check_device(device_type, device_id)[0] != "cpu":
            return OrtValue._on_device(numpy_obj, numpy_obj.shape, numpy_obj.dtype, device_type, device_id, session)
        _refuse_sessionless(device_type)
        return OrtValue(np.ascontiguousarray(numpy_obj), device_type, device_id)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0, *, session: Any = None) -> OrtValue:
        """An uninitialized tensor of this shape and numpy element type (ONNX Runtime leaves it uninitialized
        too; zero-filled here so that nothing stale is ever read)."""
        if isinstance(shape, str | bytes) or not all(isinstance(d, int | np.integer) and d >= 0 for d in shape):
            raise InvalidInputError(f"shape {shape!r}: expected a sequence of non-negative ints")
        try:
            dtype = np.dtype(element_type)
        except TypeError as e:
            raise InvalidInputError(f"element_type {element_type!r} is not a numpy type; e.g. np.float32") from e
        dims = tuple(int(d) for d in shape)
        if session is not None and _check_device(device_type, device_id)[0] != "cpu":
            return OrtValue._on_device(np.zeros(dims, dtype), dims, dtype, device_type, device_id, session)
        _refuse_sessionless(device_type)
        return OrtValue(np.zeros(tuple(int(d) for d in shape), dtype), device_type, device_id)

    # -- queries ----------------------------------------------------------------------------
    def numpy(self) -> Any:
        """The tensor as a numpy array (the value itself, not a copy: as ONNX Runtime for CPU values; a
        device value is copied to the host)."""
        if isinstance(self._value, ort_abi.DeviceTensor):
            return ort_abi.tensor_to_host(self._value)
        return self._value

    def is_on_device(self) -> bool:
        """True for a value in a device's memory (an `ort_abi.DeviceTensor`)."""
        return isinstance(self._value, ort_abi.DeviceTensor)

    def device_tensor(self) -> ort_abi.DeviceTensor:
        """The device tensor of a device value (refused for a host value)."""
        if not isinstance(self._value, ort_abi.DeviceTensor):
            raise InvalidInputError(f"{self!r} is a host value; make it with session=... for a device value")
        return self._value

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray | ort_abi.DeviceTensor)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list) and all(isinstance(v, np.ndarray) for v in self._value)

    def is_sparse_tensor(self) -> bool:
        return False

    def has_value(self) -> bool:
        return self._value is not None

    def _tensor(self, what: str) -> Any:
        if not isinstance(self._value, np.ndarray | ort_abi.DeviceTensor):
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
        """The address of the data: a host address, or the device pointer of a device value."""
        value = self._tensor("data_ptr")
        return int(value.ptr) if isinstance(value, ort_abi.DeviceTensor) else int(value.ctypes.data)

    def update_inplace(self, np_arr: Any) -> None:
        """Overwrite the tensor's elements with `np_arr` (same shape and dtype)."""
        arr = self._tensor("update_inplace")
        src = np.asarray(np_arr)
        if src.shape != arr.shape or src.dtype != arr.dtype:
            raise InvalidInputError(f"update_inplace: got {src.dtype}{list(src.shape)}, the value is "
                                    f"{arr.dtype}{list(arr.shape)}; give an array of the same shape and dtype")
        if isinstance(arr, ort_abi.DeviceTensor):
            if arr.nbytes:
                ort_abi.copy_host_to_device(np.ascontiguousarray(src), arr.buffer.view(0, arr.nbytes))
            return
        np.copyto(arr, src)

    def __repr__(self) -> str:
        if isinstance(self._value, np.ndarray | ort_abi.DeviceTensor):
            return f"OrtValue({self.data_type()}, shape={self.shape()}, device={self._device[0]}:{self._device[1]})"
        return f"OrtValue({type(self._value).__name__})"


def device_allocator(session: Any, kind: str) -> ort_abi.Allocator:
    """The allocator of `session`'s device `kind` (the provider's, held to the device's budget)."""
    allocators = getattr(getattr(session, "memory", None), "allocators", None)
    if allocators is None:
        raise InvalidInputError(f"session={session!r}: expected an ort_session.InferenceSession")
    if kind not in allocators:
        raise InvalidInputError(f"device_type {kind!r}: this session has no nodes on that device (its devices with "
                                f"their own memory are {sorted(allocators)!r}); place layers there or use 'cpu'")
    return allocators[kind]


def _refuse_sessionless(device_type: str) -> None:
    if str(device_type).lower() == "simgpu":
        raise InvalidInputError("device_type 'simgpu' needs session=...: the simulated GPU's memory belongs to a "
                                "session's provider")


def _free_quietly(allocator: ort_abi.Allocator, buffer: ort_abi.DeviceBuffer) -> None:
    try:
        allocator.free(buffer)
    except Exception:  # noqa: BLE001 - at collection time: the session (and its device) may be gone
        return


def as_feed(value: Any) -> Any:
    """A run's feed from an OrtValue (a device value feeds its DeviceTensor), or a numpy array / python value."""
    if isinstance(value, OrtValue):
        return value._value if value.is_on_device() else value.numpy()
    return value


__all__ = ["OrtValue", "type_string"]
