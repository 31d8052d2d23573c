"""The OrtKernelApi table's functions, implemented in Python (`extern "Python"` in the cffi bridge).

Every status-returning function turns a Python exception into an error status for the C caller, so
nothing C does with the API can raise through C frames. Queries go through `HostApi` / the context:
the same code Python kernels use."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ._errors import AbiError, DuplicateKernelError, HandleError, KernelDefError
from ._ffi import _ffi as ffi
from ._handles import HANDLES
from ._hostapi import HOST_API, AttributeError_, typed_attribute
from ._kerneldef import KernelDefBuilder
from ._status import STATUSES, ErrorCode
from ._views import EpView, ValueView

_log = logging.getLogger("ort_abi")
_PREFIX = "_ort_host_"
_INVALID = (HandleError, KernelDefError, AttributeError_, IndexError, ValueError, TypeError, KeyError)
_BAD_STATUS_MSG = ffi.new("char[]", b"(not a live OrtStatus: released already, or not made by CreateStatus)")


def _s(p: Any) -> str:
    if p == ffi.NULL:
        raise ValueError("a required string argument is NULL")
    return ffi.string(p).decode("utf-8", "replace")


def _status_api(fn: Callable[..., None]) -> Callable[..., None]:
    name = fn.__name__

    def wrapper(*args: Any) -> Any:
        try:
            fn(*args)
            return ffi.NULL
        except DuplicateKernelError as e:
            return STATUSES.create(ErrorCode.INVALID_ARGUMENT, f"{name}: {e}")
        except _INVALID as e:
            return STATUSES.create(ErrorCode.INVALID_ARGUMENT, f"{name}: {e}")
        except AbiError as e:
            return STATUSES.create(ErrorCode.FAIL, f"{name}: {e}")
        except Exception as e:  # never raise through C frames
            return STATUSES.create(ErrorCode.RUNTIME_EXCEPTION, f"{name}: {e!r}")

    wrapper.__name__ = name
    ffi.def_extern(name=_PREFIX + name, onerror=_on_error)(wrapper)
    return fn


def _on_error(exc_type: Any, value: Any, tb: Any) -> None:
    _log.error("host API callback failed outside its guard: %r", value)


def _plain_api(fn: Callable[..., Any]) -> Callable[..., Any]:
    ffi.def_extern(name=_PREFIX + fn.__name__, onerror=_on_error)(fn)
    return fn


# ---- statuses --------------------------------------------------------------------------------------
@_plain_api
def CreateStatus(code: int, msg: Any) -> Any:
    return STATUSES.create(int(code), ffi.string(msg).decode("utf-8", "replace") if msg != ffi.NULL else "")


@_plain_api
def GetErrorCode(status: Any) -> int:
    record = STATUSES.get(status)
    return ErrorCode.RUNTIME_EXCEPTION if record is None else record.code


@_plain_api
def GetErrorMessage(status: Any) -> Any:
    record = STATUSES.get(status)
    return _BAD_STATUS_MSG if record is None else record.c_message


@_plain_api
def ReleaseStatus(status: Any) -> None:
    STATUSES.release(status)


# ---- kernel definitions and the registry ---------------------------------------------------------------
@_status_api
def CreateKernelDefBuilder(out: Any) -> None:
    out[0] = HANDLES.new("OrtKernelDefBuilder", KernelDefBuilder())


def _release_quietly(kind: str, ptr: Any) -> None:
    try:
        HANDLES.release(kind, ptr)
    except HandleError as e:
        STATUSES.misuse.append(str(e))
        _log.warning("Release%s: %s", kind[3:], e)


@_plain_api
def ReleaseKernelDefBuilder(builder: Any) -> None:
    _release_quietly("OrtKernelDefBuilder", builder)


@_status_api
def KernelDefBuilder_SetOperatorType(builder: Any, op_type: Any) -> None:
    HANDLES.get("OrtKernelDefBuilder", builder).op_type(_s(op_type))


@_status_api
def KernelDefBuilder_SetDomain(builder: Any, domain: Any) -> None:
    HANDLES.get("OrtKernelDefBuilder", builder).domain(_s(domain))


@_status_api
def KernelDefBuilder_SetSinceVersion(builder: Any, start: int, end: int) -> None:
    HANDLES.get("OrtKernelDefBuilder", builder).since_version(int(start), None if end == 0 else int(end))


@_status_api
def KernelDefBuilder_SetExecutionProvider(builder: Any, ep_name: Any) -> None:
    HANDLES.get("OrtKernelDefBuilder", builder).ep(_s(ep_name))


@_status_api
def KernelDefBuilder_AddTypeConstraint(builder: Any, name: Any, elem_types: Any, count: int) -> None:
    if count and elem_types == ffi.NULL:
        raise ValueError(f"elem_types is NULL but count is {count}")
    HANDLES.get("OrtKernelDefBuilder", builder).type_constraint(_s(name), [elem_types[i] for i in range(count)])


@_status_api
def KernelDefBuilder_Build(builder: Any, out: Any) -> None:
    out[0] = HANDLES.new("OrtKernelDef", HANDLES.get("OrtKernelDefBuilder", builder).build())


@_plain_api
def ReleaseKernelDef(kernel_def: Any) -> None:
    _release_quietly("OrtKernelDef", kernel_def)


def _add(registry: Any, kernel_def: Any, create_func: Any, state: Any, estimate_func: Any) -> None:
    from ._ckernel import CCreateFunc, CEstimateFunc

    scope = HANDLES.get("OrtKernelRegistry", registry)
    kd = HANDLES.get("OrtKernelDef", kernel_def)
    try:
        if create_func == ffi.NULL:
            raise ValueError(f"create_func is NULL for {kd.describe()}; pass the kernel's create function")
        estimate = CEstimateFunc(estimate_func, scope.library) if estimate_func != ffi.NULL else None
        entry = scope.registry.add_kernel_v2(kd, CCreateFunc(create_func, scope.library), state, estimate,
                                             language="c", library=scope.library)
    except Exception as e:
        scope.errors.append(e)
        raise
    scope.added.append(entry)


@_status_api
def KernelRegistry_AddKernel(registry: Any, kernel_def: Any, create_func: Any, state: Any) -> None:
    _add(registry, kernel_def, create_func, state, ffi.NULL)


@_status_api
def KernelRegistry_AddKernelV2(registry: Any, kernel_def: Any, create_func: Any, state: Any, estimate: Any) -> None:
    _add(registry, kernel_def, create_func, state, estimate)


# ---- node queries ---------------------------------------------------------------------------------------
def _node(ptr: Any) -> Any:
    return HANDLES.get("OrtNode", ptr)


@_status_api
def Node_GetName(node: Any, out: Any) -> None:
    v = _node(node)
    out[0] = v.cstr("name", HOST_API.node_name(v.node))


@_status_api
def Node_GetOperatorType(node: Any, out: Any) -> None:
    v = _node(node)
    out[0] = v.cstr("op_type", HOST_API.node_op_type(v.node))


@_status_api
def Node_GetDomain(node: Any, out: Any) -> None:
    v = _node(node)
    out[0] = v.cstr("domain", HOST_API.node_domain(v.node))


@_status_api
def Node_GetInputCount(node: Any, out: Any) -> None:
    out[0] = HOST_API.node_input_count(_node(node).node)


@_status_api
def Node_GetOutputCount(node: Any, out: Any) -> None:
    out[0] = HOST_API.node_output_count(_node(node).node)


@_status_api
def Node_HasInput(node: Any, index: int, out: Any) -> None:
    out[0] = int(HOST_API.node_has_input(_node(node).node, int(index)))


@_status_api
def Node_GetInputShape(node: Any, index: int, shape: Any, rank: Any) -> None:
    v = _node(node)
    dims = HOST_API.node_input_shape(v.node, int(index))
    if dims is None:
        shape[0], rank[0] = ffi.NULL, 0
    else:
        shape[0], rank[0] = v.int64s(("shape", int(index)), dims), len(dims)


@_status_api
def Node_GetInputElementType(node: Any, index: int, out: Any) -> None:
    out[0] = HOST_API.node_input_element_type(_node(node).node, int(index))


def _attrs_of_node(v: Any) -> tuple[dict[str, Any], str]:
    return {n: a.value for n, a in v.node.attributes.items()}, f"node {v.node.name!r}"


def _attrs_of_info(v: Any) -> tuple[dict[str, Any], str]:
    return dict(v.info.attributes), f"node {v.info.node_name!r}"


def _get_attr(v: Any, source: Callable[[Any], tuple[dict[str, Any], str]], name: Any, kind: str, out: Any,
              count: Any = None) -> None:
    attributes, owner = source(v)
    key = _s(name)
    value = typed_attribute(attributes, key, kind, owner)
    if kind == "ints":
        out[0], count[0] = v.int64s(("attr", key), value), len(value)
    elif kind == "string":
        out[0] = v.cstr(("attr", key), value)
    else:
        out[0] = value


@_status_api
def Node_HasAttribute(node: Any, name: Any, out: Any) -> None:
    out[0] = int(_s(name) in _node(node).node.attributes)


@_status_api
def Node_GetAttributeInt(node: Any, name: Any, out: Any) -> None:
    _get_attr(_node(node), _attrs_of_node, name, "int", out)


@_status_api
def Node_GetAttributeInts(node: Any, name: Any, values: Any, count: Any) -> None:
    _get_attr(_node(node), _attrs_of_node, name, "ints", values, count)


@_status_api
def Node_GetAttributeFloat(node: Any, name: Any, out: Any) -> None:
    _get_attr(_node(node), _attrs_of_node, name, "float", out)


@_status_api
def Node_GetAttributeString(node: Any, name: Any, out: Any) -> None:
    _get_attr(_node(node), _attrs_of_node, name, "string", out)


# ---- the EP ---------------------------------------------------------------------------------------------
@_status_api
def Ep_GetName(ep: Any, out: Any) -> None:
    v = HANDLES.get("OrtEp", ep)
    out[0] = v.cstr("name", HOST_API.ep_name(v.ep))


@_status_api
def Ep_GetDeviceType(ep: Any, out: Any) -> None:
    v = HANDLES.get("OrtEp", ep)
    out[0] = v.cstr("device_type", HOST_API.ep_device_type(v.ep))


@_status_api
def Ep_GetDeviceId(ep: Any, out: Any) -> None:
    out[0] = HOST_API.ep_device_id(HANDLES.get("OrtEp", ep).ep)


@_status_api
def Ep_GetDeviceProperty(ep: Any, key: Any, out: Any) -> None:
    out[0] = HOST_API.ep_device_property(HANDLES.get("OrtEp", ep).ep, _s(key))


# ---- kernel info ----------------------------------------------------------------------------------------
def _info(ptr: Any) -> Any:
    return HANDLES.get("OrtKernelInfo", ptr)


@_status_api
def KernelInfo_GetNodeName(info: Any, out: Any) -> None:
    v = _info(info)
    out[0] = v.cstr("name", v.info.node_name)


@_status_api
def KernelInfo_GetOperatorType(info: Any, out: Any) -> None:
    v = _info(info)
    out[0] = v.cstr("op_type", v.info.op_type)


@_status_api
def KernelInfo_GetInputCount(info: Any, out: Any) -> None:
    out[0] = _info(info).info.input_count


@_status_api
def KernelInfo_GetOutputCount(info: Any, out: Any) -> None:
    out[0] = _info(info).info.output_count


@_status_api
def KernelInfo_HasAttribute(info: Any, name: Any, out: Any) -> None:
    out[0] = int(_s(name) in _info(info).info.attributes)


@_status_api
def KernelInfo_GetAttributeInt(info: Any, name: Any, out: Any) -> None:
    _get_attr(_info(info), _attrs_of_info, name, "int", out)


@_status_api
def KernelInfo_GetAttributeInts(info: Any, name: Any, values: Any, count: Any) -> None:
    _get_attr(_info(info), _attrs_of_info, name, "ints", values, count)


@_status_api
def KernelInfo_GetAttributeFloat(info: Any, name: Any, out: Any) -> None:
    _get_attr(_info(info), _attrs_of_info, name, "float", out)


@_status_api
def KernelInfo_GetAttributeString(info: Any, name: Any, out: Any) -> None:
    _get_attr(_info(info), _attrs_of_info, name, "string", out)


@_status_api
def KernelInfo_GetEp(info: Any, out: Any) -> None:
    v = _info(info)
    if v.info.ep is None:
        out[0] = ffi.NULL
        return
    if v.ep_handle is None:
        try:
            view = EpView(v.info.ep)
        except TypeError:  # an EP object without an EpIdentity: no handle to give
            out[0] = ffi.NULL
            return
        v.ep_handle = v.child("OrtEp", view)
    out[0] = v.ep_handle


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
    v = _ctx(context)
    if rank and dims == ffi.NULL:
        raise ValueError(f"dims is NULL but rank is {rank}")
    arr = v.ctx.output(int(index), [dims[k] for k in range(rank)])
    i = int(index)
    if i not in v.outputs:
        v.outputs[i] = v.child("OrtValue", ValueView(arr, writable=True))
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
    from ort_graph import from_numpy_dtype

    out[0] = from_numpy_dtype(HANDLES.get("OrtValue", value).array.dtype)


@_status_api
def Value_GetShape(value: Any, dims: Any, rank: Any) -> None:
    v = HANDLES.get("OrtValue", value)
    dims[0], rank[0] = v.int64s("shape", v.array.shape), v.array.ndim


@_status_api
def Value_GetElementCount(value: Any, out: Any) -> None:
    out[0] = int(HANDLES.get("OrtValue", value).array.size)
