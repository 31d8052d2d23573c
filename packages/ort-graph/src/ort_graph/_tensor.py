"""Initializers: byte size known up front, data read lazily (external data memory-mapped)."""

from __future__ import annotations

import pathlib
from typing import Any

import attrs
import numpy as np
from onnx import SparseTensorProto, TensorProto, numpy_helper

from ._dtypes import dtype_name, from_numpy_dtype, tensor_nbytes, to_numpy_dtype
from ._errors import ExternalDataError, TensorReleasedError
from ._external import DataDirectory, ExternalLocation, open_checked, resolve
from ._sparse import materialise_sparse, sparse_to_numpy

__all__ = ["ExternalLocation", "Tensor", "detached"]

# inline tensors up to this many bytes are copied out of the parsed file (`detached`); a larger one keeps the
# parse alive rather than be held twice while it loads
DETACH_MAX_BYTES = 1 << 20
_PLAIN_KINDS = frozenset("biufc")  # numpy kinds `from_numpy` keeps as arrays: bool, (u)int, float, complex


def detached(proto: Any) -> Any:
    """A copy of a protobuf message in its own memory. Any part of a parsed ModelProto that stays referenced
    keeps the whole parse (every node of the file) alive; what the IR keeps of it is copied out."""
    own = type(proto)()
    own.CopyFrom(proto)
    return own


