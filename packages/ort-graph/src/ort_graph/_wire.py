"""A strict reader of protobuf wire format over an untrusted buffer (a memory-mapped model file).

Nothing is decoded beyond a field's tag, a varint's value and a length prefix: a field is a span of
offsets, so a caller can copy the bytes around a field without reading the field itself. Every varint is
at most 10 bytes, every length stays inside the message that encloses it, field number 0 and wire types
other than 0, 1, 2 and 5 (groups are not used by ONNX) are refused. A problem is a ModelLoadError naming
the byte offset and the message it was found in; no read goes past the span it was given.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import attrs

from ._errors import ModelLoadError

MAX_VARINT_BYTES = 10
MAX_FIELD_NUMBER = (1 << 29) - 1
VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
_FIXED = {FIXED64: 8, FIXED32: 4}


class Buffer(Protocol):
    """bytes, bytearray or mmap: indexing gives an int, slicing gives bytes."""

    def __getitem__(self, key, /): ...
    def __len__(self) -> int: ...


@attrs.frozen
class Field:
    """One field: the tag at [start, head), the payload at [data, end). `value` is a VARINT field's value
    and a LEN field's payload length (0 for fixed-size fields)."""

    number: int
    wire: int
    start: int
    head: int
    data: int
    end: int
    value: int


def malformed(origin: str, offset: int, problem: str) -> ModelLoadError:
    return ModelLoadError(f"{origin} is not a valid ONNX model: at byte offset {offset}, {problem}; the file is "
                          "truncated or corrupt — re-download or re-export it")


def read_varint(buf: Buffer, pos: int, end: int, where: str, origin: str) -> tuple[int, int]:
    """The varint at `pos` (at most 10 bytes, inside [pos, end)) and the offset after it."""
    value = 0
    for i in range(MAX_VARINT_BYTES):
        if pos + i >= end:
            raise malformed(origin, pos, f"a varint in {where} runs past its end (byte {end})")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value & 0xFFFF_FFFF_FFFF_FFFF, pos + i + 1
    raise malformed(origin, pos, f"a varint in {where} is longer than {MAX_VARINT_BYTES} bytes")


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def fields(buf: Buffer, start: int, end: int, where: str, origin: str) -> Iterator[Field]:
    """The fields of the message encoded at [start, end), in file order."""
    pos = start
    while pos < end:
        key, head = read_varint(buf, pos, end, where, origin)
        number, wire = key >> 3, key & 7
        if number == 0 or number > MAX_FIELD_NUMBER:
            raise malformed(origin, pos, f"{where} has a field with number {number}, outside protobuf's 1..{MAX_FIELD_NUMBER}")
        value = 0
        if wire == VARINT:
            value, after = read_varint(buf, head, end, where, origin)
            data = head
        elif wire in _FIXED:
            data, after = head, head + _FIXED[wire]
            if after > end:
                raise malformed(origin, pos, f"field {number} of {where} needs {_FIXED[wire]} bytes, past its end "
                                f"(byte {end})")
        elif wire == LEN:
            value, data = read_varint(buf, head, end, where, origin)
            if value > end - data:
                raise malformed(origin, pos, f"field {number} of {where} declares {value} bytes, but only "
                                f"{end - data} remain in it (it ends at byte {end})")
            after = data + value
        else:
            raise malformed(origin, pos, f"field {number} of {where} has wire type {wire} (only 0, 1, 2 and 5 are "
                            "read; groups, 3 and 4, are not used by ONNX)")
        yield Field(number, wire, pos, head, data, after, value)
        pos = after
