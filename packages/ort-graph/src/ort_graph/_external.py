"""External data of tensors: where a model file may read from, and how many bytes.

A model file is untrusted input. Every tensor in it may keep its data in a file (`data_location=EXTERNAL`),
wherever it sits: initializers, sparse initializers' values and indices, tensors of attributes (a Constant's
`value` / `sparse_value`, any TENSOR, TENSORS, SPARSE_TENSOR or SPARSE_TENSORS attribute), at any depth of
subgraphs. All of them go through `resolve`. Initializers stay lazy (mapped when first read); every other
tensor is read once at load (`materialise`), so that no later reader (onnx's `numpy_helper.to_array`, which
resolves locations against the working directory) ever sees an external tensor. Its `external_data`
entries name a file (`location`), an `offset` and a `length`; nothing of that is followed blindly:

- `location` must be a relative path without `..` components; absolute paths are refused;
- the file it names, after resolving every symbolic link, must lie inside the model's directory
  (or inside the directory the model file itself resolves to, when the model path is a symbolic
  link, as in a Hugging Face cache where `model.onnx` and `model.onnx.data` link into `blobs/`);
- a model given as bytes or a ModelProto has no directory: its external data resolves only against
  a directory the caller names (`base_dir`; the session option
  `session.model_external_initializers_file_folder_path`, ONNX Runtime's key), never the working directory;
- `offset` and `length` are non-negative decimal integers, `length` equals the tensor's byte size, and
  `offset + size` lies inside the file; the file is a regular file. Checked with `stat`, before any mapping.

When the bytes are finally mapped (`open_checked`), the opened file must be the one checked at load
(same device and inode) and still be long enough, so swapping or truncating it in between is caught.
"""

from __future__ import annotations

import os
import pathlib
import re
import stat

import attrs
from onnx import TensorProto

from ._dtypes import dtype_name, tensor_nbytes
from ._errors import ExternalDataError

FOLDER_OPTION = "session.model_external_initializers_file_folder_path"
_DECIMAL = re.compile(r"[0-9]+")


@attrs.frozen
class DataDirectory:
    """The directory external data resolves against, and the real directories files may lie in."""

    path: pathlib.Path
    roots: tuple[pathlib.Path, ...]

    @classmethod
    def of(cls, base_dir: str | os.PathLike, model_file: str | os.PathLike | None = None) -> DataDirectory:
        base = pathlib.Path(base_dir)
        roots = [pathlib.Path(os.path.realpath(base))]
        if model_file is not None:  # a model path that is a symlink: its target's directory too
            target_dir = pathlib.Path(os.path.realpath(model_file)).parent
            if target_dir not in roots:
                roots.append(target_dir)
        return cls(base, tuple(roots))


@attrs.frozen
class ExternalLocation:
    """Where an initializer's bytes live on disk (`path` is the resolved, checked file)."""

    path: pathlib.Path
    offset: int
    length: int | None
    device: int | None = None  # st_dev / st_ino of the file checked at load (None: not checked)
    inode: int | None = None
    in_model_file: bool = False  # an inline initializer's raw_data, mapped from the .onnx file itself (`_inline`)


def _fail(what: str, location: str, problem: str, fix: str) -> ExternalDataError:
    return ExternalDataError(f"{what} has external data location {location!r}: {problem}; {fix}")


def _check_location(what: str, location: str) -> None:
    if not location:
        raise _fail(what, location, "the location is empty", "re-export the model or embed the tensor")
    if "\0" in location:
        raise _fail(what, location, "the location contains a NUL character", "the model file is corrupt")
    if location.startswith(("/", "\\")) or pathlib.PureWindowsPath(location).drive:
        raise _fail(what, location, "absolute paths are not allowed (a model may only read files in its own "
                    "directory; ONNX Runtime refuses them too)", "save the data beside the model with a relative location")
    if ".." in re.split(r"[/\\]", location):
        raise _fail(what, location, "'..' components are not allowed (a model may only read files in its own "
                    "directory)", "move the data file beside the model and save it with a relative location")


def _integer(what: str, info: dict[str, str], key: str) -> int | None:
    text = info.get(key)
    if text is None:
        return None
    if not _DECIMAL.fullmatch(text):
        raise ExternalDataError(
            f"{what} has external data {key} {text!r} (location {info['location']!r}), "
            "which is not a non-negative decimal integer; the model file is corrupt — re-export it")
    return int(text)


def _entries(proto: TensorProto, what: str) -> dict[str, str]:
    info: dict[str, str] = {}
    for e in proto.external_data:
        if e.key in info and e.key in ("location", "offset", "length"):
            raise ExternalDataError(f"{what} lists external data key {e.key!r} twice "
                                    f"({info[e.key]!r} and {e.value!r}); the model file is corrupt — re-export it")
        info[e.key] = e.value
    return info


