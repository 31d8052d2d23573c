"""The sizes generated inputs take where nobody gave one (`ortrun run` / `ortrun plan` without `--dim`).

In order: what the caller gives; what the model itself says (a `metadata_props` entry naming the dimension or
the image size, a dim the file declares by name in `value_info` where inference computes a number); else a
documented default: `past*` 0, `*seq*` / `*len*` 8, an image's height and width 224, any other 1 (`total*`:
past + new tokens). `fitted_dims` then checks the defaults against the graph: where shape inference refuses a
node at them (a Reshape or Concat that only works at some heights), it tries other sizes of the assumed dims
and keeps the first that passes; where none does, an InvalidInputError names the inputs, the sizes tried and
the `--dim` that gives the real ones.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping

import numpy as np

import ort_graph
from ort_graph import Graph, Model

from ._errors import InvalidInputError

SEQUENCE_DEFAULT = 8
IMAGE_DEFAULT = 224  # an image's height and width when nothing says otherwise (a multiple of 32: CNN strides)
# the sizes tried, in order, where shape inference refuses the default: conventional sizes below it first
IMAGE_SIZES = (IMAGE_DEFAULT, 192, 160, 128, 96, 64, 32, 256, 320, 384, 448, 512, 640)
SEQUENCE_SIZES = (SEQUENCE_DEFAULT, 1, 16, 32, 64, 128, 256, 512)
OTHER_SIZES = (1, 2, 4, 8, 16, 32, 64)
MAX_TRIALS = 40  # shape resolutions at most (a tenth of a second each on an 800-node CNN)
# metadata keys exporters write for an image input's size: Ultralytics `imgsz` "[640, 640]", and the like
IMAGE_SIZE_KEYS = ("imgsz", "image_size", "img_size", "input_size")


def _image_inputs(graph: Graph) -> list[tuple[str, tuple]]:
    """(name, shape) of image inputs: rank-4 float inputs whose axis 1 is a static 1, 3 or 4 channels (NCHW)."""
    out = []
    for name in graph.inputs:
        if name in graph.initializers:
            continue
        v = graph.values[name]
        shape = v.shape
        if shape is None or len(shape) != 4 or shape[1] not in (1, 3, 4) or not v.dtype:
            continue
        if np.issubdtype(ort_graph.to_numpy_dtype(v.dtype), np.floating):
            out.append((name, shape))
    return out


def _spatial(d: object) -> bool:
    return isinstance(d, str) and "seq" not in d.lower() and "len" not in d.lower()


def image_axes(graph: Graph) -> set[str]:
    """The symbolic height and width of image inputs (axes 2 and 3 of `_image_inputs`). A CNN fed a 1 x 1 image
    fails in its first pooling layer."""
    return {d for _, shape in _image_inputs(graph) for d in shape[2:] if _spatial(d)}


def default_dim(symbol: str) -> int:
    """The documented default for a symbolic dimension with no `--dim`: past*->0, *seq*->8, else 1."""
    s = symbol.lower()
    if "past" in s:
        return 0
    if "seq" in s or "length" in s or "len" in s:
        return SEQUENCE_DEFAULT
    return 1


def symbol_hints(graph: Graph) -> dict[str, int]:
    """Symbolic dims the model itself pins: a dim the file declares by name where inference computed a
    number (the genai builder's `kv_cache_dim` is the head size GroupQueryAttention computes)."""
    hints: dict[str, int] = {}
    for name, declared in graph.declared_value_info.items():
        v = graph.values.get(name)
        if v is None or v.shape is None or declared.shape is None or len(v.shape) != len(declared.shape):
            continue
        for d, got in zip(declared.shape, v.shape):
            if isinstance(d, str) and isinstance(got, int):
                hints.setdefault(d, got)
    return hints


def _ints(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"-?\d+", text)] if re.fullmatch(r"[\s\[\](),\d-]*", text) else []


