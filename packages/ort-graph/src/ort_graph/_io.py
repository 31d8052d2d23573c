"""Load and save models: paths or bytes, external data kept external and lazy."""

from __future__ import annotations

import mmap
import os
import pathlib

import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto, numpy_helper

from ._convert import model_from_proto, model_to_proto
from ._errors import ModelLoadError, UnsupportedModelError
from ._external import DataDirectory, ExternalLocation, open_checked
from ._inline import MIN_BYTES as INLINE_MIN_BYTES
from ._inline import locate_inline_weights, strip_inline_weights
from ._ir import Model
from ._tensor import Tensor
from ._topo import validate

MIN_IR_VERSION = 3


def _parse(data: bytes, origin: str) -> ModelProto:
    mp = ModelProto()
    try:
        mp.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelLoadError(
            f"{origin} is not a valid ONNX model (protobuf parse failed: {e}); "
            "the file is truncated or not an .onnx file — re-download or re-export it"
        ) from e
    if not mp.HasField("graph") or mp.ir_version == 0:
        raise ModelLoadError(
            f"{origin} parsed but holds no ONNX model (ir_version={mp.ir_version}, "
            f"graph={'present' if mp.HasField('graph') else 'missing'}); is this really an .onnx file?"
        )
    if mp.ir_version < MIN_IR_VERSION or mp.ir_version > onnx.IR_VERSION:
        raise UnsupportedModelError(
            f"{origin} has IR version {mp.ir_version}; supported are {MIN_IR_VERSION}..{onnx.IR_VERSION}. "
            "Convert it with onnx.version_converter or re-export with a current exporter"
        )
    return mp


def _read_model_file(path: pathlib.Path, origin: str, map_inline: bool,
                     min_bytes: int) -> tuple[ModelProto, dict[int, ExternalLocation]]:
    """The file's ModelProto; with `map_inline`, large inline initializers are left in the file (`_inline`)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            buf = None
            if map_inline and st.st_size > 0:
                try:
                    buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):  # a file system without mmap: read it whole, as onnx.load does
                    buf = None
            if buf is None:
                return _parse(f.read(), origin), {}
            with buf:
                stripped, spans = strip_inline_weights(buf, origin, min_bytes)
                mp = _parse(stripped, origin)
                return mp, locate_inline_weights(mp, spans, buf, path, st, origin)
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {str(path)!r}: {e}") from e


def load(source: str | os.PathLike | bytes, *, validate_graph: bool = True,
         base_dir: str | os.PathLike | None = None, map_inline_weights: bool = True,
         map_inline_min_bytes: int = INLINE_MIN_BYTES) -> Model:
    """Load a model from a path or serialized bytes. External data is mapped lazily, not read.

    External data resolves against `base_dir` when given (ONNX Runtime's
    `session.model_external_initializers_file_folder_path`), else the model file's directory; a model given
    as bytes with external data requires `base_dir` (the working directory is never used). Files outside
    that directory (absolute locations, `..`, symbolic links leading out) are refused.

    From a path, initializers stored inline (raw_data of at least `map_inline_min_bytes` bytes, main graph)
    are mapped from the .onnx file too instead of read (`map_inline_weights=False`: read them, as onnx.load
    does); see `_inline` for what stays in memory."""
    if isinstance(source, bytes | bytearray | memoryview):
        mp = _parse(bytes(source), "the given bytes")
        model = model_from_proto(mp, base_dir=DataDirectory.of(base_dir) if base_dir is not None else None)
    else:
        path = pathlib.Path(source)
        if not path.is_file():
            raise ModelLoadError(f"model file {str(path)!r} does not exist; check the path")
        mp, in_file = _read_model_file(path, f"model file {str(path)!r}", map_inline_weights, map_inline_min_bytes)
        directory = DataDirectory.of(path.parent if base_dir is None else base_dir, model_file=path)
        model = model_from_proto(mp, base_dir=directory, path=path, in_model_file=in_file)
    if validate_graph:
        validate(model.graph)
    return model


def _raw_bytes(t: Tensor) -> bytes:
    if t.external is not None:
        with open_checked(f"initializer {t.name!r}", t.external, t.nbytes) as f:
            f.seek(t.external.offset)
            return f.read(t.nbytes)
    proto = t.to_proto()
    if proto.HasField("raw_data"):
        return proto.raw_data
    return numpy_helper.to_array(proto).tobytes()


def save(model: Model, path: str | os.PathLike, *, external_data: bool | None = None,
         size_threshold: int = 1024) -> pathlib.Path:
    """Save a model. External data (default: when the model was loaded with any data file; inline weights
    mapped from the model file do not count) goes to `<name>.data`."""
    path = pathlib.Path(path)
    inits = model.graph.initializers
    if external_data is None:
        external_data = any(t.is_external for t in inits.values())
    mp = model_to_proto(model, embed=True) if not external_data else None
    if mp is None:
        mp = model_to_proto(model, embed=False)
        data_name = path.name + ".data"
        by_name = {t.name: i for i, t in enumerate(mp.graph.initializer)}
        offset = 0
        with open(path.parent / data_name, "wb") as f:
            for name, t in inits.items():
                if not (t.is_external or t.nbytes >= size_threshold):
                    continue
                raw = _raw_bytes(t)
                pad = (-offset) % 64
                f.write(b"\0" * pad)
                offset += pad
                f.write(raw)
                proto = TensorProto(name=name, data_type=t.dtype, dims=list(t.dims))
                proto.data_location = TensorProto.EXTERNAL
                for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
                    e = proto.external_data.add()
                    e.key, e.value = k, v
                mp.graph.initializer[by_name[name]].CopyFrom(proto)
                offset += len(raw)
    path.write_bytes(mp.SerializeToString())
    return path


def to_proto(model: Model) -> ModelProto:
    """A self-contained ModelProto (external data embedded) — for onnxruntime or onnx tools."""
    return model_to_proto(model, embed=True)


def from_proto(mp: ModelProto, base_dir: str | os.PathLike | None = None) -> Model:
    """An IR model from a ModelProto; external data resolves only against `base_dir` (see `load`)."""
    model = model_from_proto(mp, base_dir=DataDirectory.of(base_dir) if base_dir is not None else None)
    validate(model.graph)
    return model
