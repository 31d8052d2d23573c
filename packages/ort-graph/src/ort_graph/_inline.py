"""Initializers stored inline in an .onnx file (TensorProto.raw_data), mapped from the file instead of read.

`load` on a path memory-maps the file and walks three levels of it with the strict wire reader (`_wire`):
ModelProto field 7 (graph) -> GraphProto field 5 (initializer) -> TensorProto field 9 (raw_data). The
model is parsed from a copy of the file with every large raw_data field left out (the tensor marked
external instead); each such tensor then reads its bytes from the .onnx file itself, memory-mapped when
first needed, like external data (same file checks: the file is the model file, its identity and size are
checked again when mapped). A 1.5 GB model with inline weights costs the size of its graph, not 1.5 GB.

Only the main graph's initializers are mapped. Left inline (read as before): raw_data under `min_bytes`,
tensors inside subgraphs (If/Loop/Scan bodies), Constant node attributes, sparse initializers, typed data
fields (float_data, ...), a tensor with more than one raw_data field or any external_data / data_location
entry of its own, and a tensor whose raw_data length does not match its data type and dims (its bytes are
put back, so the usual checks name the problem exactly as without mapping).
"""

from __future__ import annotations

import os
import pathlib

import attrs
from onnx import ModelProto, TensorProto

from ._dtypes import tensor_nbytes
from ._external import ExternalLocation
from ._wire import LEN, VARINT, Buffer, Field, encode_varint, fields, malformed

MIN_BYTES = 1024  # raw_data under this stays inline: shape computation often reads small constants
MODEL_GRAPH, GRAPH_INITIALIZER = 7, 5
TENSOR_RAW_DATA, TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION = 9, 13, 14
_EXTERNAL_LOCATION = encode_varint(TENSOR_DATA_LOCATION << 3 | VARINT) + encode_varint(TensorProto.EXTERNAL)


@attrs.frozen
class InlineSpan:
    """The raw_data of the main graph's initializer number `index`: `length` bytes at `offset` in the file."""

    index: int
    offset: int
    length: int


@attrs.define
class _Stripper:
    buf: Buffer
    origin: str
    min_bytes: int
    spans: list[InlineSpan] = attrs.field(factory=list)
    initializers: int = 0  # initializers seen so far (repeated graph fields merge: the count runs on)

    def model(self) -> bytes:
        out: list[bytes] = []
        pos = 0  # the unchanged bytes from here on are copied in one piece
        for f in fields(self.buf, 0, len(self.buf), "the ModelProto", self.origin):
            if f.number == MODEL_GRAPH and f.wire == LEN:
                pos = self._replace(out, pos, f, self._graph(f))
        out.append(self.buf[pos:len(self.buf)])
        return b"".join(out)

    def _replace(self, out: list[bytes], pos: int, f: Field, body: bytes | None) -> int:
        """Field `f` with `body` as its payload after the unchanged bytes from `pos` (None: `f` unchanged too);
        where the unchanged bytes now start."""
        if body is None:
            return pos
        out += (self.buf[pos:f.start], self.buf[f.start:f.head], encode_varint(len(body)), body)
        return f.end

    def _graph(self, g: Field) -> bytes | None:
        out: list[bytes] = []
        pos = g.data
        where = f"the graph (ModelProto field {MODEL_GRAPH} at byte {g.start})"
        for f in fields(self.buf, g.data, g.end, where, self.origin):  # nodes and all: only initializers change
            if f.number == GRAPH_INITIALIZER and f.wire == LEN:
                pos = self._replace(out, pos, f, self._tensor(f, self.initializers))
                self.initializers += 1
        if not out:
            return None
        out.append(self.buf[pos:g.end])
        return b"".join(out)

    def _tensor(self, t: Field, index: int) -> bytes | None:
        """The tensor without its raw_data and marked external, or None where it stays as it is."""
        raw: list[Field] = []
        own_location = False
        where = f"initializer #{index} (GraphProto field {GRAPH_INITIALIZER} at byte {t.start})"
        for f in fields(self.buf, t.data, t.end, where, self.origin):
            if f.number == TENSOR_RAW_DATA:
                raw.append(f)
            elif f.number == TENSOR_EXTERNAL_DATA or (f.number == TENSOR_DATA_LOCATION
                                                      and not (f.wire == VARINT and f.value == 0)):
                own_location = True
        if own_location or len(raw) != 1 or raw[0].wire != LEN or raw[0].value < self.min_bytes:
            return None
        r = raw[0]
        self.spans.append(InlineSpan(index=index, offset=r.data, length=r.value))
        return self.buf[t.data:r.start] + self.buf[r.end:t.end] + _EXTERNAL_LOCATION


def strip_inline_weights(buf: Buffer, origin: str, min_bytes: int = MIN_BYTES) -> tuple[bytes, list[InlineSpan]]:
    """The model's bytes without the raw_data of its large initializers, and where those bytes are."""
    stripper = _Stripper(buf, origin, min_bytes)
    return stripper.model(), stripper.spans


def locate_inline_weights(mp: ModelProto, spans: list[InlineSpan], buf: Buffer, path: pathlib.Path,
                          st: os.stat_result, origin: str) -> dict[int, ExternalLocation]:
    """Where each stripped initializer's bytes lie in the model file, by its index in `mp.graph.initializer`.
    A tensor whose bytes do not match its type and dims gets them back inline (the usual checks report it)."""
    located: dict[int, ExternalLocation] = {}
    initializers = mp.graph.initializer
    real = pathlib.Path(os.path.realpath(path))
    for span in spans:
        if span.index >= len(initializers):
            raise malformed(origin, span.offset, f"initializer #{span.index} found in the file is missing after "
                            f"parsing (the graph has {len(initializers)})")
        t = initializers[span.index]
        dims = list(t.dims)
        need = tensor_nbytes(t.data_type, dims) if all(d >= 0 for d in dims) else None
        if need != span.length:
            t.ClearField("data_location")
            t.raw_data = buf[span.offset:span.offset + span.length]
            continue
        for key, value in (("location", path.name), ("offset", str(span.offset)), ("length", str(span.length))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        located[span.index] = ExternalLocation(path=real, offset=span.offset, length=span.length,
                                               device=st.st_dev, inode=st.st_ino, in_model_file=True)
    return located