def metadata_dims(graph: Graph, metadata: Mapping[str, str]) -> dict[str, int]:
    """Input dims the exporter's `metadata_props` give: an entry named as the dimension (`batch` "1"), and an
    image input's size (`imgsz` "[640, 640]": height, width; one number: both; [C, H, W] / [N, C, H, W])."""
    out: dict[str, int] = {}
    for s in order_of_symbols(graph):
        got = _ints(metadata.get(s, "x"))
        if len(got) == 1 and got[0] >= 0:
            out[s] = got[0]
    size = next((_ints(metadata[k]) for k in IMAGE_SIZE_KEYS if k in metadata), [])
    if len(size) == 1:
        size = size * 2
    if len(size) in (2, 3, 4) and all(d > 0 for d in size):
        for _, shape in _image_inputs(graph):
            for d, value in zip(shape[2:], size[-2:]):
                if _spatial(d):
                    out.setdefault(d, value)
    return out


def default_dims(graph: Graph, dims: Mapping[str, int] | None = None,
                 metadata: Mapping[str, str] | None = None) -> dict[str, int]:
    """A size for every symbolic dim of the required inputs: `dims`, else `metadata_dims`, else `symbol_hints`,
    else the documented default (`default_dim`; an image's height and width IMAGE_DEFAULT; total*: past + seq)."""
    out = {**symbol_hints(graph), **metadata_dims(graph, metadata or {}), **dict(dims or {})}
    symbols = order_of_symbols(graph)
    for s in sorted(image_axes(graph) - set(out)):
        out[s] = IMAGE_DEFAULT
    for s in sorted(symbols):
        if s not in out and "total" not in s.lower():
            out[s] = default_dim(s)
    past = next((v for k, v in out.items() if "past" in k.lower()), 0)
    seq = next((v for k, v in out.items() if "seq" in k.lower() and "past" not in k.lower()
                and "total" not in k.lower()), SEQUENCE_DEFAULT)
    for s in symbols:
        out.setdefault(s, past + seq)  # total_* dims: past + new tokens
    return out


def order_of_symbols(graph: Graph) -> list[str]:
    """The symbolic dims of the required inputs, each once, in input and axis order."""
    return list(dict.fromkeys(d for n in graph.inputs if n not in graph.initializers
                              for d in (graph.values[n].shape or ()) if isinstance(d, str)))


def feed_dims(graph: Graph, feeds: Mapping[str, object]) -> dict[str, int]:
    """The symbolic dims that given input arrays (`--input` files) bind, where an array's rank is its input's (a
    wrong rank or a disagreement is for `validate_feeds` to report)."""
    out: dict[str, int] = {}
    for name, arr in feeds.items():
        v = graph.values.get(name)
        shape = getattr(arr, "shape", None)
        if v is None or v.shape is None or shape is None or len(shape) != len(v.shape):
            continue
        for d, got in zip(v.shape, shape):
            if isinstance(d, str):
                out.setdefault(d, int(got))
    return out


def _sizes(symbol: str, images: set[str]) -> tuple[int, ...]:
    if symbol in images:
        return IMAGE_SIZES
    return SEQUENCE_SIZES if default_dim(symbol) == SEQUENCE_DEFAULT else OTHER_SIZES


def _refusal(model: Model, dims: Mapping[str, int]) -> str | None:
    """Why shape inference refuses a node of `model` at `dims` (the first refusal, any graph), or None. Resolves
    a copy (resolution fixes the inputs' shapes)."""
    symbols = {d for shape in ort_graph.named_inputs(model.graph).values() for d in shape or () if isinstance(d, str)}
    dims = {k: v for k, v in dims.items() if k in symbols}  # hints may name dims of other values
    model = ort_graph.copy_model(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort_graph.ShapeResolutionWarning)
        warnings.simplefilter("ignore", ort_graph.ShapeAnnotationWarning)
        try:
            ort_graph.resolve_shapes(model, dims)
        except ort_graph.MalformedNodeError as e:
            return str(e)
    graphs = [model.graph, *(sub for node in model.graph.walk() for sub in node.subgraphs)]
    for g in graphs:
        for node, why in g.shape_refusals.items():
            return f"node {node!r}: {why}"
    return None


