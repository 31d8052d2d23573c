"""Inline initializers (raw_data inside the .onnx file) are memory-mapped from the file when loading from a path:
same values as reading them, a malformed file is a ModelLoadError naming the byte offset, never an over-read."""

import os
import pathlib

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_graph._inline import strip_inline_weights
from ort_graph._wire import encode_varint

FUZZ = settings(derandomize=True, max_examples=300, deadline=10_000, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _model(big=(16, 32), small=(4,), dtype=np.float32) -> onnx.ModelProto:
    """y = (x @ W) + b with W large (mapped) and b small (inline)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal(big).astype(dtype), "W")
    b = numpy_helper.from_array(rng.standard_normal(small).astype(dtype), "b")
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
                           helper.make_node("Add", ["h", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", elem, [2, big[0]])],
                          [helper.make_tensor_value_info("y", elem, [2, big[1]])], [w, b] if small else [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _write(tmp_path: pathlib.Path, data: bytes, name="m.onnx") -> pathlib.Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _graph_field_with_initializer(tensor: bytes) -> bytes:
    graph = b"\x2a" + encode_varint(len(tensor)) + tensor
    return b"\x3a" + encode_varint(len(graph)) + graph


def _same_model(a: ort_graph.Model, b: ort_graph.Model) -> None:
    assert list(a.graph.initializers) == list(b.graph.initializers)
    for name, t in a.graph.initializers.items():
        x, y = t.numpy(), b.graph.initializers[name].numpy()
        assert (x.dtype, x.shape, t.dims, t.dtype) == (y.dtype, y.shape, b.graph.initializers[name].dims,
                                                       b.graph.initializers[name].dtype), name
        assert x.tobytes() == y.tobytes(), name
    assert [(n.op_type, n.inputs, n.outputs) for n in a.graph.nodes] == [(n.op_type, n.inputs, n.outputs)
                                                                         for n in b.graph.nodes]


def test_large_inline_initializers_are_mapped_from_the_model_file(tmp_path):
    mp = _model()
    path = _write(tmp_path, mp.SerializeToString())
    mapped, read = ort_graph.load(path), ort_graph.load(path, map_inline_weights=False)
    w, b = mapped.graph.initializers["W"], mapped.graph.initializers["b"]
    assert w.external is not None and w.external.in_model_file and not w.is_external
    assert w.external.path == path.resolve() and w.external.length == 16 * 32 * 4
    assert not w.proto.HasField("raw_data") and b.external is None
    assert read.graph.initializers["W"].external is None
    assert path.read_bytes()[w.external.offset:w.external.offset + w.external.length] == mp.graph.initializer[0].raw_data
    _same_model(mapped, read)
    np.testing.assert_array_equal(w.numpy(), numpy_helper.to_array(mp.graph.initializer[0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int8, np.float64])
def test_mapped_values_are_identical_and_element_aligned(tmp_path, dtype):
    path = _write(tmp_path, _model(big=(8, 64), small=(16,), dtype=dtype).SerializeToString())
    mapped = ort_graph.load(path, map_inline_min_bytes=16)
    _same_model(mapped, ort_graph.load(path, map_inline_weights=False))
    for t in mapped.graph.initializers.values():
        assert t.external is not None  # both W and b are >= 16 bytes
        assert t.numpy().ctypes.data % t.numpy().dtype.alignment == 0


def test_threshold_keeps_small_raw_data_inline(tmp_path):
    path = _write(tmp_path, _model(big=(4, 8)).SerializeToString())  # W: 128 bytes
    assert ort_graph.load(path).graph.initializers["W"].external is None
    assert ort_graph.load(path, map_inline_min_bytes=128).graph.initializers["W"].external is not None
    assert ort_graph.load(path, map_inline_min_bytes=129).graph.initializers["W"].external is None


def test_bytes_source_is_parsed_as_before():
    m = ort_graph.load(_model().SerializeToString())
    assert all(t.external is None for t in m.graph.initializers.values())


def test_saving_a_mapped_model_keeps_its_weights_inline(tmp_path):
    path = _write(tmp_path, _model().SerializeToString())
    out = ort_graph.save(ort_graph.load(path), tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx.data").exists()
    assert len(onnx.load(out).graph.initializer[0].raw_data) == 16 * 32 * 4
    _same_model(ort_graph.load(out, map_inline_weights=False), ort_graph.load(path, map_inline_weights=False))
    ext = ort_graph.save(ort_graph.load(path), tmp_path / "ext.onnx", external_data=True, size_threshold=1 << 20)
    assert onnx.load(ext, load_external_data=False).graph.initializer[0].HasField("raw_data")  # under threshold


def test_repeated_graph_fields_merge_and_keep_their_indices(tmp_path):
    """Protobuf merges a repeated message field: a file with three `graph` fields has one graph, whose
    initializers are those of each field in file order."""
    mp = _model(small=(300,))
    w, b = (t.SerializeToString() for t in mp.graph.initializer)
    del mp.graph.initializer[:]
    data = mp.SerializeToString() + _graph_field_with_initializer(w) + _graph_field_with_initializer(b)
    parsed = onnx.ModelProto()
    parsed.ParseFromString(data)
    assert [t.name for t in parsed.graph.initializer] == ["W", "b"] and len(parsed.graph.node) == 2
    path = _write(tmp_path, data)
    mapped = ort_graph.load(path)
    assert [t.external is not None for t in mapped.graph.initializers.values()] == [True, True]
    _same_model(mapped, ort_graph.load(path, map_inline_weights=False))


def test_raw_data_not_matching_its_dims_fails_as_without_mapping(tmp_path):
    mp = _model()
    mp.graph.initializer[0].raw_data = mp.graph.initializer[0].raw_data[:-4]
    path = _write(tmp_path, mp.SerializeToString())
    errors = []
    for mapping in (True, False):
        with pytest.raises(ort_graph.TensorDataError) as info:
            ort_graph.load(path, map_inline_weights=mapping)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "2044 bytes of raw_data" in errors[0]


def test_tensor_with_its_own_location_fields_is_left_as_written(tmp_path):
    mp = _model()
    mp.graph.initializer[0].data_location = TensorProto.DEFAULT  # explicit default: still mapped
    mp.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.ones(512, np.float32), "b"))
    entry = mp.graph.initializer[1].external_data.add()  # an external_data entry on an inline tensor: not mapped
    entry.key, entry.value = "checksum", "x"
    mp.graph.node[1].input[1] = "b"
    path = _write(tmp_path, mp.SerializeToString())
    m = ort_graph.load(path)
    assert m.graph.initializers["W"].external is not None and m.graph.initializers["b"].external is None


@pytest.mark.parametrize("data", [b"", b"\x08\x08"], ids=["empty", "no-graph"])
def test_files_without_a_model_fail_as_without_mapping(tmp_path, data):
    path = _write(tmp_path, data)
    messages = []
    for mapping in (True, False):
        with pytest.raises(ort_graph.ModelLoadError) as info:
            ort_graph.load(path, map_inline_weights=mapping)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_model_file_replaced_after_load_is_caught_when_mapped(tmp_path):
    path = _write(tmp_path, _model().SerializeToString())
    m = ort_graph.load(path)
    os.replace(_write(tmp_path, path.read_bytes(), name="copy.onnx"), path)
    with pytest.raises(ort_graph.ExternalDataError, match="replaced by another file"):
        m.graph.initializers["W"].numpy()


@pytest.mark.parametrize("data, fragment", [
    (b"\x08" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),  # ir_version with an 11-byte varint
    (b"\x08\xff\xff", "runs past its end"),
    (b"\x3a\x05\x00", "declares 5 bytes, but only 1 remain"),
    (b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", "declares"),  # a 2^63-byte graph
    (b"\x3b\x00", "wire type 3"),
    (b"\x00\x01", "field with number 0"),
    (_graph_field_with_initializer(b"\x4a\x08abc"), "declares 8 bytes, but only 3 remain"),  # raw_data past the tensor
    (_graph_field_with_initializer(b"\x0f"), "wire type 7"),
])
def test_malformed_wire_format_is_a_load_error_naming_the_offset(tmp_path, data, fragment):
    path = _write(tmp_path, _model().SerializeToString() + data)
    with pytest.raises(ort_graph.ModelLoadError, match="at byte offset") as info:
        ort_graph.load(path)
    assert fragment in str(info.value) and repr(str(path)) in str(info.value)
    with pytest.raises(ort_graph.ModelLoadError):  # onnx's own parser refuses these files too
        ort_graph.load(path, map_inline_weights=False)


@FUZZ
@given(data=st.binary(max_size=200))
def test_stripping_arbitrary_bytes_is_bytes_or_a_load_error(data):
    try:
        stripped, spans = strip_inline_weights(data, "fuzz", min_bytes=1)
    except ort_graph.ModelLoadError as e:
        assert "at byte offset" in str(e)
        return
    assert len(stripped) <= len(data)  # a removed raw_data field is longer than the 2-byte data_location added
    for span in spans:
        assert 0 <= span.offset and span.offset + span.length <= len(data)
    original = onnx.ModelProto()
    try:
        original.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf refuses it: nothing to compare
        return
    parsed = onnx.ModelProto()
    parsed.ParseFromString(stripped)  # what protobuf accepts stays parseable without the raw_data
    assert len(parsed.graph.initializer) == len(original.graph.initializer)
    for span in spans:
        assert original.graph.initializer[span.index].raw_data == data[span.offset:span.offset + span.length]
        assert not parsed.graph.initializer[span.index].HasField("raw_data")


@FUZZ
@given(tensors=st.lists(st.tuples(st.binary(max_size=40), st.integers(0, 3)), max_size=4))
def test_spans_point_at_each_initializers_raw_data(tensors):
    """Initializers with raw_data of random sizes and other fields around it: each span is its raw_data."""
    g = onnx.GraphProto(name="g")
    for i, (raw, dims) in enumerate(tensors):
        t = g.initializer.add()
        t.name, t.data_type, t.raw_data = f"t{i}", TensorProto.UINT8, raw
        t.dims.extend([len(raw)] * min(dims, 1))
        t.doc_string = "d" * dims
    data = helper.make_model(g).SerializeToString()
    stripped, spans = strip_inline_weights(data, "fuzz", min_bytes=1)
    assert [s.index for s in spans] == [i for i, (raw, _) in enumerate(tensors) if raw]
    for span in spans:
        assert data[span.offset:span.offset + span.length] == tensors[span.index][0]
    parsed = onnx.ModelProto()
    parsed.ParseFromString(stripped)
    assert [t.name for t in parsed.graph.initializer] == [f"t{i}" for i in range(len(tensors))]


SMALL = _model(big=(4, 8), small=(8,)).SerializeToString()


def _mutations(size: int):
    pos = st.integers(0, size)
    return st.one_of(st.tuples(st.just("flip"), st.lists(st.tuples(pos, st.integers(1, 255)), min_size=1, max_size=4)),
                     st.tuples(st.just("truncate"), pos), st.tuples(st.just("splice"), pos, pos, pos))


def _mutate(data: bytes, mutation) -> bytes:
    kind, *args = mutation
    if kind == "flip":
        out = bytearray(data)
        for at, mask in args[0]:
            out[at % len(out)] ^= mask
        return bytes(out)
    if kind == "truncate":
        return data[:args[0] % len(data)]
    start, stop, at = (a % (len(data) + 1) for a in args)
    return data[:at] + data[min(start, stop):max(start, stop)] + data[at:]


def _outcome(path: pathlib.Path, mapping: bool):
    try:
        return ort_graph.load(path, map_inline_weights=mapping, map_inline_min_bytes=16)
    except ort_graph.GraphError as e:
        return e


@FUZZ
@given(mutation=_mutations(len(SMALL)))
def test_mutated_model_files_load_as_without_mapping_or_fail_typed(tmp_path, fuzz_cases, mutation):
    """Each mutated file: the mapped load equals the unmapped one (onnx's parser), or fails with a GraphError."""
    fuzz_cases.add("inline weights")
    path = _write(tmp_path, _mutate(SMALL, mutation))
    mapped, read = _outcome(path, True), _outcome(path, False)
    if isinstance(mapped, ort_graph.Model):
        assert isinstance(read, ort_graph.Model), f"{mutation!r}: mapped load accepted what onnx refuses: {read}"
        _same_model(mapped, read)
    elif isinstance(read, ort_graph.Model):
        assert "at byte offset" in str(mapped), f"{mutation!r}: {mapped!r}"  # only the strict wire reader is stricter
    else:
        assert type(mapped) is type(read) or "at byte offset" in str(mapped), f"{mutation!r}: {mapped!r} vs {read!r}"
