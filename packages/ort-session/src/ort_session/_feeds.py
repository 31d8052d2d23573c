"""Run inputs: validation against the model, and generated inputs for `ortrun run`."""

from __future__ import annotations

import os
import reprlib
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

import ort_graph
from ort_graph import Graph

from ._errors import InvalidInputError
from ._input_defaults import default_dims


def required_inputs(graph: Graph) -> list[str]:
    """Graph inputs that are not initializers (the overridable initializers a run may also feed are
    `ort_graph.overridable_initializers`; before IR 4 none is, decided at load)."""
    return [n for n in graph.inputs if n not in graph.initializers]


def _unknown_feeds(graph: Graph, unknown: list[object], expected: list[str], constants: Collection[str]) -> str:
    """The message for feeds naming no feedable input: those naming a constant of the model say so, and how to
    make one feedable (onnxruntime refuses both kinds alike, "Invalid input name"). `constants`: the model's
    constant initializers as loaded (a fold may have consumed some since)."""
    fed = ort_graph.overridable_initializers(graph)
    known = f"the model's inputs are {expected!r}" + (f" (and the overridable initializers {_cut(repr(fed))})"
                                                       if fed else "")
    constants = [n for n in unknown if isinstance(n, str) and (n in graph.initializers or n in constants)]
    if not constants:
        return f"unknown input name(s) {_cut(repr(unknown))}; {known}"
    return (f"input name(s) {_cut(repr(constants))} name initializers that are constants of the model, which a run "
            "cannot feed (only an initializer listed in graph.input of a model of IR version >= 4 is overridable); "
            f"{known}. To feed one, list it in graph.input and save the model with ir_version >= 4, or set its "
            "value once with SessionOptions.add_initializer")


def check_feed_names(graph: Graph, feeds: Mapping[str, object], constants: Collection[str] = ()) -> None:
    """`feeds` is a mapping that names every required input, perhaps overridable initializers, and nothing else
    (InvalidInputError otherwise; `constants`: as `_unknown_feeds`)."""
    if not isinstance(feeds, Mapping):
        raise InvalidInputError(f"feeds must be a dict of input name -> numpy array, got {type(feeds).__name__}")
    expected = required_inputs(graph)
    unknown = [n for n in feeds if not isinstance(n, str) or n not in graph.inputs]
    if unknown:
        raise InvalidInputError(_unknown_feeds(graph, unknown, expected, constants))
    missing = [n for n in expected if n not in feeds]
    if missing:
        raise InvalidInputError(f"missing input(s) {missing!r}; the model needs {expected!r}")


def feed_key(feeds: Mapping[str, object]) -> tuple | None:
    """What the checks of `validate_feeds` depend on when every feed is a numpy array: the names in order,
    each dtype and shape (None when a feed is anything else, or `feeds` is not a dict)."""
    if type(feeds) is not dict:
        return None
    key = []
    for name, arr in feeds.items():
        if type(arr) is not np.ndarray:
            return None
        key.append((name, arr.dtype, arr.shape))
    return tuple(key)


def validate_feeds(graph: Graph, feeds: Mapping[str, object],
                   declared: Mapping[str, tuple | None] | None = None,
                   passed: dict[tuple, dict[str, int]] | None = None,
                   constants: Collection[str] = ()) -> tuple[dict[str, Any], dict[str, int]]:
    """Check names, dtypes, ranks and shapes (against `declared` input shapes when given, e.g. the
    model's own before max-shape resolution); returns the arrays and the symbolic-dim bindings.
    `passed` (the caller's, for one graph and `declared`): feed keys (`feed_key`) that passed, with their
    bindings; feeds of such a key pass at once (numpy arrays are used as given), others are checked and added."""
    key = feed_key(feeds) if passed is not None else None
    hit = passed.get(key) if key is not None else None
    if hit is not None:
        return dict(feeds), dict(hit)
    arrays, bindings = _validate(graph, feeds, declared, constants)
    if key is not None:
        if len(passed) >= 16:  # a few shape keys (a decode loop has one per length); runs may share the dict
            passed.pop(next(iter(passed), None), None)
        passed[key] = dict(bindings)
    return arrays, bindings