def _trials(assumed: list[str], images: set[str], graph: Graph):
    """(symbol -> size) changes to try: one assumed dim at a time, then each image's height and width together."""
    for s in assumed:
        for size in _sizes(s, images)[1:]:
            yield {s: size}
    for _, shape in _image_inputs(graph):
        square = [d for d in shape[2:] if d in assumed and d in images]
        if len(square) == 2:
            for size in IMAGE_SIZES[1:]:
                yield dict.fromkeys(square, size)


def fitted_dims(model: Model, graph: Graph, dims: Mapping[str, int] | None = None
                ) -> tuple[dict[str, int], str | None]:
    """`default_dims` for `graph` (`model`'s, resolved with `dims`), the assumed ones checked against shape
    inference: the first trial (`_trials`) at which no node is refused, with a line saying what changed and why
    (None when the defaults pass); or InvalidInputError naming the inputs, the sizes tried and the `--dim` that
    gives real ones. What `dims` or the model itself says is kept."""
    given = dict(dims or {})
    chosen = default_dims(graph, given, model.metadata)
    said = {**symbol_hints(graph), **metadata_dims(graph, model.metadata), **given}
    assumed = [s for s in order_of_symbols(graph) if s not in said and "past" not in s.lower()
               and "total" not in s.lower()]
    first = _refusal(model, chosen) if assumed else None
    if first is None:
        return chosen, None
    images = image_axes(graph)
    assumed.sort(key=lambda s: s not in images)  # an image's height, then width, first: the usual constraint
    tried: dict[str, list[int]] = {s: [chosen[s]] for s in assumed}
    for n, change in enumerate(_trials(assumed, images, graph)):
        if n >= MAX_TRIALS:
            break
        for s, size in change.items():
            if size not in tried[s]:
                tried[s].append(size)
        candidate = default_dims(graph, {**said, **{s: chosen[s] for s in assumed}, **change}, model.metadata)
        if _refusal(model, candidate) is None:
            was = ", ".join(f"{k}={chosen[k]}" for k in change)
            now = ", ".join(f"{k}={v}" for k, v in change.items())
            return candidate, (f"shape inference refuses the default {was} ({first.split(':')[0]}); generating "
                               f"{now}, the first size tried that passes (--dim NAME=N gives the real one)")
    raise InvalidInputError(_no_default_text(graph, chosen, assumed, tried, first, said))


def _no_default_text(graph: Graph, chosen: dict[str, int], assumed: list[str], tried: dict[str, list[int]],
                     first: str, said: Mapping[str, int]) -> str:
    inputs = [n for n in graph.inputs if n not in graph.initializers
              and any(d in assumed for d in (graph.values[n].shape or ()))]
    shown = ", ".join(f"input {n!r} {list(graph.values[n].shape or ())}" for n in inputs)
    sizes = "; ".join(f"{s} in {v}" for s, v in tried.items())
    others = sorted(set(said) & set(order_of_symbols(graph)))  # hints may name dims of other values
    at = ", ".join(f"{s}={chosen[s]}" for s in [*assumed, *others])
    example = " ".join(f"--dim {s}=N" for s in assumed)
    together = ", an image's height and width also together" if len(image_axes(graph) & set(assumed)) > 1 else ""
    return (f"{shown}: no default size of its open dimensions passes shape inference (tried {sizes}: each alone{together}"
            f"{'; the others as given or as the model says' if others else ''}); at {at}, "
            f"{first}. Give the sizes the model takes with {example} (--dim NAME=N, NAME a dimension's name or "
            "INPUT.AXIS), --max-shape INPUT=[d0,d1,...], or feed real inputs with --input NAME=FILE.npy")
