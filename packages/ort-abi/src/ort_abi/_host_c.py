"""The OrtKernelApi table's functions, implemented in Python (`extern "Python"` in the cffi bridge).

Importing this module binds all of them: statuses and the registry here, node / EP / kernel-info
queries in `_host_c_query`, kernel context and values in `_host_c_context`. Queries go through
`HostApi` and `KernelContext`: the same code Python kernels use."""

from __future__ import annotations

import logging
from typing import Any

from ._errors import HandleError
from ._ffi import _ffi as ffi
from ._handles import HANDLES
from ._host_guard import BAD_STATUS_MSG as _BAD_STATUS_MSG
from ._host_guard import cstring as _s
from ._host_guard import plain_api as _plain_api
from ._host_guard import status_api as _status_api
from ._kerneldef import KernelDefBuilder
from ._status import STATUSES, ErrorCode

_log = logging.getLogger("ort_abi")


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


def _add(registry: Any, kernel_def: Any, create_func: Any, state: Any, estimate_func: Any,
         shape_func: Any = ffi.NULL) -> None:
    """Failures raise into the status guard, which also records them for the registration scope."""
    from ._ckernel import CCreateFunc, CEstimateFunc, CShapeFunc

    scope = HANDLES.get("OrtKernelRegistry", registry)
    kd = HANDLES.get("OrtKernelDef", kernel_def)
    if create_func == ffi.NULL:
        raise ValueError(f"create_func is NULL for {kd.describe()}; pass the kernel's create function")
    estimate = CEstimateFunc(estimate_func, scope.library) if estimate_func != ffi.NULL else None
    shapes = CShapeFunc(shape_func, scope.library) if shape_func != ffi.NULL else None
    entry = scope.registry.add_kernel_v2(kd, CCreateFunc(create_func, scope.library), state, estimate,
                                         language="c", library=scope.library, shape_func=shapes)
    scope.added.append(entry)


@_status_api
def KernelRegistry_AddKernel(registry: Any, kernel_def: Any, create_func: Any, state: Any) -> None:
    _add(registry, kernel_def, create_func, state, ffi.NULL)


@_status_api
def KernelRegistry_AddKernelV2(registry: Any, kernel_def: Any, create_func: Any, state: Any, estimate: Any) -> None:
    _add(registry, kernel_def, create_func, state, estimate)


@_status_api
def KernelRegistry_AddKernelV3(registry: Any, kernel_def: Any, create_func: Any, state: Any, estimate: Any,
                               shape_func: Any) -> None:
    _add(registry, kernel_def, create_func, state, estimate, shape_func)


from . import _host_c_context, _host_c_query  # noqa: E402,F401  (importing them binds their functions)
