import pathlib
import warnings

import numpy as np
import onnxruntime as ort
import pytest

import ort_graph
from ort_graph import zoo


def test_overrides_make_a_dynamic_decoder_static():
    m = zoo.decoder(zoo.DecoderConfig(layers=2))
    report = ort_graph.resolve_shapes(m, dims={"batch": 2, "sequence": 8, "past_sequence": 4})
    assert report.unknown == 0 and report.symbolic == 0
    assert m.graph.values["logits"].shape == (2, 8, 256)
    assert m.graph.values["present.1.value"].shape == (2, 2, 12, 16)


def test_without_overrides_dims_stay_symbolic():
    m = zoo.decoder(zoo.DecoderConfig(layers=1))
    report = ort_graph.resolve_shapes(m)
    assert m.graph.values["logits"].shape == ("batch", "sequence", 256)
    assert report.symbolic > 0


def test_resolved_sizes_match_onnxruntime_outputs():
    cfg = zoo.DecoderConfig(layers=2)
    m = zoo.decoder(cfg)
    ort_graph.resolve_shapes(m, dims={"batch": 1, "sequence": 5, "past_sequence": 3})
    sess = ort.InferenceSession(zoo.decoder_proto(cfg).SerializeToString())
    outs = sess.run(None, zoo.decoder_inputs(cfg, 1, 5, 3))
    for info, arr in zip(sess.get_outputs(), outs):
        assert m.graph.values[info.name].shape == arr.shape
        assert m.graph.values[info.name].nbytes == arr.nbytes


def test_max_shapes_in_onnxruntime_option_format():
    assert ort_graph.parse_max_shape_override("input_ids:[8,4096]; mask:[8, 4096]") == {
        "input_ids": [8, 4096], "mask": [8, 4096]}
    m = zoo.decoder(zoo.DecoderConfig(layers=1, kv_cache=False))
    ort_graph.resolve_shapes(m, max_shapes="input_ids:[8,128]")
    assert m.graph.values["logits"].shape == (8, 128, 256)


@pytest.mark.parametrize("bad, match", [
    ({"dims": {"nope": 1}}, "names no symbolic dimension"),
    ({"dims": {"batch": -1}}, "non-negative"),
    ({"max_shapes": {"input_ids": [1, 2, 3]}}, "rank 3"),
    ({"max_shapes": {"ghost": [1]}}, "not a graph input"),
    ({"max_shapes": "input_ids=1,2"}, "malformed"),
    ({"max_shapes": "input_ids=[1,-2]"}, "not an integer >= 0"),
])
def test_bad_overrides_are_clear_errors(bad, match):
    m = zoo.decoder(zoo.DecoderConfig(layers=1))
    with pytest.raises(ort_graph.ShapeResolutionError, match=match):
        ort_graph.resolve_shapes(m, **bad)


GENAI_DIMS = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0, "total_sequence_length": 8,
              "kv_cache_dim": 16}


@pytest.mark.parametrize("variant", ["genai_fp32_cpu", "genai_int8_cpu", "genai_int4_cpu", "genai_fp16_cuda",
                                     "genai_int4_cuda", "genai_bf16_cuda"])
def test_genai_exports_resolve_with_contrib_ops_and_note_the_scalar_annotation(shared_models: pathlib.Path, variant,
                                                                               caplog):
    """The builder annotates its [1]-shaped constants as scalars: onnxruntime accepts that silently, so it is a
    debug note here (one element either way), not a warning on every command; inference still wins."""
    m = ort_graph.load(shared_models / "llama_l4" / variant / "model.onnx")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("DEBUG", logger="ort_graph"):
        warnings.simplefilter("always")
        report = ort_graph.resolve_shapes(m, dims=GENAI_DIMS)
    assert report.unknown == 0 and report.symbolic == 0
    assert not [w for w in caught if issubclass(w.category, ort_graph.ShapeAnnotationWarning)]
    assert any("/model/constants/INT64/[1]" in r.getMessage() and "declares shape []" in r.getMessage()
               for r in caplog.records)
    assert m.graph.values["/model/constants/INT64/[1]"].shape == (1,)  # never the wrong annotation
    assert m.graph.values["logits"].shape == (1, 8, 256)
    assert m.graph.values["present.3.key"].shape == (1, 2, 8, 16)


