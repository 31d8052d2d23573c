"""OrtKernelApi kernel-context and value functions (Compute calls)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ort_graph import from_numpy_dtype

from ._context import check_output_shape
from ._fast_context import _POOL
from ._ffi import _ffi as ffi
from ._handles import HANDLES
from ._host_guard import status_api as _status_api
from ._views import ValueView

_ELEM_TYPES: dict[np.dtype, int] = {}


# ---- kernel context ---------------------------------------------------------------------------------------
def _ctx(ptr: Any) -> Any:
    return HANDLES.get("OrtKernelContext", ptr)


@_status_api
def KernelContext_GetInputCount(context: Any, out: Any) -> None:
    out[0] = _ctx(context).ctx.input_count


@_status_api
def KernelContext_GetOutputCount(context: Any, out: Any) -> None:
    out[0] = _ctx(context).ctx.output_count


@_status_api
def KernelContext_GetInput(context: Any, index: int, out: Any) -> None:
    v = _ctx(context)
    i = int(index)
    if i not in v.inputs:
        arr = v.ctx.input(i)
        if arr is not None and not isinstance(arr, np.ndarray):
            raise TypeError(f"input {i} is a {type(arr).__name__}, not a host numpy array; C kernels of this ABI "
                            "read host memory, so copy device tensors to the host first")
        v.inputs[i] = ffi.NULL if arr is None else v.child("OrtValue", ValueView(arr, writable=False))
    out[0] = v.inputs[i]


@_status_api
def KernelContext_GetOutput(context: Any, index: int, dims: Any, rank: int, out: Any) -> None:
    if rank and dims == ffi.NULL:
        raise ValueError(f"dims is NULL but rank is {rank}")
    shape = tuple(dims[0:rank]) if rank else ()
    check_output_shape(int(index), shape)  # before the context: a replayed C step is refused, not sent to Python
    v = _ctx(context)
    arr = v.ctx.output(int(index), shape)
    i = int(index)
    if i not in v.outputs:
        described = _POOL[0].describe_output(v, i, arr) if v.fast is not None else None
        v.outputs[i] = described if described is not None else v.child("OrtValue", ValueView(arr, writable=True))
    out[0] = v.outputs[i]


@_status_api
def KernelContext_GetScratchBuffer(context: Any, nbytes: int, out: Any) -> None:
    v = _ctx(context)
    buf = v.ctx.scratch(int(nbytes))
    view = ValueView(buf, writable=True)
    v.keep[("scratch", len(v.keep))] = view
    out[0] = view.pointer()


@_status_api
def KernelContext_GetPreallocatedWorkspace(context: Any, slot_id: int, requested: int, out: Any) -> None:
    v = _ctx(context)
    buf = v.ctx.preallocated_workspace(int(slot_id), int(requested))
    if buf is None:
        out[0] = ffi.NULL
        return
    view = ValueView(buf, writable=True)
    v.keep[("workspace", len(v.keep))] = view
    out[0] = view.pointer() if buf.nbytes else ffi.cast("void*", ffi.from_buffer(v.ctx.workspace[int(slot_id)]))


@_status_api
def Value_GetTensorData(value: Any, out: Any) -> None:
    out[0] = HANDLES.get("OrtValue", value).pointer()


@_status_api
def Value_GetTensorMutableData(value: Any, out: Any) -> None:
    v = HANDLES.get("OrtValue", value)
    if not v.writable:
        raise ValueError("this value is a kernel input, which is read-only; use Value_GetTensorData for inputs")
    out[0] = v.pointer()


@_status_api
def Value_GetElementType(value: Any, out: Any) -> None:
    dtype = HANDLES.get("OrtValue", value).array.dtype
    elem = _ELEM_TYPES.get(dtype)
    if elem is None:
        elem = _ELEM_TYPES[dtype] = from_numpy_dtype(dtype)
    out[0] = elem


@_status_api
def Value_GetShape(value: Any, dims: Any, rank: Any) -> None:
    v = HANDLES.get("OrtValue", value)
    dims[0], rank[0] = v.int64s("shape", v.array.shape), v.array.ndim


@_status_api
def Value_GetElementCount(value: Any, out: Any) -> None:
    out[0] = int(HANDLES.get("OrtValue", value).array.size)
