"""Sessions on untrusted model files: external data only from the model's folder or the folder named by
ONNX Runtime's option `session.model_external_initializers_file_folder_path`."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ort_graph
from ort_session import InferenceSession

FOLDER = "session.model_external_initializers_file_folder_path"


def _one_add(location: str) -> onnx.ModelProto:
    w = TensorProto(name="w", data_type=TensorProto.UINT8, dims=[8])
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", location
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [8])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("kind", ["absolute", "dotdot"])
def test_one_add_model_cannot_read_a_file_outside_its_folder(tmp_path, kind):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"SECRET!!" * 2)
    (tmp_path / "model").mkdir()
    location = str(secret) if kind == "absolute" else "../secret.bin"
    path = tmp_path / "model" / "m.onnx"
    path.write_bytes(_one_add(location).SerializeToString())
    with pytest.raises(ort_graph.ExternalDataError, match="absolute paths are not allowed|'..' components") as info:
        InferenceSession(str(path)).run(None, {"x": np.zeros(8, np.uint8)})
    assert "'w'" in str(info.value) and repr(location) in str(info.value)


@pytest.mark.parametrize("as_proto", [False, True])
def test_model_without_a_folder_needs_the_option(tmp_path, monkeypatch, as_proto):
    (tmp_path / "w.bin").write_bytes(bytes(range(8)))
    monkeypatch.chdir(tmp_path)  # the working directory holds w.bin: it is still not used
    model = _one_add("w.bin") if as_proto else _one_add("w.bin").SerializeToString()
    with pytest.raises(ort_graph.ExternalDataError, match=FOLDER):
        InferenceSession(model)
    sess = InferenceSession(model, {FOLDER: str(tmp_path)})
    np.testing.assert_array_equal(sess.run(None, {"x": np.ones(8, np.uint8)})[0], np.arange(1, 9))


def test_option_replaces_the_model_folder_for_a_path(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "w.bin").write_bytes(bytes(range(8)))
    path = tmp_path / "model" / "m.onnx"
    path.write_bytes(_one_add("w.bin").SerializeToString())
    with pytest.raises(ort_graph.ExternalDataError, match="does not exist"):
        InferenceSession(str(path))
    sess = InferenceSession(str(path), {FOLDER: str(tmp_path / "weights")})
    np.testing.assert_array_equal(sess.run(None, {"x": np.zeros(8, np.uint8)})[0], np.arange(8))