@attrs.define(eq=False)
class Tensor:
    """A constant tensor. `nbytes` never reads data; `numpy()` reads (and mmaps external data)."""

    name: str
    dtype: int
    dims: tuple[int, ...]
    proto: TensorProto | None = attrs.field(default=None, repr=False)
    external: ExternalLocation | None = None
    sparse: SparseTensorProto | None = attrs.field(default=None, repr=False)  # a sparse initializer, densified lazily
    _array: np.ndarray | None = attrs.field(default=None, repr=False, alias="array")
    _mapped: np.ndarray | None = attrs.field(default=None, repr=False, init=False)
    _released: bool = attrs.field(default=False, repr=False, init=False)  # `release` dropped the only copy

    @property
    def nbytes(self) -> int:
        n = tensor_nbytes(self.dtype, self.dims)
        if n is not None:
            return n
        if self.external is not None and self.external.length is not None:
            return self.external.length
        return len(self.proto.SerializeToString()) if self.proto is not None else 0

    @property
    def is_external(self) -> bool:
        """Whether the data lives in a separate data file (an inline initializer mapped from the .onnx file
        itself is not external: it is saved inline)."""
        return self.external is not None and not self.external.in_model_file

    @classmethod
    def from_numpy(cls, name: str, array: np.ndarray) -> Tensor:
        """A tensor holding a copy of `array`. Numbers and booleans keep the copy itself (its proto is made only
        if the tensor is saved: `to_proto`), not a serialized proto that `numpy()` would parse into a second
        copy; other element types (strings, ml_dtypes' 16/8-bit floats) go through onnx's `from_array`."""
        array = np.asarray(array)
        if array.dtype.kind in _PLAIN_KINDS:
            return cls(name=name, dtype=from_numpy_dtype(array.dtype), dims=tuple(array.shape), array=array.copy())
        proto = numpy_helper.from_array(array, name)
        return cls(name=name, dtype=proto.data_type, dims=tuple(array.shape), proto=proto, array=None)

    @classmethod
    def in_model_file(cls, proto: TensorProto, location: ExternalLocation) -> Tensor:
        """An inline initializer whose raw_data `location` found in the model file (`_inline`); not read."""
        return cls(name=proto.name, dtype=proto.data_type, dims=tuple(int(d) for d in proto.dims),
                   proto=detached(proto), external=location)

    @classmethod
    def from_proto(cls, proto: TensorProto, base_dir: pathlib.Path | DataDirectory | None, *,
                   owned: bool = False) -> Tensor:
        """A tensor from its proto; external data is checked (see `_external`) but not read. `owned`: the proto
        is a message of its own (made by the caller, not part of a parsed file), kept as it is instead of copied
        out (`detached`)."""
        dims = tuple(int(d) for d in proto.dims)
        if proto.data_location != TensorProto.EXTERNAL:
            size = tensor_nbytes(proto.data_type, dims)
            small = not owned and (size if size is not None else proto.ByteSize()) <= DETACH_MAX_BYTES
            return cls(name=proto.name, dtype=proto.data_type, dims=dims, proto=detached(proto) if small else proto)
        directory = base_dir if isinstance(base_dir, DataDirectory) or base_dir is None else DataDirectory.of(base_dir)
        location = resolve(proto, directory)
        stripped = TensorProto()
        stripped.CopyFrom(proto)
        return cls(name=proto.name, dtype=proto.data_type, dims=dims, proto=stripped, external=location)

    @classmethod
    def from_sparse(cls, sp: SparseTensorProto, base_dir: DataDirectory | None, what: str | None = None) -> Tensor:
        """A dense tensor from a sparse one (a `graph.sparse_initializer`): values and indices are read and checked
        now (`_sparse`), the dense array is built when first read."""
        name = sp.values.name
        checked = materialise_sparse(sp, base_dir, what or f"sparse initializer {name!r}")
        return cls(name=name, dtype=checked.values.data_type, dims=tuple(int(d) for d in checked.dims),
                   sparse=checked)

    def numpy(self) -> np.ndarray:
        """The tensor's values; external data (and inline data mapped from the model file) is memory-mapped,
        not copied, unless its offset in the file leaves its elements misaligned: then it is copied once."""
        if self._array is None:
            if self._released:
                raise TensorReleasedError(
                    f"initializer {self.name!r} was released after every consumer pre-packed it and held its values "
                    "only in memory; read it before the session that packed it is made, or keep it (a graph "
                    "output, or a consumer that does not pack it, keeps it)")
            self._array = self._load()
        return self._array

    def release(self) -> None:
        """Drop the values read so far (an initializer every consumer pre-packed: ort-session no longer holds it).
        A tensor read from a proto or a file reads them again if asked; one that held only its array (made from
        numpy: a folded constant, fused weights) is empty from now on and `numpy()` raises TensorReleasedError."""
        if self.proto is None and self.external is None and self.sparse is None:
            self._released = self._released or self._array is not None
        self._array = self._mapped = None

    def raw_bytes(self) -> np.ndarray:
        """The tensor's bytes in memory order as a flat uint8 array, for a byte copy elsewhere (a device slot, a
        staging buffer). Mapped data (external, or inline mapped from the model file) comes back as the
        mapping itself, whatever its alignment, and is neither copied nor kept aligned in memory: a streamed
        weight costs page cache, which the kernel can evict, not resident memory. Read-only."""
        if self._array is None and self.external is not None and self._mappable():
            if self._mapped is None:
                self._mapped = self._map()
            return self._mapped
        return np.ascontiguousarray(self.numpy()).reshape(-1).view(np.uint8)

    def _mappable(self) -> bool:
        """Whether the bytes in the file are the elements as numpy lays them out (not packed sub-byte types)."""
        count = int(np.prod(self.dims)) if self.dims else 1
        return count > 0 and tensor_nbytes(self.dtype, self.dims) == count * to_numpy_dtype(self.dtype).itemsize

    def _map(self) -> np.ndarray:
        nbytes = tensor_nbytes(self.dtype, self.dims)
        with open_checked(f"initializer {self.name!r}", self.external, nbytes) as f:
            try:
                return np.memmap(f, dtype=np.uint8, mode="r", offset=self.external.offset, shape=(nbytes,))
            except (OSError, ValueError) as e:
                raise ExternalDataError(f"cannot map external data of {self.name!r} from {str(self.external.path)!r}: "
                                        f"{e}") from e

    def _load(self) -> np.ndarray:
        if self.sparse is not None:
            return sparse_to_numpy(self.sparse, f"sparse initializer {self.name!r}")
        if self.external is None:
            return numpy_helper.to_array(self.proto)
        np_dtype = to_numpy_dtype(self.dtype)
        count = int(np.prod(self.dims)) if self.dims else 1
        nbytes = tensor_nbytes(self.dtype, self.dims)
        if count == 0:
            return np.zeros(self.dims, dtype=np_dtype)
        raw = self._mapped if self._mapped is not None else self._map()
        if nbytes != count * np_dtype.itemsize:  # packed 4-bit types: let onnx unpack them
            proto = TensorProto()
            proto.CopyFrom(self.proto)
            proto.ClearField("external_data")
            proto.data_location = TensorProto.DEFAULT
            proto.raw_data = bytes(raw)
            return numpy_helper.to_array(proto)
        array = raw.view(np_dtype).reshape(self.dims)
        if array.ctypes.data % np_dtype.alignment:  # kernels take element pointers: an aligned copy
            return np.array(array)
        return array

    def to_proto(self, embed: bool = True) -> TensorProto:
        """A TensorProto holding the data (embed) or the proto as loaded."""
        if self.proto is not None and (self.external is None or not (embed or self.external.in_model_file)):
            return self.proto
        proto = numpy_helper.from_array(np.asarray(self.numpy()), self.name)
        if proto.data_type != self.dtype:  # e.g. bfloat16 stored via ml_dtypes
            proto.data_type = self.dtype
        return proto

    def __str__(self) -> str:
        where = f" external {self.external.path.name}@{self.external.offset}" if self.external else ""
        return f"Tensor({self.name!r}, {dtype_name(self.dtype)}, {list(self.dims)}, {self.nbytes} B{where})"
