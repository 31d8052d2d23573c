"""`ortrun run` on a model whose dims it had to assume: a kernel that fails on those inputs says so and how to
give real sizes (a CNN fed a 1 x 1 image fails in its first pooling layer, not because the model is wrong)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from ort_session.cli import main


def _pooling_model(path, kernel=3):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "?", None])
    x.type.tensor_type.shape.dim[2].ClearField("dim_param")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y"], name="/pool", kernel_shape=[kernel, kernel])], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_image_inputs_are_generated_at_224_by_224(tmp_path, capsys):
    """A rank-4 float input with 3 channels and open height/width is an image: `ortrun run` feeds 224 x 224
    (ppocr_mobile_v2_cls as a newcomer types `ortrun run MODEL` failed on its 1 x 1 default before)."""
    model = _pooling_model(tmp_path / "pool.onnx")
    assert main(["run", model, "--check"]) == 0
    captured = capsys.readouterr()
    assert "'x.2': 224, 'x.3': 224" in captured.err and "check PASSED" in captured.out


def test_a_kernel_failing_on_assumed_dims_names_them_and_the_flags(tmp_path, capsys):
    model = _pooling_model(tmp_path / "pool.onnx", kernel=300)  # larger than the 224 x 224 image assumed
    assert main(["run", model]) == 2
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("ortrun: error:"))
    assert "/pool" in line and "generated with assumed dims" in line and "--max-shape INPUT=[d0,d1,...]" in line
    assert main(["run", model, "--max-shape", "x=[1,3,320,320]", "--check"]) == 0
    assert "check PASSED" in capsys.readouterr().out
