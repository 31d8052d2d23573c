"""Sparse tensors (SparseTensorProto): `graph.sparse_initializer` entries and SPARSE_TENSOR attributes
(a Constant's `sparse_value`), the one place that checks and densifies them.

A sparse tensor is `values` (1-D, NNZ elements), `indices` (INT64, either NNZ linear indices into the
dense tensor or an NNZ x rank matrix of coordinates) and the dense `dims`. At load both parts are read
into memory (`materialise`, external data confined like every tensor's: `_external`) and every index is
checked to lie inside `dims`, as ONNX Runtime checks when it densifies a sparse initializer. A sparse
initializer becomes a dense initializer (ONNX Runtime does the same), densified when first read.
Unsorted or repeated indices are accepted, as ONNX Runtime accepts them (a repeated index keeps its
last value).
"""

from __future__ import annotations

import math
import sys

import numpy as np
from onnx import SparseTensorProto, TensorProto, numpy_helper

from ._dtypes import dtype_name, tensor_nbytes
from ._errors import TensorDataError, UnsupportedModelError
from ._external import DataDirectory, materialise


def check_structure(sp: SparseTensorProto, what: str) -> None:
    """The shapes and types of `sp`'s parts (no data read): TensorDataError naming `what` and the field."""
    dims = [int(d) for d in sp.dims]
    values, indices = sp.values, sp.indices
    problem = None
    if any(d < 0 for d in dims):
        problem = f"negative dense dims {dims!r}"
    elif not sp.HasField("values"):
        problem = "no values tensor"
    elif values.data_type == TensorProto.STRING:
        raise UnsupportedModelError(f"{what} is a sparse tensor of strings; only numeric sparse tensors are "
                                    "supported — store it dense")
    elif len(values.dims) != 1:
        problem = f"values of dims {list(values.dims)!r} (values must be 1-D: [NNZ])"
    else:
        nnz = int(values.dims[0])
        if nnz and not sp.HasField("indices"):
            problem = f"{nnz} values but no indices tensor"
        elif sp.HasField("indices") and indices.data_type != TensorProto.INT64:
            problem = f"indices of type {dtype_name(indices.data_type)} (indices must be INT64)"
        elif sp.HasField("indices") and list(indices.dims) not in ([nnz], [nnz, len(dims)]):
            problem = (f"indices of dims {list(indices.dims)!r} for {nnz} values and dense dims {dims!r} "
                       f"(indices must be [{nnz}] linear indices or [{nnz}, {len(dims)}] coordinates)")
        elif nnz > math.prod(dims):
            problem = f"{nnz} values for a dense tensor of {math.prod(dims)} elements"
    dense = tensor_nbytes(values.data_type, tuple(dims)) if problem is None else None
    if dense is not None and dense > sys.maxsize:
        raise UnsupportedModelError(f"{what} is a sparse tensor of dense dims {dims!r} ({dense} bytes dense), more "
                                    "than one array can address; store it with smaller dims")
    if problem is not None:
        raise TensorDataError(f"{what} is a sparse tensor with {problem}; the model file is corrupt — re-export it")


def materialise_sparse(sp: SparseTensorProto, directory: DataDirectory | None, what: str) -> SparseTensorProto:
    """A copy of `sp` with values and indices in memory (external data confined and read: `_external`), its
    indices checked against the dense dims. Raises ExternalDataError / TensorDataError naming `what`."""
    check_structure(sp, what)
    out = SparseTensorProto()
    out.CopyFrom(sp)
    out.values.CopyFrom(materialise(sp.values, directory, f"values of {what}"))
    if sp.HasField("indices"):
        out.indices.CopyFrom(materialise(sp.indices, directory, f"indices of {what}"))
    _linear_indices(out, what)
    return out


def _linear_indices(sp: SparseTensorProto, what: str) -> np.ndarray:
    dims = tuple(int(d) for d in sp.dims)
    nnz = int(sp.values.dims[0])
    if nnz == 0:
        return np.zeros(0, dtype=np.int64)
    idx = numpy_helper.to_array(sp.indices).astype(np.int64, copy=False)
    size = math.prod(dims)
    if idx.ndim == 2:
        bad = np.nonzero(((idx < 0) | (idx >= np.array(dims, dtype=np.int64))).any(axis=1))[0]
        if bad.size:
            raise TensorDataError(f"{what} is a sparse tensor whose index {int(bad[0])} is {idx[bad[0]].tolist()!r}, "
                                  f"outside its dense dims {list(dims)!r}; the model file is corrupt — re-export it")
        return np.ravel_multi_index(tuple(idx.T), dims) if dims else np.zeros(nnz, dtype=np.int64)
    bad = np.nonzero((idx < 0) | (idx >= size))[0]
    if bad.size:
        raise TensorDataError(f"{what} is a sparse tensor whose linear index {int(bad[0])} is {int(idx[bad[0]])}, "
                              f"outside its {size} dense elements (dims {list(dims)!r}); the model file is corrupt "
                              "— re-export it")
    return idx


def sparse_to_numpy(sp: SparseTensorProto, what: str = "the sparse tensor") -> np.ndarray:
    """The dense array of a sparse tensor whose parts are in memory (as `materialise_sparse` leaves them)."""
    check_structure(sp, what)
    for part in (sp.values, sp.indices):
        if part.data_location == TensorProto.EXTERNAL:
            raise TensorDataError(f"{what} keeps its {'values' if part is sp.values else 'indices'} in an external "
                                  "file that was not read at load; load the model with ort_graph.load")
    values = numpy_helper.to_array(sp.values)
    dims = tuple(int(d) for d in sp.dims)
    try:
        out = np.zeros(math.prod(dims), dtype=values.dtype)
    except MemoryError as e:
        raise TensorDataError(f"{what}: its dense form ({_dense_bytes(values, dims)} bytes, dims {list(dims)!r}) cannot "
                              "be allocated in host memory; store it dense with smaller dims or use a larger machine") from e
    out[_linear_indices(sp, what)] = values.reshape(-1)
    return out.reshape(dims)


def _dense_bytes(values: np.ndarray, dims: tuple[int, ...]) -> int:
    return math.prod(dims) * values.dtype.itemsize
