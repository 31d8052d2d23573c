"""Tensor.release: the values read so far are dropped (an initializer every consumer pre-packed); a tensor with a
proto reads them again if asked, one made from numpy only is empty and says so."""

import numpy as np
import pytest
from onnx import numpy_helper

import ort_graph
from ort_graph import Tensor


def test_a_proto_backed_tensor_reads_its_values_again_after_release():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor.from_proto(numpy_helper.from_array(values, "w"), None)
    first = t.numpy()
    t.release()
    assert t._array is None
    again = t.numpy()
    assert again is not first
    np.testing.assert_array_equal(again, values)


def test_a_numpy_only_tensor_is_empty_after_release_and_numpy_names_it():
    t = Tensor.from_numpy("folded", np.ones((4,), np.float32))
    t.release()
    with pytest.raises(ort_graph.TensorReleasedError, match="initializer 'folded' was released"):
        t.numpy()
    assert t.nbytes == 16  # its size is still known (plans count it)
