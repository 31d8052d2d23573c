import numpy as np
import onnxruntime as ort
import pytest

import ort_graph
from ort_graph import zoo


def _ort(proto, feeds):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("cfg, expected", [
    (zoo.DecoderConfig(layers=2, bias=True, norm="layernorm"), {"MatMulAddFusion": 14, "LayerNormFusion": 5}),
    (zoo.DecoderConfig(layers=2), {"SimplifiedLayerNormFusion": 5}),
])
def test_fusions_keep_outputs_and_derivative_names(cfg, expected):
    m = zoo.decoder(cfg)
    ort_graph.resolve_shapes(m, dims={"batch": 1, "sequence": 6, "past_sequence": 2})
    records = ort_graph.apply_l1_fusions(m)
    counts = {}
    for r in records:
        counts[r.fusion] = counts.get(r.fusion, 0) + 1
        for created in r.created:  # derivative names: the new node's name starts with a replaced one's
            assert created.startswith(r.replaced[0])
    assert counts == expected
    ort_graph.validate(m.graph)
    feeds = zoo.decoder_inputs(cfg, 1, 6, 2)
    for a, b in zip(_ort(zoo.decoder_proto(cfg), feeds), _ort(ort_graph.to_proto(m), feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    names = [n.name for n in m.graph.nodes]
    assert all("layers." in n for n in names if "Fusion" in n and not n.startswith("/model/norm"))


def test_fusion_copies_layer_annotation():
    cfg = zoo.DecoderConfig(layers=2, layer_annotations=True)
    m = zoo.decoder(cfg)
    ort_graph.resolve_shapes(m, dims={"batch": 1, "sequence": 4, "past_sequence": 0})
    ort_graph.apply_l1_fusions(m, ["SimplifiedLayerNormFusion"])
    fused = [n for n in m.graph.nodes if n.op_type == "SimplifiedLayerNormalization"]
    assert [n.layer_ann for n in fused] == ["layers.0", "layers.0", "layers.1", "layers.1", None]


def test_unknown_fusion_name():
    with pytest.raises(ValueError, match="unknown fusion"):
        ort_graph.apply_l1_fusions(zoo.decoder(zoo.DecoderConfig(layers=1)), ["NoSuchFusion"])


def test_matmul_add_not_fused_when_output_is_shared():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    b = numpy_helper.from_array(np.ones(4, np.float32), "b")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["y"], name="add"),
         helper.make_node("Relu", ["m"], ["z"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
        [w, b])
    m = ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    ort_graph.resolve_shapes(m)
    assert ort_graph.apply_l1_fusions(m) == []


def _direct_edits(monkeypatch):
    """Every Rewriter edits the node list directly (find, remove, insert per replacement): the order
    the fusions produced before the one-pass compaction."""
    from ort_graph import _rewrite

    init = _rewrite.Rewriter.__init__

    def direct(self, graph):
        init(self, graph)
        self._pos = None

    monkeypatch.setattr(_rewrite.Rewriter, "__init__", direct)


def _fused(cfg, file_order, exact):
    m = zoo.decoder(cfg)
    if file_order == "reversed":  # valid, not topologically sorted: old nodes stand before the first one
        m.graph.nodes.reverse()
        m.graph.relink()
    elif file_order.startswith("shuffled"):  # old nodes on either side of the first, in any mix
        import random

        random.Random(int(file_order[-1])).shuffle(m.graph.nodes)
        m.graph.relink()
    ort_graph.resolve_shapes(m, dims={"batch": 1, "sequence": 6, "past_sequence": 2})
    records = ort_graph.apply_l1_fusions(m, exact_shapes=exact)
    records += ort_graph.fuse_silu(m.graph) + ort_graph.fuse_conv_add(m.graph)
    return records, [(n.name, n.op_type, tuple(n.inputs), tuple(n.outputs), n.index) for n in m.graph.nodes]


@pytest.mark.parametrize("cfg", [zoo.DecoderConfig(layers=3, bias=True, norm="layernorm"), zoo.DecoderConfig(layers=3),
                                 zoo.DecoderConfig(layers=2, bias=True)])
@pytest.mark.parametrize("file_order", ["sorted", "reversed", "shuffled 0", "shuffled 1"])
@pytest.mark.parametrize("exact", [True, False])
def test_fusions_node_order_is_that_of_direct_list_edits(cfg, file_order, exact, monkeypatch):
    records, nodes = _fused(cfg, file_order, exact)
    assert records
    _direct_edits(monkeypatch)
    assert _fused(cfg, file_order, exact) == (records, nodes)
