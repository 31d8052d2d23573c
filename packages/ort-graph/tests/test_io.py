import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_graph
from ort_graph import zoo

CFG = zoo.DecoderConfig(layers=2)


def _run_ort(model_or_proto, feeds):
    proto = model_or_proto if isinstance(model_or_proto, onnx.ModelProto) else ort_graph.to_proto(model_or_proto)
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_zoo_decoder_is_valid_and_runs_under_onnxruntime():
    proto = zoo.decoder_proto(CFG)
    onnx.checker.check_model(proto, full_check=True)
    outs = _run_ort(proto, zoo.decoder_inputs(CFG, batch=2, sequence=5, past=3))
    assert outs[0].shape == (2, 5, CFG.vocab)
    assert outs[1].shape == (2, CFG.kv_heads, 8, CFG.head_dim)


def test_zoo_hf_style_names():
    names = [n.name for n in zoo.decoder(CFG).graph.nodes]
    for expected in ("/model/embed_tokens/Gather", "/model/layers.0/self_attn/q_proj/MatMul",
                     "/model/layers.1/mlp/gate_proj/MatMul", "/lm_head/MatMul"):
        assert expected in names
    assert any(n.startswith("/model/norm/") for n in names)


@pytest.mark.parametrize("external", [False, True])
def test_round_trip_keeps_names_metadata_and_outputs(tmp_path, external):
    cfg = zoo.DecoderConfig(layers=2, layer_annotations=True)
    model = zoo.decoder(cfg)
    model.metadata["owner"] = "tests"
    path = ort_graph.save(model, tmp_path / "m.onnx", external_data=external)
    assert (tmp_path / "m.onnx.data").exists() == external
    again = ort_graph.load(path)
    assert [n.name for n in again.graph.nodes] == [n.name for n in model.graph.nodes]
    assert [n.layer_ann for n in again.graph.nodes] == [n.layer_ann for n in model.graph.nodes]
    assert again.metadata == {"owner": "tests"}
    assert all(t.is_external == external for t in again.graph.initializers.values() if t.nbytes >= 1024)
    feeds = zoo.decoder_inputs(cfg, sequence=4, past=2)
    for a, b in zip(_run_ort(zoo.decoder_proto(cfg), feeds), _run_ort(again, feeds)):
        np.testing.assert_array_equal(a, b)
    # a second round trip is byte-identical in the graph
    again2 = ort_graph.load(ort_graph.save(again, tmp_path / "m2.onnx", external_data=external))
    assert ort_graph.to_proto(again2).graph == ort_graph.to_proto(again).graph


def test_external_data_is_lazy_and_sized_without_reading(tmp_path):
    path = zoo.write_decoder(tmp_path / "d.onnx", CFG)
    model = ort_graph.load(path)
    t = model.graph.initializers["model.layers.0.mlp.gate_proj.weight"]
    assert t.is_external and t._array is None
    assert t.nbytes == CFG.hidden * CFG.ffn * 4
    arr = t.numpy()
    assert isinstance(arr.base, np.memmap) or isinstance(arr, np.memmap)
    assert arr.shape == (CFG.hidden, CFG.ffn)


def test_missing_external_data_file(tmp_path):
    path = zoo.write_decoder(tmp_path / "d.onnx", CFG)
    (tmp_path / "d.onnx.data").unlink()
    with pytest.raises(ort_graph.ExternalDataError, match=r"d\.onnx\.data.*does not exist"):
        ort_graph.load(path)


def test_truncated_external_data_file(tmp_path):
    path = zoo.write_decoder(tmp_path / "d.onnx", CFG)
    data = tmp_path / "d.onnx.data"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ort_graph.ExternalDataError, match="too short"):
        ort_graph.load(path)