def _validate(graph: Graph, feeds: Mapping[str, object], declared: Mapping[str, tuple | None] | None,
              constants: Collection[str] = ()) -> tuple[dict[str, Any], dict[str, int]]:
    check_feed_names(graph, feeds, constants)
    arrays: dict[str, Any] = {}
    bindings: dict[str, int] = {}
    for name, raw in feeds.items():
        value = graph.values[name]
        shape = declared.get(name, value.shape) if declared is not None else value.shape
        want = value.dtype
        if not want:  # not a tensor input (sequence, map, optional): passed to the kernels as given
            if raw is None or isinstance(raw, list | tuple | dict):
                arrays[name] = raw
                continue
        arr = _as_array(name, raw, want, shape)
        try:
            got_dtype = ort_graph.from_numpy_dtype(arr.dtype)
        except (ValueError, KeyError, TypeError):
            got_dtype = None
        if want and got_dtype != want:
            np_want = ort_graph.to_numpy_dtype(want)
            raise InvalidInputError(
                f"input {name!r} has dtype {arr.dtype} but the model expects {ort_graph.dtype_name(want)} "
                f"({np_want}); convert it with .astype(np.{np_want})"
            )
        if shape is not None:
            if arr.ndim != len(shape):
                raise InvalidInputError(
                    f"input {name!r} has rank {arr.ndim} (shape {list(arr.shape)}) but the model expects rank "
                    f"{len(shape)} {list(shape)}"
                )
            for axis, (dim, got) in enumerate(zip(shape, arr.shape)):
                if isinstance(dim, int) and dim != got:
                    raise InvalidInputError(
                        f"input {name!r} dimension {axis} is {got} but the model fixes it to {dim} "
                        f"(expected shape {list(shape)}, got {list(arr.shape)})"
                    )
                if isinstance(dim, str):
                    if dim in bindings and bindings[dim] != got:
                        raise InvalidInputError(
                            f"symbolic dimension {dim!r} is {bindings[dim]} in one input but {got} in input "
                            f"{name!r} (axis {axis}); inputs sharing a dimension name must agree"
                        )
                    bindings[dim] = got
        arrays[name] = arr
    return arrays, bindings


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 20] + f"... ({len(text)} chars)"


def _expectation(want: int, shape: Any) -> str:
    dtype = f"numpy array of {ort_graph.to_numpy_dtype(want)}" if want else "numpy array"
    return dtype + (f" with shape {list(shape)}" if shape is not None else "")


def _as_array(name: str, raw: Any, want: int, shape: Any) -> np.ndarray:
    """A tensor feed as an ndarray. As in onnxruntime, a (nested) Python list converts to the input's
    dtype; None, dicts, tuples, strings and other objects are refused naming the expected array."""
    if isinstance(raw, np.ndarray):
        return raw
    if isinstance(raw, np.generic | bool | int | float | complex):
        return np.asarray(raw)
    if isinstance(raw, list):
        np_want = ort_graph.to_numpy_dtype(want) if want else None
        try:
            arr = np.array(raw, dtype=np_want)
        except (ValueError, TypeError, OverflowError) as e:
            raise InvalidInputError(
                f"input {name!r}: the list {reprlib.repr(raw)} does not convert to a {_expectation(want, shape)} "
                f"({type(e).__name__}: {_cut(str(e))}); pass a numpy array") from e
        if arr.dtype == object and np_want != np.dtype(object):
            raise InvalidInputError(f"input {name!r}: the list {reprlib.repr(raw)} is not a rectangular array; "
                                    f"pass a {_expectation(want, shape)}")
        return arr
    if hasattr(raw, "__array__") or hasattr(raw, "__array_interface__"):
        try:
            return np.asarray(raw)
        except Exception as e:  # noqa: BLE001 - a foreign array type: say which input it was
            raise InvalidInputError(f"input {name!r}: {type(raw).__name__} does not convert to a numpy array "
                                    f"({type(e).__name__}: {_cut(str(e))}); pass a {_expectation(want, shape)}") from e
    what = "None" if raw is None else f"a {type(raw).__name__} {reprlib.repr(raw)}"
    raise InvalidInputError(f"input {name!r} is {what}, but the model expects a {_expectation(want, shape)}; "
                            "pass a numpy array (np.asarray(...))")


