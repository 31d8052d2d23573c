"""`ortrun run` / `ortrun plan` without `--dim`: the sizes generated for open input dims are what the model says
(metadata_props, value_info), else documented defaults checked against shape inference; where the graph
refuses a default (a Concat that only works at some heights) another size is generated, and where none works
the error names the input, the sizes tried and `--dim`. Synthetic models; the published recognizer where present."""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_session import InvalidInputError
from ort_session._input_defaults import IMAGE_DEFAULT, IMAGE_SIZES, default_dims, fitted_dims
from ort_session.cli import main


def _line_model(path, concat_with=None, metadata=None, dims=("h", "w")):
    """x [1, 1, H, W]: its mean over the height ([1, 1, 1, W]) concatenated (axis 1) with a max-pool of window and
    stride 32 down the height ([1, 1, (H - 32) // 32 + 1, W]): only 32 <= H < 64 gives a height of 1 on both
    sides, as in a text-line recognizer. `concat_with`: instead, concatenate with an initializer of that shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, *dims])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = []
    if concat_with is None:
        nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], name="/mean", axes=[2], keepdims=1),
                 helper.make_node("MaxPool", ["x"], ["pool"], name="/pool", kernel_shape=[32, 1], strides=[32, 1]),
                 helper.make_node("Concat", ["mean", "pool"], ["y"], name="/concat", axis=1)]
    else:
        inits = [numpy_helper.from_array(np.zeros(concat_with, np.float32), "c")]
        nodes = [helper.make_node("Concat", ["x", "c"], ["y"], name="/concat", axis=1)]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, path)
    return str(path)


def _resolved(path, dims=None):
    """The model and a copy resolved with `dims`, as `ortrun run` resolves it before generating inputs."""
    model = ort_graph.load(path)
    trial = ort_graph.copy_model(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort_graph.ShapeResolutionWarning)  # open dims: the pool's height is unknown
        ort_graph.resolve_shapes(trial, dims or {})
    return model, trial.graph


def test_a_height_the_graph_refuses_is_replaced_by_the_first_size_that_passes(tmp_path, capsys):
    path = _line_model(tmp_path / "line.onnx")
    model, graph = _resolved(path)
    assert default_dims(graph) == {"h": IMAGE_DEFAULT, "w": IMAGE_DEFAULT}  # unchecked: the documented default
    dims, why = fitted_dims(model, graph)
    assert dims == {"h": 32, "w": IMAGE_DEFAULT}  # the first of IMAGE_SIZES in [32, 64)
    assert "default h=224" in why and "'/concat'" in why and "h=32" in why
    assert main(["run", path, "--check"]) == 0
    captured = capsys.readouterr()
    assert "output y                        float32  [1, 2, 1, 224]" in captured.out and "check PASSED" in captured.out
    assert "shape inference refuses the default h=224" in captured.err
    assert main(["plan", path, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert not any("degrades" in w for w in plan.get("shape_warnings", []))


def test_what_the_user_gives_is_never_replaced(tmp_path, capsys):
    path = _line_model(tmp_path / "line.onnx")
    model, graph = _resolved(path, {"h": 48})
    assert fitted_dims(model, graph, {"h": 48}) == ({"h": 48, "w": IMAGE_DEFAULT}, None)
    model, graph = _resolved(path, {"h": 200})  # a height the model refuses: no width helps, and h is not varied
    with pytest.raises(InvalidInputError, match=r"input 'x' \[1, 1, 200, 'w'\].*tried w in \[224, .*at w=224, "
                                                r"node '/concat'.*--dim w=N"):
        fitted_dims(model, graph, {"h": 200})
    assert main(["run", path, "--dim", "h=48", "--dim", "w=100", "--check"]) == 0
    assert "[1, 2, 1, 100]" in capsys.readouterr().out


def test_no_size_that_works_is_an_error_naming_the_input_the_sizes_tried_and_the_flag(tmp_path, capsys):
    path = _line_model(tmp_path / "fixed.onnx", concat_with=[1, 1, 7, 13])  # only H = 7, W = 13 concatenates
    model, graph = _resolved(path)
    with pytest.raises(InvalidInputError) as info:
        fitted_dims(model, graph)
    text = str(info.value)
    assert "input 'x' [1, 1, 'h', 'w']" in text and f"h in {list(IMAGE_SIZES)}" in text and "'/concat'" in text
    assert "--dim h=N --dim w=N" in text
    for command in ("run", "plan"):
        assert main([command, path]) == 2
        err = capsys.readouterr().err
        assert "ortrun: error: input 'x'" in err and "--dim h=N" in err
    assert main(["run", path, "--dim", "h=7", "--dim", "w=13", "--check"]) == 0
    assert "[1, 2, 7, 13]" in capsys.readouterr().out
    np.save(tmp_path / "x.npy", np.ones((1, 1, 7, 13), np.float32))  # an input file's shape is given, not assumed
    assert main(["run", path, "--input", f"x={tmp_path / 'x.npy'}", "--check"]) == 0
    captured = capsys.readouterr()
    assert "[1, 2, 7, 13]" in captured.out and "by default" not in captured.err


def test_the_image_size_the_exporter_writes_in_metadata_is_used(tmp_path):
    """Ultralytics writes `imgsz` "[640, 640]" and `batch` "1" into metadata_props (dims named batch/height/width)."""
    path = _line_model(tmp_path / "meta.onnx", concat_with=[1, 1, 48, 96], metadata={"imgsz": "[48, 96]"})
    model, graph = _resolved(path)
    assert fitted_dims(model, graph) == ({"h": 48, "w": 96}, None)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    for key, value in {"batch": "2", "imgsz": "320", "height": "not a number"}.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, tmp_path / "yolo.onnx")
    model, graph = _resolved(str(tmp_path / "yolo.onnx"))
    assert fitted_dims(model, graph) == ({"batch": 2, "height": 320, "width": 320}, None)


def test_a_dim_the_model_declares_in_value_info_is_used_and_shared_by_inputs(tmp_path):
    """`n` is the 7 rows of the initializer `x` is added to (the file's value_info says so); `mask` shares it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Add", ["x", "c"], ["s"]), helper.make_node("Mul", ["s", "mask"], ["y"])]
    g = helper.make_graph(nodes, "g", [x, mask], [y], [numpy_helper.from_array(np.ones((7, 4), np.float32), "c")],
                          value_info=[helper.make_tensor_value_info("s", TensorProto.FLOAT, ["n", 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "vi.onnx")
    model, graph = _resolved(str(tmp_path / "vi.onnx"))
    assert fitted_dims(model, graph) == ({"n": 7}, None)


def test_the_published_recognizer_runs_and_plans_without_dims(shared_models, capsys):
    path = shared_models / "published" / "ppocrv4_rec.onnx"
    if not path.exists():
        pytest.skip(f"{path} is absent (see published/PUBLISHED.md)")
    assert main(["run", str(path), "--check"]) == 0  # 224 x 224 failed its Concat before
    captured = capsys.readouterr()
    assert "check PASSED" in captured.out and "shape inference refuses the default x.2=224" in captured.err
    assert main(["plan", str(path), "--json"]) == 0
    assert not any("degrades" in w for w in json.loads(capsys.readouterr().out).get("shape_warnings", []))