def test_truncated_and_non_onnx_files(tmp_path):
    good = zoo.decoder_proto(CFG).SerializeToString()
    (tmp_path / "t.onnx").write_bytes(good[: len(good) // 3])
    with pytest.raises(ort_graph.ModelLoadError):
        ort_graph.load(tmp_path / "t.onnx")
    (tmp_path / "x.onnx").write_text("this is not a model at all, just some text\n" * 10)
    with pytest.raises(ort_graph.ModelLoadError, match="not"):
        ort_graph.load(tmp_path / "x.onnx")
    with pytest.raises(ort_graph.ModelLoadError, match="does not exist"):
        ort_graph.load(tmp_path / "missing.onnx")


def test_load_from_bytes():
    m = ort_graph.load(zoo.decoder_proto(CFG).SerializeToString())
    assert m.path is None and len(m.graph.nodes) > 50


def _tiny(nodes, inputs=("x",), outputs=("y",), ir_version=8):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2]) for i in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2]) for o in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir_version)


def test_unsupported_ir_version():
    mp = _tiny([helper.make_node("Relu", ["x"], ["y"], name="r")], ir_version=99)
    with pytest.raises(ort_graph.UnsupportedModelError, match="IR version 99"):
        ort_graph.load(mp.SerializeToString())


@pytest.mark.parametrize("version", [onnx.defs.onnx_opset_version() + 1, 99, 0])
def test_an_opset_onnx_does_not_define_is_refused_at_load(version):
    """onnxruntime refuses it too; before, the ops ran at the latest semantics known, silently."""
    mp = _tiny([helper.make_node("Relu", ["x"], ["y"], name="r")])
    mp.opset_import[0].version = version
    with pytest.raises(ort_graph.UnsupportedModelError, match=f"imports opset {version} of the default ONNX domain"):
        ort_graph.load(mp.SerializeToString())
    with pytest.raises(Exception, match="(?i)opset|domain_version"):
        ort.InferenceSession(mp.SerializeToString(), providers=["CPUExecutionProvider"])


def test_cycle_is_rejected_naming_nodes():
    mp = _tiny([helper.make_node("Add", ["x", "b"], ["a"], name="first"),
                helper.make_node("Relu", ["a"], ["b"], name="second"),
                helper.make_node("Identity", ["a"], ["y"], name="out")])
    with pytest.raises(ort_graph.GraphStructureError, match="cycle.*first"):
        ort_graph.load(mp.SerializeToString())


def test_dangling_input_is_rejected_naming_node_and_value():
    mp = _tiny([helper.make_node("Add", ["x", "nowhere"], ["y"], name="adder")])
    with pytest.raises(ort_graph.GraphStructureError, match="'adder'.*'nowhere'"):
        ort_graph.load(mp.SerializeToString())


def test_subgraph_links_to_parent_and_outer_scope():
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)], "g",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = ort_graph.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    node = m.graph.nodes[0]
    assert [s.parent_node for s in node.subgraphs] == [node, node]
    assert node.implicit_inputs() == ["x"]
    assert node in m.graph.values["x"].consumers
    walked = [n.name for n in m.graph.walk()]
    assert walked[0] == "if" and sorted(walked[1:]) == ["else_neg", "then_relu"]


def test_generate_node_name_appends_token_only_on_collision():
    g = zoo.decoder(CFG).graph
    assert g.generate_node_name("/fresh/name") == "/fresh/name"
    assert g.generate_node_name("/lm_head/MatMul") == "/lm_head/MatMul_token_0"
    assert g.generate_node_name("/lm_head/MatMul") == "/lm_head/MatMul_token_1"


def _reference_name(taken: set[str], base: str) -> str:
    """The first free name: `base`, then `base_token_0`, `base_token_1`, ..."""
    name, token = base, 0
    while name in taken:
        name, token = f"{base}_token_{token}", token + 1
    return name


