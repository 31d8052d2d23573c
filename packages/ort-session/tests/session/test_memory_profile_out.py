"""An unwritable `memory_profile_out` does not lose the run: outputs come back with a
MemoryProfileWriteWarning saying the file could not be written and why."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

from ort_session import InferenceSession, MemoryProfileWriteWarning


def _model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize(("where", "why"), [("missing_dir/stats.csv", "No such file"), (".", "directory")])
def test_unwritable_profile_path_warns_and_returns_outputs(tmp_path, where, why):
    target = tmp_path / where
    sess = InferenceSession(_model(), {"memory_profile_out": str(target)})
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    with pytest.warns(MemoryProfileWriteWarning, match=f"could not be written.*{why}"):
        (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary file left behind


def test_writable_profile_path_is_written_whole(tmp_path):
    target = tmp_path / "stats.csv"
    sess = InferenceSession(_model(), {"memory_profile_out": target})
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert target.read_text().startswith("#name,") and "relu" in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["stats.csv"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this platform")
def test_a_profile_onto_a_full_device_warns_with_the_os_error_and_leaves_the_device_alone():
    sess = InferenceSession(_model(), {"memory_profile_out": "/dev/full"})
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    with pytest.warns(MemoryProfileWriteWarning, match=r"memory_profile_out '/dev/full'.*No space left on device"):
        (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # written in place, never replaced by a file


def test_a_profile_into_a_fifo_no_one_reads_warns_instead_of_blocking(tmp_path):
    fifo = tmp_path / "stats.fifo"
    os.mkfifo(fifo)
    sess = InferenceSession(_model(), {"memory_profile_out": str(fifo)})
    with pytest.warns(MemoryProfileWriteWarning, match="could not be written"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_nul_byte_in_the_profile_path_is_an_option_error():
    from ort_session import InvalidOptionError

    with pytest.raises(InvalidOptionError, match=r"option 'memory_profile_out'='a\\x00b' .*without NUL bytes"):
        InferenceSession(_model(), {"memory_profile_out": "a\0b"})
