"""One grammar for dynamic dimensions, used by every option and flag that sets them.

    NAME=N             one dimension: a symbolic name (`batch=1`) or an input's axis (`x.2=48`)
    INPUT=[d0,d1,...]  every axis of one input (`x=[1,3,48,320]`)

Entries are joined by `;` in one string (`session.max_shape_override`, a `max_shapes` string) and repeated on
the command line (`--dim batch=1 --dim x.2=48`, `--max-shape x=[1,3,48,320]`); the dict options take the same
names (`free_dimension_overrides={"x.2": 48}`, `max_shapes={"x": [1, 3, 48, 320]}`). The older
`INPUT:[d0,...]` spelling of a shape is still read.

A dynamic axis is one whose size the file leaves open: a symbolic name, a negative `dim_value` (paddle2onnx
writes -1), no value and no name, or the unnamed `?`. Every one is addressable as `INPUT.AXIS`; an axis the
file leaves unnamed is known by that name alone (so two unnamed axes are never taken as equal).

The CLI parses its `--dim` / `--max-shape` flags with these functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._errors import ShapeResolutionError

UNNAMED = "?"  # the name exporters give a dim they mean to leave unnamed (paddle2onnx)
_SHAPE = re.compile(r"([^:=\[\]]+?)\s*[=:]\s*\[\s*([^\]]*)\]")
_DIM = re.compile(r"([^=\[\];]+?)\s*=\s*(-?\d+)")
_AXIS = re.compile(r"(.+)\.(\d+)")
_DIGITS = 19  # at most 19 digits per size (int64); longer numbers are refused before int() reads them


class DimSpecError(ShapeResolutionError, ValueError):
    """A dimension or shape entry that does not follow the grammar (the message quotes it and shows the form)."""


def axis_name(input_name: str, axis: int) -> str:
    """The address of one axis of an input: `x.2`."""
    return f"{input_name}.{axis}"


def split_axis_name(name: str) -> tuple[str, int] | None:
    """`x.2` -> ('x', 2); None when the name does not end in `.AXIS`."""
    m = _AXIS.fullmatch(name)
    return (m.group(1), int(m.group(2))) if m else None


def _q(text: str) -> str:
    """The text quoted, cut to 80 characters (a 4,000-digit entry is not repeated whole)."""
    return repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text)} chars)"


def _entries(text: str) -> list[str]:
    return [e.strip() for e in str(text).split(";") if e.strip()]


def _ints(entry: str, body: str, text: str) -> list[int]:
    parts = [p.strip() for p in body.split(",")]
    if parts == [""]:
        return []
    if not all(re.fullmatch(rf"\d{{1,{_DIGITS}}}", p) for p in parts):
        raise DimSpecError(f"shape entry {_q(entry)} in {_q(text)} has a dimension that is not an integer >= 0; "
                           f"give every axis a size of at most {_DIGITS} digits, e.g. 'x=[1,3,48,320]'")
    return [int(p) for p in parts]


def parse_shapes(text: str) -> dict[str, list[int]]:
    """`x=[1,3,48,320];mask=[1,8]` (or the older `x:[1,3,48,320]`) -> {input name: shape}."""
    out: dict[str, list[int]] = {}
    for entry in _entries(text):
        m = _SHAPE.fullmatch(entry)
        if not m:
            raise DimSpecError(f"max shape entry {_q(entry)} in {_q(text)} is malformed; expected 'INPUT=[d0,d1,...]' "
                               "entries separated by ';', e.g. 'input_ids=[8,4096];attention_mask=[8,4096]'")
        out[m.group(1).strip()] = _ints(entry, m.group(2), text)
    return out


def parse_dims(text: str) -> dict[str, int]:
    """`batch=1;x.2=48` -> {dimension name or INPUT.AXIS: size}."""
    out: dict[str, int] = {}
    for entry in _entries(text):
        m = _DIM.fullmatch(entry)
        if not m or m.group(2).startswith("-") or len(m.group(2)) > _DIGITS:
            raise DimSpecError(f"dimension entry {_q(entry)} in {_q(text)} is malformed; expected 'NAME=N' with N an "
                               f"integer >= 0 of at most {_DIGITS} digits and NAME a symbolic dimension or INPUT.AXIS, "
                               "e.g. 'batch=1' or 'x.2=48'")
        out[m.group(1).strip()] = int(m.group(2))
    return out


def format_shape(name: str, shape: Sequence[object]) -> str:
    """The grammar's spelling of a shape entry: `x=[1,3,48,320]`."""
    return f"{name}=[{','.join(str(d) for d in shape)}]"