@pytest.mark.parametrize("unnamed", [1, 5, 300])
def test_generate_node_name_matches_the_first_free_token_after_removals(unnamed: int):
    g = ort_graph.Graph(inputs=["x"])
    made = [g.add_node("Relu", ["x"], [f"y{i}"]) for i in range(unnamed)]
    assert [n.name for n in made] == ["Relu", *(f"Relu_token_{i}" for i in range(unnamed - 1))]
    reserved: set[str] = set()  # names generate_node_name handed out (taken though no node has them)
    for victim in made[1::2]:  # freed names are reused, lowest token first
        g.remove_node(victim)
        expected = _reference_name({n.name for n in g.nodes} | reserved, "Relu")
        assert g.generate_node_name("Relu") == expected
        reserved.add(expected)
    for n in g.nodes:  # a file whose nodes are all unnamed: relink names the duplicates
        n.name = ""
    g.relink()
    assert [n.name for n in g.nodes] == ["", *(f"_token_{i}" for i in range(len(g.nodes) - 1))]
    assert g.generate_node_name("") == _reference_name({n.name for n in g.nodes}, "")


def test_real_exports_load(shared_models: pathlib.Path):
    for path in sorted(shared_models.glob("llama_l4/**/*.onnx")):
        m = ort_graph.load(path)
        assert m.graph.nodes, path
        total = sum(t.nbytes for t in m.graph.initializers.values())
        assert total > 100_000, path


def test_copy_model_is_independent_and_shares_weights():
    m = zoo.decoder(CFG)
    ort_graph.resolve_shapes(m, dims={"batch": 1, "sequence": 4, "past_sequence": 0})
    c = ort_graph.copy_model(m)
    assert [n.name for n in c.graph.nodes] == [n.name for n in m.graph.nodes]
    assert [n.index for n in c.graph.nodes] == [n.index for n in m.graph.nodes]
    assert c.graph.values["logits"].shape == m.graph.values["logits"].shape
    assert c.graph.initializers["lm_head.weight"] is m.graph.initializers["lm_head.weight"]
    c.graph.nodes[0].ep = "X"
    c.graph.add_node("Identity", ["logits"], ["logits_copy"], name="extra")
    assert m.graph.nodes[0].ep is None and len(m.graph.nodes) == len(c.graph.nodes) - 1
    assert c.graph.values["logits"].consumers[-1].name == "extra"
    assert all(n.graph is c.graph for n in c.graph.nodes)


def _constant_model() -> onnx.ModelProto:
    w = onnx.numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    c = helper.make_node("Constant", [], ["c"], name="c", value=onnx.numpy_helper.from_array(np.ones(3, np.float32)))
    nodes = [c, helper.make_node("Add", ["x", "w"], ["y"], name="add"), helper.make_node("Mul", ["y", "c"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("source", ["proto", "bytes", "file"])
def test_loaded_model_holds_nothing_of_the_parsed_file(tmp_path, source):
    """Initializers and attribute tensors are copies: a part of the parse kept would keep all of it (every node)
    alive; names are one object per value, shared by the producer, the consumers and the values table."""
    mp = _constant_model()
    if source == "proto":
        model = ort_graph.from_proto(mp)
        init, const = mp.graph.initializer[0], mp.graph.node[0].attribute[0].t
    else:
        data = mp.SerializeToString()
        (tmp_path / "m.onnx").write_bytes(data)
        model = ort_graph.load(data if source == "bytes" else tmp_path / "m.onnx")
        init, const = None, None
    g = model.graph
    if init is not None:  # changing the parsed proto afterwards changes nothing loaded
        init.float_data[:] = [9.0] * 6
        init.raw_data = b""
        const.raw_data = np.zeros(3, np.float32).tobytes()
    np.testing.assert_array_equal(g.initializers["w"].numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(g.node_by_name("c").attr("value")), np.ones(3))
    add, mul = g.node_by_name("add"), g.nodes[2]
    assert add.outputs[0] is mul.inputs[0] is g.values["y"].name
    assert add.inputs[1] is next(k for k in g.values if k == "w")
