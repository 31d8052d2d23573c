"""The graph inputs' dynamic axes, and the overrides and max shapes that fix or bound them.

Every dynamic axis has an address, `INPUT.AXIS` (`_dimspec`); an axis the file leaves unnamed (a negative
`dim_value`, no value, `?`) takes that address as its symbol, so it resolves, plans and is reported like a
named one. `input_shapes` turns `dims` (symbols or addresses) and `max_shapes` into the input shapes
resolution starts from, and the overrides by symbol that the rest of resolution applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ._dimspec import axis_name, format_shape, split_axis_name
from ._errors import ShapeResolutionError
from ._ir import Graph, Shape


def named_inputs(graph: Graph) -> dict[str, Shape | None]:
    """Each graph input's shape (initializers excluded), every unnamed axis named `INPUT.AXIS`."""
    out: dict[str, Shape | None] = {}
    for name in graph.inputs:
        if name in graph.initializers:
            continue
        shape = graph.values[name].shape
        out[name] = None if shape is None else tuple(axis_name(name, i) if d is None else d
                                                     for i, d in enumerate(shape))
    return out


def dynamic_axes(inputs: Mapping[str, Shape | None]) -> list[tuple[str, int, str]]:
    """(input, axis, symbol) of every symbolic axis of the (named) inputs, in input order."""
    return [(n, i, d) for n, shape in inputs.items() for i, d in enumerate(shape or ()) if isinstance(d, str)]


def _addresses(inputs: Mapping[str, Shape | None]) -> str:
    seen: dict[str, list[str]] = {}
    for n, i, d in dynamic_axes(inputs):
        seen.setdefault(d, []).append(axis_name(n, i))
    if not seen:
        return "the model's inputs have no dynamic dimension"
    return "its dynamic dimensions: " + ", ".join(s if a == [s] else f"{s} ({', '.join(a)})" for s, a in seen.items())


def by_symbol(inputs: Mapping[str, Shape | None], dims: Mapping[str, int]) -> dict[str, int]:
    """Overrides keyed by symbol: an `INPUT.AXIS` address becomes the axis' symbol (a static axis must agree)."""
    symbols = {d for _, _, d in dynamic_axes(inputs)}
    out: dict[str, int] = {}
    for name, value in dims.items():
        if not isinstance(value, int | np.integer) or value < 0:
            raise ShapeResolutionError(f"dimension override {name}={value!r} must be a non-negative integer, "
                                       f"e.g. {name}=1")
        target: object = name
        if name not in symbols:
            where = split_axis_name(name)
            shape = inputs.get(where[0]) if where else None
            if where is None or shape is None or where[1] >= len(shape):
                raise ShapeResolutionError(
                    f"dimension override {name!r} names no symbolic dimension (or INPUT.AXIS) of the model's "
                    f"inputs; {_addresses(inputs)}")
            target = shape[where[1]]
            if isinstance(target, int):
                if target != int(value):
                    raise ShapeResolutionError(
                        f"dimension override {name}={value} contradicts axis {where[1]} of input {where[0]!r}, "
                        f"which the model fixes at {target} (declared {list(shape)!r}); leave it out")
                continue
        if target in out and out[target] != int(value):
            raise ShapeResolutionError(f"dimension override {name}={value} contradicts {target}={out[target]} "
                                       "given too (the same dimension); give it one value")
        out[str(target)] = int(value)
    return out


def _check_max_shapes(graph: Graph, inputs: Mapping[str, Shape | None], max_shapes: Mapping[str, Sequence[int]]) -> None:
    for name, shape in max_shapes.items():
        if name not in inputs:
            raise ShapeResolutionError(f"max shape given for {name!r}, which is not a graph input; inputs: "
                                       f"{list(inputs)!r}")
        declared = inputs[name]
        if declared is not None and len(declared) != len(shape):
            raise ShapeResolutionError(f"max shape {list(shape)!r} for input {name!r} has rank {len(shape)}, "
                                       f"but the input's rank is {len(declared)} (declared {list(declared)!r})")
        for axis, (d, m) in enumerate(zip(declared or (), shape)):
            if isinstance(d, int) and d != m:
                fixed = [d if isinstance(d, int) else m for d, m in zip(declared, shape)]
                raise ShapeResolutionError(
                    f"max shape {list(shape)!r} for input {name!r} contradicts its static dimension {d} at axis "
                    f"{axis} (declared {list(graph.values[name].shape or ())!r}); give e.g. "
                    f"max_shapes={{{name!r}: {fixed!r}}} (ortrun: --max-shape {format_shape(name, fixed)})")


