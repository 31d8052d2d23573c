"""Models whose inputs have `-1`, unnamed and '?' dims (paddle2onnx's habits): given every dynamic dim (by
INPUT.AXIS or a max shape) they load, plan within a budget and run like onnxruntime; without, one error names
each input, axis and the flag that fixes it. Includes the published OCR / magika models where present."""

import json
import logging
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_session import InferenceSession, InvalidOptionError
from ort_session._cli_args import build_parser
from ort_session.cli import main

SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
PUBLISHED = {  # name: (input, max shape, its dtype)
    "ppocr_mobile_v2_cls": ("x", [1, 3, 48, 192], np.float32),
    "ppocrv4_rec": ("x", [1, 3, 48, 320], np.float32),
    "ppocrv4_det": ("x", [1, 3, 64, 96], np.float32),
    "magika_standard_v3_3": ("bytes", [1, 2048], np.int32),
}


def _info(name, dims):
    vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    for d in dims:
        dim = vi.type.tensor_type.shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif d is not None:
            dim.dim_param = d
    return vi


def _cnn():
    """x [-1, 3, '?', unnamed] -> Conv -> Relu (value_info [-1, 8, -1, -1]) -> GlobalAveragePool -> Flatten."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32), "conv.weight")
    nodes = [helper.make_node("Conv", ["x", "conv.weight"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["y"], name="flatten")]
    graph = helper.make_graph(nodes, "cnn", [_info("x", [-1, 3, "?", None])], [_info("y", [-1, 8])], [w],
                              value_info=[_info("r", [-1, 8, -1, -1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _session(model, options, providers=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, options, providers=providers)


def _reference(model, feeds):
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("options", [
    {"max_shapes": {"x": [2, 3, 16, 16]}},
    {"max_shapes": "x=[2,3,16,16]"},
    {"session.max_shape_override": "x=[2,3,16,16]"},
    {"free_dimension_overrides": {"x.0": 2, "x.2": 16, "x.3": 16}},
])
@pytest.mark.parametrize("budgeted", [False, True])
def test_minus_one_and_unnamed_dims_plan_and_run_like_onnxruntime(options, budgeted):
    opts = {**options, "budgets": "gpu:1MiB"} if budgeted else options
    sess = _session(_cnn().SerializeToString(), opts, SIM if budgeted else None)
    assert not sess.memory.gplan.activations.unknown_sizes  # every size planned: no -1 extent, no unknown
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, _reference(_cnn(), {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_feed_under_the_max_shape_runs_too():
    sess = _session(_cnn().SerializeToString(), {"max_shapes": {"x": [2, 3, 16, 16]}, "budgets": "gpu:1MiB"}, SIM)
    x = np.random.default_rng(2).standard_normal((1, 3, 9, 12)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _reference(_cnn(), {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_without_the_dims_a_budget_is_refused_once_naming_input_axes_and_flags(caplog):
    caplog.set_level(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InvalidOptionError) as info:
            InferenceSession(_cnn().SerializeToString(), {"budgets": "gpu:1MiB"}, providers=SIM)
    text = str(info.value)
    assert ("input 'x' ['x.0', 3, 'x.2', 'x.3']: dynamic axis 0 (unnamed), axis 2 (unnamed), axis 3 (unnamed); "
            "give its largest shape with max_shapes={'x': [N, 3, N, N]} (ortrun: --max-shape x=[N,3,N,N]) or one "
            "axis with free_dimension_overrides={'x.0': N} (ortrun: --dim x.0=N)") in text
    assert text.count("input 'x'") == 1
    said = [r.getMessage() for r in caplog.records] + [str(w.message) for w in caught]
    assert not [s for s in said if "returned -" in s or "negative" in s], said  # no cascade of -1 extents


def test_a_max_shape_contradicting_a_static_axis_names_the_axis_and_the_flag():
    with pytest.raises(Exception, match=r"contradicts its static dimension 3 at axis 1.*--max-shape x=\[2,3,16,16\]"):
        _session(_cnn().SerializeToString(), {"max_shapes": {"x": [2, 4, 16, 16]}})


@pytest.mark.parametrize("argv, parsed", [
    (["plan", "--dim", "x.2=48"], {"dim": [("x.2", 48)], "max_shape": []}),
    (["plan", "--dim", "batch=1;x.2=48", "--dim", "x.3=320"], {"dim": [("batch", 1), ("x.2", 48), ("x.3", 320)]}),
    (["run", "--max-shape", "x=[1,3,48,320]", "--max-shape", "y=[2];z=[3]"],
     {"max_shape": [{"x": [1, 3, 48, 320]}, {"y": [2], "z": [3]}]}),
])
def test_cli_dim_and_max_shape_take_the_one_grammar(argv, parsed):
    args = build_parser().parse_args(argv)
    for key, value in parsed.items():
        assert getattr(args, key) == value


@pytest.mark.parametrize("argv, message", [
    (["plan", "--max-shape", "x=[1,3,N,N]"], "argument --max-shape: shape entry 'x=[1,3,N,N]'"),
    (["run", "--max-shape", "x"], "argument --max-shape: max shape entry 'x' in 'x' is malformed"),
    (["plan", "--dim", "x.2=[48]"], "argument --dim: 'x.2=[48]' must look like name=INTEGER"),
])
def test_cli_bad_shapes_are_parser_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_ortrun_plans_and_runs_the_max_shape(tmp_path, capsys):
    path = str(tmp_path / "cnn.onnx")
    onnx.save(_cnn(), path)
    common = ["--budget", "gpu:1MiB", "--providers", "SimulatedGPUExecutionProvider", "--max-shape", "x=[2,3,16,16]"]
    assert main(["plan", path, *common, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    gpu = plan["devices"]["simgpu"]
    assert 2 * 8 * 16 * 16 * 4 <= gpu["peak_activations"] <= gpu["total"] <= gpu["budget"]  # the max shape planned
    assert main(["run", path, *common, "--check"]) == 0
    out = capsys.readouterr().out
    assert "output y                        float32  [2, 8]" in out and "check PASSED" in out
    assert main(["run", path, *common, "--max-shape", "x=[1,3,4,4]"]) == 2
    assert "--max-shape gives input 'x' two shapes" in capsys.readouterr().err


def _published(shared_models, name):
    path = shared_models / "published" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    return str(path)


@pytest.mark.parametrize("budget", [None, "gpu:4MiB"])
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_models_plan_with_a_budget_and_match_onnxruntime(shared_models, name, budget):
    path = _published(shared_models, name)
    input_name, shape, dtype = PUBLISHED[name]
    options = {"max_shapes": {input_name: shape}, **({"budgets": budget} if budget else {})}
    sess = _session(path, options, SIM if budget else None)
    assert not sess.memory.gplan.activations.unknown_sizes
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, shape).astype(dtype) if dtype == np.int32 else rng.standard_normal(shape).astype(dtype)
    for got, want in zip(sess.run(None, {input_name: x}), _reference(path, {input_name: x})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_published_classifier_without_dims_is_refused_naming_the_flag(shared_models, caplog):
    path = _published(shared_models, "ppocr_mobile_v2_cls")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(InvalidOptionError, match=r"input 'x' \['x.0', 3, 'x.2', 'x.3'\]: dynamic axis 0 \(unnamed\), "
                                                 r"axis 2 \(unnamed\), axis 3 \(unnamed\).*--max-shape x=\[N,3,N,N\]"):
        _session(path, {"budgets": "gpu:4MiB"}, SIM)
    assert not [r for r in caplog.records if "returned -" in r.getMessage()]


def test_ortrun_runs_the_published_classifier_with_max_shape(shared_models, capsys):
    path = _published(shared_models, "ppocr_mobile_v2_cls")
    assert main(["run", path, "--max-shape", "x=[1,3,48,192]", "--budget", "gpu:4MiB", "--providers",
                 "SimulatedGPUExecutionProvider", "--check"]) == 0
    assert "check PASSED" in capsys.readouterr().out


def test_the_published_recognizer_runs_a_line_narrower_than_its_max_shape(shared_models):
    path = _published(shared_models, "ppocrv4_rec")
    sess = _session(path, {"max_shapes": "x=[1,3,48,320]", "budgets": "gpu:4MiB"}, SIM)
    x = np.random.default_rng(3).standard_normal((1, 3, 48, 160)).astype(np.float32)
    got, want = sess.run(None, {"x": x})[0], _reference(path, {"x": x})[0]
    assert got.shape == want.shape == (1, 20, 6625)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_feed_over_the_max_shape_is_refused_naming_the_flag_that_plans_it():
    sess = _session(_cnn().SerializeToString(), {"max_shapes": {"x": [2, 3, 16, 16]}, "budgets": "gpu:1MiB"}, SIM)
    x = np.zeros((3, 3, 16, 16), np.float32)
    with pytest.raises(Exception, match=r"larger than the planned maximum.*--max-shape x=\[3,3,16,16\]"):
        sess.run(None, {"x": x})


def test_the_plan_table_notes_the_open_axes_of_an_unbudgeted_session():
    table = _session(_cnn().SerializeToString(), {}).plan.to_table()
    assert "not in the plan (input 'x' ['x.0', 3, 'x.2', 'x.3']: dynamic axis 0 (unnamed)" in table
    assert "--max-shape x=[N,3,N,N]" in table
