"""Sparse initializers and attribute tensors: checked like initializers, refused with a typed error that names
the tensor (and the location or field) when their data or structure is wrong."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph


def _sparse_model(values, indices, dims=(2, 3), *, extra_init=None) -> onnx.ModelProto:
    sp = helper.make_sparse_tensor(values, indices, list(dims))
    g = helper.make_graph([helper.make_node("Add", ["x", values.name], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))],
                          [extra_init] if extra_init is not None else [])
    g.sparse_initializer.append(sp)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _values(n=3, name="s"):
    return numpy_helper.from_array(np.arange(1, n + 1, dtype=np.float32), name)


def _indices(array, name="s_idx"):
    return numpy_helper.from_array(np.asarray(array, dtype=np.int64), name)


def _external(t: TensorProto, location: str, offset: int = 0, length: int | None = None) -> TensorProto:
    n = len(t.raw_data)
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(n if length is None else length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    return t


@pytest.mark.parametrize("indices", [[0, 2, 4], [[0, 0], [0, 2], [1, 1]], [4, 0, 4]])
def test_sparse_initializer_becomes_a_dense_initializer(indices):
    m = ort_graph.from_proto(_sparse_model(_values(), _indices(indices)))
    t = m.graph.initializers["s"]
    assert t.dims == (2, 3) and t.nbytes == 24 and t.dtype == TensorProto.FLOAT
    dense = np.zeros(6, np.float32)
    flat = np.ravel_multi_index(tuple(np.array(indices).T), (2, 3)) if np.ndim(indices) == 2 else np.array(indices)
    for i, v in zip(flat, [1, 2, 3]):
        dense[i] = v
    np.testing.assert_array_equal(t.numpy(), dense.reshape(2, 3))
    again = ort_graph.from_proto(ort_graph.to_proto(m))  # saved dense, as onnxruntime keeps it
    np.testing.assert_array_equal(again.graph.initializers["s"].numpy(), dense.reshape(2, 3))


@pytest.mark.parametrize("values, indices, dims, fragment", [
    (_values(), _indices([0, 2, 6]), (2, 3), "linear index 2 is 6"),
    (_values(), _indices([0, -1, 2]), (2, 3), "linear index 1 is -1"),
    (_values(), _indices([[0, 0], [2, 0], [1, 1]]), (2, 3), "index 1 is [2, 0]"),
    (_values(), _indices([[0, 0, 0], [0, 1, 0], [1, 1, 0]]), (2, 3), "indices of dims [3, 3]"),
    (_values(), numpy_helper.from_array(np.array([0, 1, 2], np.int32), "s_idx"), (2, 3), "must be INT64"),
    (numpy_helper.from_array(np.ones((3, 1), np.float32), "s"), _indices([0, 1, 2]), (2, 3), "values must be 1-D"),
    (_values(7), _indices(range(7)), (2, 3), "7 values for a dense tensor of 6"),
])
def test_malformed_sparse_initializer_is_a_tensor_data_error(values, indices, dims, fragment):
    with pytest.raises(ort_graph.TensorDataError) as info:
        ort_graph.from_proto(_sparse_model(values, indices, dims))
    assert "sparse initializer 's'" in str(info.value) and fragment in str(info.value)


def test_sparse_initializer_colliding_with_an_initializer_is_a_duplicate():
    with pytest.raises(ort_graph.DuplicateNameError, match="sparse initializer of the same name"):
        ort_graph.from_proto(_sparse_model(_values(), _indices([0, 1, 2]), extra_init=_values(6)))


def test_sparse_values_of_strings_are_unsupported():
    values = helper.make_tensor("s", TensorProto.STRING, [1], [b"a"])
    with pytest.raises(ort_graph.UnsupportedModelError, match="sparse tensor of strings"):
        ort_graph.from_proto(_sparse_model(values, _indices([0])))


def test_external_sparse_parts_need_a_directory(tmp_path, monkeypatch):
    """Given as a ModelProto, a model has no folder: its sparse values never resolve against the cwd."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.bin").write_bytes(np.arange(3, dtype=np.float32).tobytes())
    mp = _sparse_model(_external(_values(), "v.bin"), _indices([0, 1, 2]))
    with pytest.raises(ort_graph.ExternalDataError, match="no directory"):
        ort_graph.from_proto(mp)
    np.testing.assert_array_equal(ort_graph.from_proto(mp, base_dir=tmp_path).graph.initializers["s"].numpy(),
                                  [[0, 1, 2], [0, 0, 0]])


@pytest.mark.parametrize("offset, length, fragment", [
    (20, None, "too short"), (0, 8, "length 8 does not match"), ("-4", None, "not a non-negative decimal"),
])
def test_attribute_tensor_offsets_and_lengths_are_bounded(tmp_path, offset, length, fragment):
    (tmp_path / "c.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    value = _external(numpy_helper.from_array(np.zeros(3, np.float32)), "c.bin", 0, length)
    value.external_data[1].value = str(offset)
    g = helper.make_graph([helper.make_node("Constant", [], ["y"], name="const", value=value)], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
                     .SerializeToString())
    with pytest.raises(ort_graph.ExternalDataError) as info:
        ort_graph.load(path)
    assert "attribute 'value' of node 'const' (Constant)" in str(info.value) and fragment in str(info.value)


def test_constant_sparse_value_becomes_an_initializer():
    sp = helper.make_sparse_tensor(_values(2, "v"), _indices([1, 3], "i"), [2, 2])
    g = helper.make_graph([helper.make_node("Constant", [], ["c"], name="const", sparse_value=sp),
                           helper.make_node("Add", ["x", "c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    m = ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    assert ort_graph.constants_to_initializers(m.graph) == ["c"]
    np.testing.assert_array_equal(m.graph.initializers["c"].numpy(), [[0, 1], [0, 2]])


def test_external_tensor_inside_a_model_local_function_is_refused(tmp_path):
    (tmp_path / "c.bin").write_bytes(np.arange(3, dtype=np.float32).tobytes())
    inner = helper.make_graph([helper.make_node("Constant", [], ["k"], name="deep",
                                                value=_external(numpy_helper.from_array(np.zeros(3, np.float32), "k"),
                                                                "c.bin"))], "then", [],
                              [helper.make_tensor_value_info("k", TensorProto.FLOAT, [3])])
    fn = helper.make_function("local", "Shift", ["a", "flag"], ["b"],
                              [helper.make_node("If", ["flag"], ["k2"], name="pick", then_branch=inner,
                                                else_branch=inner),
                               helper.make_node("Add", ["a", "k2"], ["b"])], [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("Shift", ["x", "f"], ["y"], domain="local")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                           helper.make_tensor_value_info("f", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                           ir_version=8, functions=[fn])
    path = tmp_path / "m.onnx"
    path.write_bytes(mp.SerializeToString())
    with pytest.raises(ort_graph.ExternalDataError) as info:
        ort_graph.load(path)
    assert "'c.bin'" in str(info.value) and "function local:Shift" in str(info.value)


@pytest.mark.parametrize("indices", [[5], [[5, 7]]])
def test_sparse_initializer_too_large_to_densify_is_refused_at_load(indices):
    with pytest.raises(ort_graph.UnsupportedModelError, match="more than one array can address"):
        ort_graph.from_proto(_sparse_model(_values(1), _indices(indices), dims=(1 << 31, 1 << 31)))
