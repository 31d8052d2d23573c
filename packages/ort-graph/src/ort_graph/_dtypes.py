"""ONNX element types: numpy mapping and byte sizes (sub-byte types packed as ONNX stores them)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, helper

# Element types stored two per byte (int4, uint4, float4e2m1).
_PACKED_4BIT = {
    getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(TensorProto, n)
}
_ITEMSIZE = {
    TensorProto.FLOAT: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1, TensorProto.UINT16: 2,
    TensorProto.INT16: 2, TensorProto.INT32: 4, TensorProto.INT64: 8, TensorProto.BOOL: 1,
    TensorProto.FLOAT16: 2, TensorProto.DOUBLE: 8, TensorProto.UINT32: 4, TensorProto.UINT64: 8,
    TensorProto.COMPLEX64: 8, TensorProto.COMPLEX128: 16, TensorProto.BFLOAT16: 2,
}
for _n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0"):
    if hasattr(TensorProto, _n):
        _ITEMSIZE[getattr(TensorProto, _n)] = 1


def dtype_name(elem_type: int) -> str:
    """'FLOAT', 'INT64', ... or 'UNDEFINED(0)'."""
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"UNKNOWN({elem_type})"


_SIZES: dict[int, float] = {**_ITEMSIZE, **dict.fromkeys(_PACKED_4BIT, 0.5)}


def itemsize(elem_type: int) -> float | None:
    """Bytes per element (0.5 for 4-bit types); None for strings and unknown types."""
    return _SIZES.get(elem_type)


def tensor_nbytes(elem_type: int, shape: Sequence[int]) -> int | None:
    """Bytes of a dense tensor of this type and static shape, packed as ONNX stores it."""
    size = _SIZES.get(elem_type)  # called for every value by planning and costing: one lookup
    if size is None:
        return None
    count = math.prod(map(int, shape))
    return count * size if type(size) is int else math.ceil(count * size)


def to_numpy_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype used for an ONNX element type (bfloat16/float8 use ml_dtypes if present)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError) as e:
        raise TypeError(f"ONNX element type {dtype_name(elem_type)} has no numpy equivalent") from e


def from_numpy_dtype(dtype: np.dtype | type) -> int:
    """The ONNX element type of a numpy dtype."""
    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