def resolve(proto: TensorProto, directory: DataDirectory | None, what: str | None = None) -> ExternalLocation:
    """Check an external tensor's entries against its directory and file; nothing is read. `what` names the
    tensor in errors (default: the initializer of that what)."""
    what = what or f"initializer {proto.name!r}"
    info = _entries(proto, what)
    if "location" not in info:
        raise ExternalDataError(f"{what} is marked external but names no 'location'; "
                                "re-export the model or embed the tensor")
    location = info["location"]
    _check_location(what, location)
    offset = _integer(what, info, "offset") or 0
    length = _integer(what, info, "length")
    dims = tuple(int(d) for d in proto.dims)
    need = tensor_nbytes(proto.data_type, dims) if all(d >= 0 for d in dims) else None
    if need is None:
        raise _fail(what, location, f"external data needs a fixed-size element type and non-negative dims, got "
                    f"{dtype_name(proto.data_type)} {list(dims)}", "embed the tensor or fix its type and dims")
    if length is not None and length != need:
        raise _fail(what, location, f"length {length} does not match the tensor's {need} bytes "
                    f"({dtype_name(proto.data_type)} {list(dims)}) at offset {offset}",
                    "the model and its data file disagree — re-export them together")
    if directory is None:
        raise _fail(what, location, "the model was given as bytes or a ModelProto, so it has no directory to read "
                    "external data from (the working directory is never used)",
                    f"pass base_dir= to ort_graph.load / ort_graph.from_proto, or set the session option "
                    f"{FOLDER_OPTION!r} to the folder holding the data file")
    path = directory.path / location
    real = pathlib.Path(os.path.realpath(path))
    if not any(real.is_relative_to(root) for root in directory.roots):
        raise _fail(what, location, f"it resolves (through a symbolic link) to {str(real)!r}, outside the model "
                    f"directory {str(directory.roots[0])!r}", "copy the data file into the model directory")
    try:
        st = os.stat(real)
    except OSError as e:
        raise ExternalDataError(
            f"{what} needs external data file {str(path)!r} (location {location!r}), which does not exist or cannot be read "
            f"({e.strerror}); keep the .data file beside the .onnx file (same relative location as when it was "
            "saved; locations resolve against the model's folder, never the working directory)") from e
    if not stat.S_ISREG(st.st_mode):
        raise _fail(what, location, f"{str(real)!r} is not a regular file", "point the location at the data file")
    if offset + need > st.st_size:
        raise ExternalDataError(
            f"external data file {str(path)!r} (location {location!r}) is too short for {what}: it needs {need} bytes "
            f"(length {length}) at offset {offset}, the file has {st.st_size} bytes; the file is truncated or "
            "belongs to another model")
    return ExternalLocation(path=real, offset=offset, length=length, device=st.st_dev, inode=st.st_ino)


def open_checked(what: str, loc: ExternalLocation, nbytes: int):
    """Open the external data file for reading, verifying it is the file checked at load and still long enough.
    `what` names the tensor in errors ("initializer 'w'")."""
    try:
        f = open(loc.path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except OSError as e:
        raise ExternalDataError(f"cannot open external data of {what} at {str(loc.path)!r}: {e}") from e
    st = os.fstat(f.fileno())
    problem = None
    if loc.inode is not None and (st.st_dev, st.st_ino) != (loc.device, loc.inode):
        problem = "it was replaced by another file since the model was loaded"
    elif loc.offset + nbytes > st.st_size:
        problem = (f"it is now {st.st_size} bytes, too short for {nbytes} bytes at offset {loc.offset} "
                   "(truncated since the model was loaded)")
    if problem is not None:
        f.close()
        raise ExternalDataError(f"external data file {str(loc.path)!r} of {what}: {problem}; "
                                "reload the model")
    return f


def materialise(proto: TensorProto, directory: DataDirectory | None, what: str) -> TensorProto:
    """`proto` itself when its data is embedded; else a copy holding the bytes its external data names (checked
    by `resolve` first) as raw_data, with no external entries left: the tensor needs no file after load."""
    if proto.data_location != TensorProto.EXTERNAL:
        return proto
    location = resolve(proto, directory, what)
    nbytes = tensor_nbytes(proto.data_type, tuple(proto.dims))
    with open_checked(what, location, nbytes) as f:
        f.seek(location.offset)
        raw = f.read(nbytes)
    if len(raw) != nbytes:
        raise ExternalDataError(f"{what}: external data file {str(location.path)!r} gave {len(raw)} of {nbytes} "
                                f"bytes at offset {location.offset} (truncated while loading); reload the model")
    out = TensorProto()
    out.CopyFrom(proto)
    out.ClearField("external_data")
    out.data_location = TensorProto.DEFAULT
    out.raw_data = raw
    return out