def input_shapes(graph: Graph, dims: Mapping[str, int], max_shapes: Mapping[str, Sequence[int]]
                 ) -> tuple[dict[str, Shape | None], dict[str, int]]:
    """The shapes resolution starts from (every input, its unnamed axes named) and the overrides by symbol."""
    inputs = named_inputs(graph)
    symbol_dims = by_symbol(inputs, dims)
    _check_max_shapes(graph, inputs, max_shapes)
    bound = _bounds(inputs, max_shapes)  # a symbol bounded through one input bounds every input sharing it
    out: dict[str, Shape | None] = {n: graph.values[n].shape for n in graph.inputs}  # initializers as they are
    for name, shape in inputs.items():
        if name in max_shapes:
            out[name] = tuple(int(d) for d in max_shapes[name])
        elif shape is not None:
            out[name] = tuple(symbol_dims.get(d, bound.get(d, d)) if isinstance(d, str) else d for d in shape)
        else:
            out[name] = None
    return out, symbol_dims


def dynamic_dims_hint(graph: Graph, shown: int = 5) -> str:
    """Each input with a dynamic axis (its current shape), the axes, and the option and flag that fix them:
    `input 'x' [x.0, 3, x.2, x.3]: dynamic axis 0 (unnamed), ...; give max_shapes={'x': [N, 3, N, N]} ...`."""
    parts: list[str] = []
    for name, shape in named_inputs(graph).items():
        if shape is None:
            parts.append(f"input {name!r} has no declared shape: give max_shapes={{{name!r}: [d0, d1, ...]}} "
                         f"(ortrun: --max-shape {name}=[d0,d1,...])")
            continue
        axes = [(i, d) for i, d in enumerate(shape) if isinstance(d, str)]
        if not axes:
            continue
        example = ["N" if isinstance(d, str) else d for d in shape]
        first = axes[0][1]  # a named axis by its name (it may be shared), an unnamed one by its address
        which = ", ".join(f"axis {i} ({'unnamed' if d == axis_name(name, i) else repr(d)})" for i, d in axes)
        parts.append(f"input {name!r} {list(shape)!r}: dynamic {which}; give its largest shape with "
                     f"max_shapes={{{name!r}: [{', '.join(map(str, example))}]}} (ortrun: --max-shape "
                     f"{format_shape(name, example)}) or one axis with free_dimension_overrides={{{first!r}: N}} "
                     f"(ortrun: --dim {first}=N), N the size")
    more = f"; and {len(parts) - shown} more input(s)" if len(parts) > shown else ""
    return "; ".join(parts[:shown]) + more


def sizes_by_symbol(graph: Graph, dims: Mapping[str, int], max_shapes: Mapping[str, Sequence[int]] | None = None
                    ) -> tuple[dict[str, int], dict[str, int]]:
    """`dims` keyed by symbol, and the size `max_shapes` give each symbol of the inputs they bound (the largest
    where inputs share one); both checked as `resolve_shapes` checks them. The graph is not changed."""
    _, symbol_dims = input_shapes(graph, dims, max_shapes or {})
    return symbol_dims, _bounds(named_inputs(graph), max_shapes or {})


def _bounds(inputs: Mapping[str, Shape | None], max_shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Each symbol of a bounded input with its bound (equal at run time in every input: the largest)."""
    bound: dict[str, int] = {}
    for name, shape in max_shapes.items():
        for d, m in zip(inputs[name] or (), shape):
            if isinstance(d, str):
                bound[d] = max(bound.get(d, 0), int(m))
    return bound
