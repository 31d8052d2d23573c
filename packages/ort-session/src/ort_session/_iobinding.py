"""`IOBinding`: ONNX Runtime's bound inputs and outputs (`session.io_binding()`, `run_with_iobinding`).

Host values: an input bound to a buffer is read from it when the run starts; an output bound to an OrtValue
or a buffer is written into it when the run ends. Device values (an OrtValue made with `session=` /
`session.ortvalue_on_device`, in the session's device memory): a bound input is read on the device (its
MemcpyFromHost becomes one device-to-device copy into the planned block); an output bound with
`bind_output(name, "simgpu")` (or "cuda") or to a device OrtValue stays on the device (its MemcpyToHost
becomes one device-to-device copy out of the planned block; `copy_outputs_to_cpu()` copies it to the host).
So a decode loop that binds its KV cache outputs and feeds them back moves no KV bytes to the host; the
run's `last_run_stats` counts host<->device copies. A raw device pointer (`bind_input(..., 'cuda', ...,
ptr)`) is refused: bind a device OrtValue instead.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

import ort_abi

from ._errors import InvalidInputError
from ._ortvalue import OrtValue, _check_device, _free_quietly, as_feed, device_allocator


def _host_view(name: str, device_type: str, element_type: Any, shape: Sequence[int], buffer_ptr: int) -> np.ndarray:
    """A numpy view of `prod(shape)` elements at a host address the caller owns (as ONNX Runtime trusts it)."""
    kind, _ = _check_device(device_type, 0)
    if kind != "cpu":
        raise InvalidInputError(f"binding {name!r} to a raw {kind} device pointer: its owner and size are unknown; bind "
                                "a device OrtValue (session.ortvalue_on_device(arr)) with bind_ortvalue_input/output")
    if isinstance(buffer_ptr, bool) or not isinstance(buffer_ptr, int | np.integer) or buffer_ptr <= 0:
        raise InvalidInputError(f"binding {name!r}: buffer_ptr {buffer_ptr!r} is not a host address (use arr.ctypes.data)")
    try:
        dtype = np.dtype(element_type)
    except TypeError as e:
        raise InvalidInputError(f"binding {name!r}: element_type {element_type!r} is not a numpy type") from e
    if isinstance(shape, str | bytes) or not all(isinstance(d, int | np.integer) and d >= 0 for d in shape):
        raise InvalidInputError(f"binding {name!r}: shape {shape!r} must be a sequence of non-negative ints")
    dims = tuple(int(d) for d in shape)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dtype, count=int(np.prod(dims, dtype=np.int64))).reshape(dims)


class IOBinding:
    """Inputs and outputs bound to a session, for `session.run_with_iobinding(binding)`."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, OrtValue | None] = {}  # None: the run allocates it
        self._devices: dict[str, tuple[str, int]] = {}  # where an output bound without a buffer is reported
        self._results: list[OrtValue] = []

    def _check_name(self, name: str, names: Sequence[str], kind: str) -> None:
        if name not in names:
            raise InvalidInputError(f"cannot bind {kind} {name!r}: the model's {kind}s are {list(names)!r}")

    # -- inputs -------------------------------------------------------------------------------
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind a host array (read when the run starts: later changes to it before the run are seen)."""
        self._check_name(name, self._session.input_names, "input")
        self._inputs[name] = np.asarray(arr_on_cpu)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int],
                   buffer_ptr: int) -> None:
        """Bind `shape` elements of `element_type` at host address `buffer_ptr` (the caller keeps it alive)."""
        self._check_name(name, self._session.input_names, "input")
        _check_device(device_type, device_id)
        self._inputs[name] = _host_view(name, device_type, element_type, shape, buffer_ptr)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._check_name(name, self._session.input_names, "input")
        if not isinstance(ortvalue, OrtValue):
            raise InvalidInputError(f"bind_ortvalue_input({name!r}, ...) expects an OrtValue, got "
                                    f"{type(ortvalue).__name__}")
        self._check_device_value(name, ortvalue)
        self._inputs[name] = ortvalue

    def _check_device_value(self, name: str, ortvalue: OrtValue) -> None:
        """A device value must live in this session's memory of that device."""
        if ortvalue.is_on_device():
            allocator = device_allocator(self._session, ortvalue.device_name())
            if ortvalue.device_tensor().device != allocator.device:
                raise InvalidInputError(f"binding {name!r}: {ortvalue!r} is in another device's memory; make it with "
                                        "this session (session.ortvalue_on_device(arr))")

    # -- outputs ------------------------------------------------------------------------------
    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        """Bind an output: to a host buffer (element_type, shape, buffer_ptr all given), written there after the
        run; or to a device only (`get_outputs()` then returns values the run allocated)."""
        self._check_name(name, self._session.output_names, "output")
        kind, index = _check_device(device_type, device_id)
        if buffer_ptr is None:
            self._outputs[name], self._devices[name] = None, (kind, index)
            return
        if element_type is None or shape is None:
            raise InvalidInputError(f"bind_output({name!r}, buffer_ptr=...) needs element_type and shape too")
        self._outputs[name] = OrtValue(_host_view(name, kind, element_type, shape, buffer_ptr), kind, index)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """The run writes the output into this OrtValue's memory (shape and type must match the output)."""
        self._check_name(name, self._session.output_names, "output")
        if not isinstance(ortvalue, OrtValue):
            raise InvalidInputError(f"bind_ortvalue_output({name!r}, ...) expects an OrtValue, got "
                                    f"{type(ortvalue).__name__}")
        self._check_device_value(name, ortvalue)
        self._outputs[name] = ortvalue

    # -- results ------------------------------------------------------------------------------
    def get_outputs(self) -> list[OrtValue]:
        """The bound outputs of the last run, in binding order."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> list[OrtValue]:
        return self.get_outputs()

    def copy_outputs_to_cpu(self) -> list[Any]:
        """The last run's bound outputs as numpy arrays (copies)."""
        return [np.array(v.numpy()) if v.is_tensor() else v.numpy() for v in self._results]

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._devices.clear()
        self._results = []

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: bound inputs are host memory, read when the run starts."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: outputs are in place when run_with_iobinding returns."""

    # -- the run ------------------------------------------------------------------------------
    def run(self, run_options: Any = None) -> None:
        """Run the session on the bound inputs and fill the bound outputs (the session calls this)."""
        if not self._outputs:
            raise InvalidInputError("no output is bound; call bind_output(name) or bind_ortvalue_output(name, value) "
                                    f"for some of {self._session.output_names!r}")
        names = list(self._outputs)
        feeds = {n: as_feed(v) for n, v in self._inputs.items()}
        on_device = self._device_outputs()
        produced = self._session.run_bound(names, feeds, on_device, run_options)
        for name, target in self._outputs.items():  # check every bound buffer before writing any
            if name in on_device:
                continue
            value = produced[names.index(name)]
            if target is not None and target.is_tensor() and (
                    not isinstance(value, np.ndarray) or value.shape != tuple(target.shape())
                    or value.dtype != target.numpy().dtype):
                got = f"{value.dtype}{list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
                raise InvalidInputError(f"output {name!r} is {got} but its bound buffer is "
                                        f"{target.numpy().dtype}{target.shape()}; bind a value of that shape and type, "
                                        "or bind_output(name) to let the run allocate it")
        results = []
        for name, value in zip(names, produced):
            target = self._outputs[name]
            if name in on_device:
                results.append(target if target is not None else self._owned(value, name))
            elif target is None:
                results.append(OrtValue(value, *self._devices.get(name, ("cpu", 0))))
            else:
                np.copyto(target.numpy(), value)
                results.append(target)
        self._results = results

    def _device_outputs(self) -> dict[str, Any]:
        """Outputs kept on the device: name -> the bound DeviceTensor, or the allocator of a new one."""
        out: dict[str, Any] = {}
        allocators = self._session.memory.allocators
        for name, target in self._outputs.items():
            if target is not None and target.is_on_device():
                out[name] = target.device_tensor()
            elif target is None and self._devices[name][0] in allocators:
                out[name] = allocators[self._devices[name][0]]
        return out

    def _owned(self, tensor: ort_abi.DeviceTensor, name: str) -> OrtValue:
        """A device output the run allocated: an OrtValue that frees it when collected."""
        value = OrtValue(tensor, *self._devices[name])
        weakref.finalize(value, _free_quietly, tensor.buffer.allocator, tensor.buffer)
        return value


__all__ = ["IOBinding"]
