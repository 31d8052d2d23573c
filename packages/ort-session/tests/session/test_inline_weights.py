"""`session.map_inline_weights`: a session made from a model path maps its large inline initializers from the
.onnx file (on by default); outputs are identical with and without the mapping."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_session import MAP_INLINE_WEIGHTS, InferenceSession, InvalidOptionError, generate_inputs

DIMS = {"batch": 1, "seq": 8, "past_seq": 3, "total_seq": 11}


def _mlp(path):
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 64)).astype(np.float32), "W1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "W2")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
                           helper.make_node("Relu", ["h"], ["r"], name="relu"),
                           helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2")], "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])], [w1, w2])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _session(path, mapping=None, **options):
    config = {} if mapping is None else {MAP_INLINE_WEIGHTS: mapping}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(str(path), {**config, **options})


def test_mapping_is_on_by_default_and_can_be_turned_off(tmp_path):
    path = _mlp(tmp_path / "mlp.onnx")
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    default, off = _session(path), _session(path, "0")
    assert all(t.external is not None and t.external.in_model_file for t in default.model.graph.initializers.values())
    assert all(t.external is None for t in off.model.graph.initializers.values())
    got, ref = default.run(None, {"x": x})[0], off.run(None, {"x": x})[0]
    assert got.tobytes() == ref.tobytes()
    mp = onnx.load(path)
    w1, w2 = (numpy_helper.to_array(t) for t in mp.graph.initializer)
    np.testing.assert_allclose(got, np.maximum(x @ w1, 0) @ w2, rtol=1e-5, atol=1e-5)


def test_option_value_must_be_boolean(tmp_path):
    with pytest.raises(InvalidOptionError, match=MAP_INLINE_WEIGHTS):
        _session(_mlp(tmp_path / "mlp.onnx"), "sometimes")


@pytest.mark.parametrize("name", ["torchscript_static", "torchscript_dynamic", "torchscript_kv_dynamic",
                                  "dynamo_static", "dynamo_dynamic", "dynamo_kv_dynamic"])
def test_torch_exports_give_identical_outputs_with_and_without_mapping(shared_models, name):
    path = shared_models / "llama_l4" / "torch" / f"{name}.onnx"
    graph = ort_graph.load(path).graph
    dims = {d: v for d, v in DIMS.items() if any(d in (graph.values[i].shape or ()) for i in graph.inputs)}
    mapped = _session(path, free_dimension_overrides=dims)
    read = _session(path, "0", free_dimension_overrides=dims)
    assert sum(t.external is not None for t in mapped.model.graph.initializers.values()) >= 20
    assert all(t.external is None for t in read.model.graph.initializers.values())
    feeds = generate_inputs(read.model.graph, dims)
    for got, ref in zip(mapped.run(None, feeds), read.run(None, feeds), strict=True):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert got.tobytes() == ref.tobytes()