@pytest.mark.parametrize("name", ["torchscript_kv_dynamic", "dynamo_kv_dynamic", "torchscript_dynamic", "dynamo_static"])
def test_torch_exports_resolve_fully(shared_models: pathlib.Path, name):
    m = ort_graph.load(shared_models / "llama_l4" / "torch" / f"{name}.onnx")
    symbols = {d for n in m.graph.inputs for d in m.graph.values[n].shape if isinstance(d, str)}
    dims = {"batch": 1, "seq": 8, "past_seq": 3, "total_seq": 11}
    report = ort_graph.resolve_shapes(m, dims={k: v for k, v in dims.items() if k in symbols})
    assert report.unknown == 0 and report.symbolic == 0
    sess = ort.InferenceSession(str(shared_models / "llama_l4" / "torch" / f"{name}.onnx"))
    feeds = {}
    for i in sess.get_inputs():
        shape = m.graph.values[i.name].shape
        feeds[i.name] = (np.ones(shape, np.int64) if "int64" in i.type else np.zeros(shape, np.float32))
    for info, arr in zip(sess.get_outputs(), sess.run(None, feeds)):
        assert m.graph.values[info.name].shape == arr.shape


def test_dropout_mask_output_is_resolved():
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop", ratio=0.5)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]))
    report = ort_graph.resolve_shapes(m)
    assert report.unknown == 0
    assert (m.graph.values["mask"].dtype, m.graph.values["mask"].shape) == (TensorProto.BOOL, (2, 3))


@pytest.mark.parametrize("declared, warns", [([3], True), ([2, 1], True), ([], False)])
def test_a_wrong_annotation_warns_unless_it_is_one_element_either_way(declared, warns):
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Unsqueeze", ["x", "axes"], ["y"]), helper.make_node("Neg", ["y"], ["z"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                          initializer=[helper.make_tensor("axes", TensorProto.INT64, [1], [0])],
                          value_info=[helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)])
    m = ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ort_graph.resolve_shapes(m)
    got = [str(w.message) for w in caught if issubclass(w.category, ort_graph.ShapeAnnotationWarning)]
    assert bool(got) == warns, got
    assert m.graph.values["y"].shape == (1,)


def _one_node(op, const, name):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node(op, ["x", "c"], ["y"], name=name)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(const, np.int64), "c")])
    return ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize(("op", "const", "reason"), [
    ("Tile", [-1, 2], "'Repeats' input must not contain negative values"),
    ("Expand", [4, 4, 3], "Incompatible dimensions"),
])
def test_a_node_impossible_on_its_known_inputs_is_named_with_onnx_reason_at_resolution(op, const, reason):
    """Every input known, and onnx's shape inference refuses the node: the warning (and the planning error a
    budget turns it into) says why, with the input shapes and constant values, not only 'could not be resolved'."""
    m = _one_node(op, const, f"the_{op.lower()}")
    with pytest.warns(ort_graph.ShapeResolutionWarning) as caught:
        report = ort_graph.resolve_shapes(m)
    text = str(caught[0].message)
    assert report.unresolved_node == f"the_{op.lower()}"
    assert f"node 'the_{op.lower()}' ({op}) cannot run on its inputs" in text
    assert reason in text and f"'x' [2, 3], 'c' [{len(const)}] = {const}" in text
    assert "onnxruntime fails it at run time too" in text
    assert ort_graph.copy_model(m).graph.shape_refusals == m.graph.shape_refusals  # a copy keeps the reason