def _token_limit(graph: Graph, name: str) -> int:
    """For integer ids feeding an embedding Gather, the table's row count; else 16."""
    for node in graph.values[name].consumers:
        if node.op_type == "Gather" and len(node.inputs) > 1 and node.inputs[1] == name and node.inputs[0] in graph.initializers:
            return int(graph.initializers[node.inputs[0]].dims[0])
    return 16


def host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 2**63 - 1


def _checked_shape(name: str, shape: tuple[int, ...], dtype: Any, declared: Any, room: int,
                   room_is_memory: bool) -> int:
    """The bytes of a generated input, or InvalidInputError naming it when a dim is negative or it cannot fit."""
    bad = [d for d in shape if not isinstance(d, int) or d < 0]
    if bad:
        raise InvalidInputError(f"input {name!r} declares shape {list(declared)} with dimension {bad[0]!r}; a "
                                "dimension is an integer >= 0 — fix the model's input shape or pass the input "
                                f"with --input {name}=file.npy")
    nbytes = int(np.dtype(dtype).itemsize)
    for d in shape:
        nbytes *= d
    if nbytes > room:
        limit = (f"this machine's {host_memory()} bytes of memory" if room_is_memory
                 else "the 2**63-1 bytes a memory plan can size")
        raise InvalidInputError(f"generated input {name!r} of shape {list(shape)} ({np.dtype(dtype).name}) would take "
                                f"{nbytes} bytes (with the inputs before it), more than {limit}; give smaller "
                                "--dim values (free_dimension_overrides)")
    return nbytes


def generated_shapes(graph: Graph, dims: Mapping[str, int] | None = None,
                     materialize: bool = True) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each required input's shape and dtype at `dims` (else `default_dims`), checked: a negative dim, or inputs
    larger than the host's memory (`materialize`) or than a plan can size, are an InvalidInputError naming it."""
    dims = default_dims(graph, dims)
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    room = host_memory() if materialize else 2**63 - 1
    for name in required_inputs(graph):
        v = graph.values[name]
        if v.shape is None:
            raise InvalidInputError(f"input {name!r} has unknown rank; pass it with --input {name}=file.npy")
        shape = tuple(dims[d] if isinstance(d, str) else (1 if d is None else d) for d in v.shape)
        np_dtype = np.dtype(ort_graph.to_numpy_dtype(v.dtype))
        room -= _checked_shape(name, shape, np_dtype, v.shape, room, materialize)
        out[name] = (shape, np_dtype)
    return out


def generate_inputs(graph: Graph, dims: Mapping[str, int] | None = None, seed: int = 0,
                    materialize: bool = True) -> dict[str, np.ndarray]:
    """Inputs for every required graph input: symbolic dims from `dims`, else what the model pins or the
    documented default (`_input_defaults.default_dims`; `ortrun run` passes `fitted_dims`, checked against the
    graph), checked as `generated_shapes` checks them. `materialize=False` gives read-only zero views of the
    shapes (no memory: enough for planning)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, (shape, np_dtype) in generated_shapes(graph, dims, materialize).items():
        if not materialize:
            feeds[name] = np.broadcast_to(np.zeros((), np_dtype), shape)
        elif "mask" in name.lower():
            feeds[name] = np.ones(shape, np_dtype)
        elif np.issubdtype(np_dtype, np.integer):
            feeds[name] = rng.integers(0, _token_limit(graph, name), shape).astype(np_dtype)
        elif np_dtype == np.bool_:
            feeds[name] = rng.random(shape) > 0.5
        else:
            feeds[name] = rng.standard_normal(shape).astype(np_dtype)
    return feeds
