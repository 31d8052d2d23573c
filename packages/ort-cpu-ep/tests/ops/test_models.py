"""The real torch.onnx exports in ../shared/models run through the interpreter and match onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ort_graph
from ort_cpu_ep.conformance import claim
from ort_cpu_ep.ops import run_graph

ort = pytest.importorskip("onnxruntime")

DIMS = {"batch": 2, "seq": 4, "past_seq": 3, "total_seq": 7}


@pytest.mark.parametrize("name", ["dynamo_static", "dynamo_dynamic", "dynamo_kv_dynamic", "torchscript_static",
                                  "torchscript_dynamic", "torchscript_kv_dynamic"])
def test_torch_export_matches_onnxruntime(shared_models, name):
    path = shared_models / "llama_l4" / "torch" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    proto = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    model = ort_graph.from_proto(proto)
    assert claim(model) == []
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else DIMS[d] for d in i.shape]
        if i.type == "tensor(int64)":
            feeds[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, 256, shape)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    ours = run_graph(model.graph, feeds, opsets=model.opset_imports)
    for out, ref in zip(sess.get_outputs(), sess.run(None, feeds)):
        np.testing.assert_allclose(ours[out.name], ref, rtol=1e-4, atol=1e-5)
