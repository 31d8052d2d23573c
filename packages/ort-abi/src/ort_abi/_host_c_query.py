"""OrtKernelApi node, EP and kernel-info queries (Level-1 estimates and create calls)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._ffi import _ffi as ffi
from ._handles import HANDLES
from ._host_guard import cstring as _s
from ._host_guard import status_api as _status_api
from ._host_guard import typed_attribute
from ._hostapi import HOST_API
from ._views import EpView


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
    v = _node(node)
    out[0] = int(HOST_API.node_has_input(v.node, int(index), v.input_shapes()))


@_status_api
def Node_GetInputShape(node: Any, index: int, shape: Any, rank: Any) -> None:
    v = _node(node)
    dims = HOST_API.node_input_shape(v.node, int(index), v.input_shapes())
    if dims is None:
        shape[0], rank[0] = ffi.NULL, 0
    else:
        shape[0], rank[0] = v.int64s(("shape", int(index)), dims), len(dims)


@_status_api
def Node_GetInputElementType(node: Any, index: int, out: Any) -> None:
    v = _node(node)
    out[0] = HOST_API.node_input_element_type(v.node, int(index), v.input_shapes())


def _attrs_of_node(v: Any) -> tuple[dict[str, Any], str]:
    """The node's attribute values and its label, made once for the call the view serves (the node does not
    change while C queries it)."""
    found = v.keep.get(_ATTRS)
    if found is None:
        found = v.keep[_ATTRS] = {n: a.value for n, a in v.node.attributes.items()}, f"node {v.node.name!r}"
    return found


def _attrs_of_info(v: Any) -> tuple[dict[str, Any], str]:
    return dict(v.info.attributes), f"node {v.info.node_name!r}"


_ATTRS = ("attributes",)  # the key of `_attrs_of_node`'s result in a view's cache


# Getters whose result is a pointer (`Node_GetAttributeInts`, `..String`, and the KernelInfo twins) answer an
# absent attribute with OK and a NULL result (count 0), as the seeds' Conv estimate reads its optional
# pads/strides/dilations; a scalar getter has no null to give and returns ORT_INVALID_ARGUMENT (ask
# `*_HasAttribute` first). An attribute of another kind is an error for every getter.
NULLABLE_KINDS = ("ints", "floats", "string")


def _get_attr(v: Any, source: Callable[[Any], tuple[dict[str, Any], str]], name: Any, kind: str, out: Any,
              count: Any = None) -> None:
    attributes, owner = source(v)
    key = _s(name)
    if key not in attributes and kind in NULLABLE_KINDS:  # absent optional attribute: OK with a null result
        out[0] = ffi.NULL
        if count is not None:
            count[0] = 0
        return
    value = typed_attribute(attributes, key, kind, owner)
    if kind == "ints":
        out[0], count[0] = v.int64s(("attr", key), value), len(value)
    elif kind == "floats":
        out[0], count[0] = v.float32s(("attr", key), value), len(value)
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
def Node_GetAttributeFloats(node: Any, name: Any, values: Any, count: Any) -> None:
    _get_attr(_node(node), _attrs_of_node, name, "floats", values, count)


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
def KernelInfo_GetAttributeFloats(info: Any, name: Any, values: Any, count: Any) -> None:
    _get_attr(_info(info), _attrs_of_info, name, "floats", values, count)


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
