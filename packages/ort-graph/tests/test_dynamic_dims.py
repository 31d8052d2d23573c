"""`-1`, unnamed and '?' dims are dynamic; every dynamic input axis is addressable as INPUT.AXIS; one grammar."""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_graph


def _dim(d):
    """A TensorShapeProto.Dimension: int -> dim_value (negative kept: paddle2onnx's -1), str -> dim_param,
    None -> neither."""
    dim = onnx.TensorShapeProto.Dimension()
    if isinstance(d, int):
        dim.dim_value = d
    elif d is not None:
        dim.dim_param = d
    return dim


def _info(name, dims):
    vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    vi.type.tensor_type.shape.dim.extend(_dim(d) for d in dims)
    return vi


def _model(x_dims=(-1, 3, "?", None), y_dims=None, h_dims=(-1, 3, -1, -1), out_dims=(-1, 3, "?", "?")):
    """x [N, 3, H, W] -> Relu -> h -> Add(h, y) -> out (y broadcast: [N, 3, H, W] or its own dims)."""
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"), helper.make_node("Add", ["h", "y"], ["out"], name="add")]
    graph = helper.make_graph(nodes, "g", [_info("x", x_dims), _info("y", y_dims or x_dims)], [_info("out", out_dims)],
                              value_info=[_info("h", h_dims)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _resolve(proto, **kw):
    m = ort_graph.from_proto(proto)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = ort_graph.resolve_shapes(m, **kw)
    return m, report, [str(w.message) for w in caught if issubclass(w.category, ort_graph.ShapeAnnotationWarning)]


def test_negative_unnamed_and_question_mark_dims_are_dynamic_and_named_by_input_and_axis():
    m = ort_graph.from_proto(_model())
    assert m.graph.values["x"].shape == (None, 3, None, None)  # never a -1 extent
    assert m.graph.declared_value_info["h"].shape == (None, 3, None, None)
    assert m.graph.declared_value_info["out"].shape == (None, 3, None, None)
    m, report, annotation_warnings = _resolve(_model())
    assert m.graph.values["x"].shape == ("x.0", 3, "x.2", "x.3")
    assert not annotation_warnings  # -1 in value_info / outputs contradicts nothing
    assert all(v.nbytes is None or v.nbytes >= 0 for v in m.graph.values.values())
    assert report.symbolic > 0


@pytest.mark.parametrize("kw", [
    {"dims": {"x.0": 2, "x.2": 5, "x.3": 7, "y.0": 2, "y.2": 5, "y.3": 7}},
    {"max_shapes": {"x": [2, 3, 5, 7], "y": [2, 3, 5, 7]}},
    {"max_shapes": "x=[2,3,5,7]; y=[2,3,5,7]"},
    {"max_shapes": "x:[2,3,5,7];y:[2,3,5,7]"},  # the older spelling
    {"dims": {"x.0": 2, "y.0": 2}, "max_shapes": "x=[2,3,5,7];y=[2,3,5,7]"},
])
def test_every_dynamic_axis_can_be_given_and_the_sizes_match_onnxruntime(kw):
    m, report, _ = _resolve(_model(), **kw)
    assert report.symbolic == 0 and report.unknown == 0
    feeds = {n: np.random.default_rng(0).standard_normal((2, 3, 5, 7)).astype(np.float32) for n in ("x", "y")}
    out = ort.InferenceSession(_model().SerializeToString()).run(None, feeds)[0]
    assert m.graph.values["out"].shape == out.shape and m.graph.values["out"].nbytes == out.nbytes


def test_an_address_of_a_named_axis_sets_the_symbol_everywhere_it_appears():
    proto = _model(x_dims=("batch", 3, -1, "?"), y_dims=("batch", 3, 1, 1), h_dims=(), out_dims=())
    m, _, _ = _resolve(proto, dims={"y.0": 4, "x.2": 5, "x.3": 6})
    assert m.graph.values["x"].shape == (4, 3, 5, 6) and m.graph.values["y"].shape == (4, 3, 1, 1)
    assert m.graph.values["out"].shape == (4, 3, 5, 6)
    # the static axis may be named too when it agrees
    m, _, _ = _resolve(proto, dims={"batch": 4, "x.1": 3, "x.2": 5, "x.3": 6})
    assert m.graph.values["out"].shape == (4, 3, 5, 6)


@pytest.mark.parametrize("kw, match", [
    ({"dims": {"x.1": 4}}, r"contradicts axis 1 of input 'x', which the model fixes at 3"),
    ({"dims": {"x.9": 1}}, r"names no symbolic dimension \(or INPUT.AXIS\).*x\.0, x\.2, x\.3"),
    ({"dims": {"z.0": 1}}, r"'z.0' names no symbolic dimension"),
    ({"dims": {"x.0": 2, "y.0": 3}}, None),  # two unnamed axes are two dims: no conflict
    ({"dims": {"x.2": -1}}, "non-negative"),
    ({"max_shapes": {"x": [1, 4, 5, 7]}}, r"contradicts its static dimension 3 at axis 1.*--max-shape x=\[1,3,5,7\]"),
    ({"max_shapes": "x=[1,3,?,7]"}, "not an integer >= 0"),
    ({"max_shapes": "x=[1,3,5,7];y"}, r"entry 'y' .* is malformed; expected 'INPUT=\[d0,d1,...\]'"),
])
def test_bad_dims_name_the_input_the_axis_and_the_fix(kw, match):
    if match is None:
        _resolve(_model(), **kw)
        return
    with pytest.raises(ort_graph.ShapeResolutionError, match=match):
        _resolve(_model(), **kw)


def test_one_name_given_two_sizes_through_its_address_is_refused():
    proto = _model(x_dims=("batch", 3, 4, 4), y_dims=("batch", 3, 4, 4), h_dims=(), out_dims=())
    with pytest.raises(ort_graph.ShapeResolutionError, match=r"x\.0=2 contradicts batch=3"):
        _resolve(proto, dims={"batch": 3, "x.0": 2})


@pytest.mark.parametrize("text, dims, shapes", [
    ("batch=1", {"batch": 1}, None),
    ("batch=1; x.2=48", {"batch": 1, "x.2": 48}, None),
    ("p2o.DynamicDimension.0=2", {"p2o.DynamicDimension.0": 2}, None),
    ("x=[1,3,48,320]", None, {"x": [1, 3, 48, 320]}),
    ("past_key_values.0.key=[1, 2, 8, 16];x:[1]", None, {"past_key_values.0.key": [1, 2, 8, 16], "x": [1]}),
    ("scalar=[]", None, {"scalar": []}),
])
def test_the_grammar(text, dims, shapes):
    if dims is not None:
        assert ort_graph.parse_dims(text) == dims
    if shapes is not None:
        assert ort_graph.parse_shapes(text) == shapes
        assert ort_graph.parse_max_shape_override(text) == shapes
        assert "; ".join(ort_graph.format_shape(k, v) for k, v in shapes.items()).replace(" ", "") == \
            text.replace(" ", "").replace(":", "=")


@pytest.mark.parametrize("text", ["batch", "batch=-1", "batch=x", "=3", "x=[1,2]", "batch=" + "9" * 25])
def test_malformed_dim_entries_are_typed_errors(text):
    with pytest.raises(ort_graph.DimSpecError, match="expected 'NAME=N'"):
        ort_graph.parse_dims(text)


def test_the_hint_names_each_input_its_dynamic_axes_and_the_option_and_flag():
    m, _, _ = _resolve(_model(x_dims=("batch", 3, -1, "?"), y_dims=(1, 3, 1, 1), h_dims=(), out_dims=()))
    hint = ort_graph.dynamic_dims_hint(m.graph)
    assert hint == ("input 'x' ['batch', 3, 'x.2', 'x.3']: dynamic axis 0 ('batch'), axis 2 (unnamed), axis 3 "
                    "(unnamed); give its largest shape with max_shapes={'x': [N, 3, N, N]} (ortrun: --max-shape "
                    "x=[N,3,N,N]) or one axis with free_dimension_overrides={'batch': N} (ortrun: --dim batch=N), "
                    "N the size")
    m, _, _ = _resolve(_model(), max_shapes={"x": [1, 3, 2, 2], "y": [1, 3, 2, 2]})
    assert ort_graph.dynamic_dims_hint(m.graph) == ""


@pytest.mark.parametrize("name, max_shape", [
    ("ppocr_mobile_v2_cls", [1, 3, 48, 192]), ("ppocrv4_rec", [1, 3, 48, 320]), ("ppocrv4_det", [1, 3, 64, 96]),
])
def test_published_paddle_exports_resolve_fully_with_their_max_shape(shared_models, name, max_shape):
    path = shared_models / "published" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    m = ort_graph.load(path)
    assert all(d is None or isinstance(d, str) or d >= 0 for d in m.graph.values["x"].shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ort_graph.resolve_shapes(m, max_shapes={"x": max_shape})
    assert report.symbolic == 0 and report.unknown == 0
    x = np.random.default_rng(0).standard_normal(max_shape).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for info, arr in zip(sess.get_outputs(), sess.run(None, {"x": x})):
        assert m.graph.values[info.name].shape == arr.shape


@pytest.mark.parametrize("exact, fused", [(True, True), (False, False)])
def test_matmul_add_fusion_writes_no_leading_dims_when_shapes_are_max_shape_bounds(exact, fused):
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 5], np.ones(20, np.float32).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [5], np.ones(5, np.float32).tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [_info("x", (-1, "?", 4))], [_info("y", (-1, "?", 5))], [w, b])
    m = ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    ort_graph.resolve_shapes(m, max_shapes="x=[2,6,4]")
    records = ort_graph.apply_l1_fusions(m, ["MatMulAddFusion"], exact_shapes=exact)
    assert bool(records) is fused
