"""A model file is untrusted input: external data stays inside the model directory, reads are bounded,
names are unique, text is UTF-8 and tensor data matches its dims — every violation is a ModelLoadError."""

import os
import pathlib

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper

import ort_graph

SECRET = b"SECRET-BYTES-OUTSIDE-THE-MODEL-DIR"


def _external_add(location: str, *, offset=None, length=None, dims=(4,), dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """y = x + w, w stored in an external file at `location` (entries written verbatim)."""
    w = TensorProto(name="w", data_type=dtype, dims=list(dims))
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, str(value)
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", dtype, list(dims))],
                          [helper.make_tensor_value_info("y", dtype, list(dims))], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def layout(tmp_path):
    """tmp/model/ (the model directory with w.bin) and tmp/secret.bin outside it."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "w.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    (tmp_path / "secret.bin").write_bytes(SECRET)
    return model_dir


def _save(model_dir: pathlib.Path, mp: onnx.ModelProto, name="m.onnx") -> pathlib.Path:
    path = model_dir / name
    path.write_bytes(mp.SerializeToString())
    return path


# -- 1. external data stays inside the model directory ---------------------------------------------
def test_inside_location_loads_and_reads(layout):
    m = ort_graph.load(_save(layout, _external_add("w.bin", offset=16, length=16)))
    np.testing.assert_array_equal(m.graph.initializers["w"].numpy(), [4, 5, 6, 7])


@pytest.mark.parametrize("kind", ["absolute", "system-file", "dotdot", "dotdot-inside", "backslash-dotdot",
                                  "file-symlink", "dir-symlink"])
def test_locations_leaving_the_model_directory_are_refused(layout, kind):
    secret = layout.parent / "secret.bin"
    if kind == "file-symlink":
        os.symlink(secret, layout / "link.bin")
    if kind == "dir-symlink":
        os.symlink(layout.parent, layout / "up")
    location = {"absolute": str(secret), "system-file": "/etc/passwd", "dotdot": "../secret.bin",
                "dotdot-inside": "sub/../w.bin", "backslash-dotdot": "..\\secret.bin",
                "file-symlink": "link.bin", "dir-symlink": "up/secret.bin"}[kind]
    path = _save(layout, _external_add(location, dims=(2,)))
    with pytest.raises(ort_graph.ExternalDataError) as info:
        ort_graph.load(path)
    assert "'w'" in str(info.value) and repr(location) in str(info.value)


def test_symlinked_model_may_read_beside_its_target(tmp_path):
    """A Hugging Face cache layout: snapshot/model.onnx and snapshot/w.bin link into blobs/."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshot"
    blobs.mkdir()
    snapshot.mkdir()
    (blobs / "model-blob").write_bytes(_external_add("w.bin", dims=(2,)).SerializeToString())
    (blobs / "data-blob").write_bytes(np.array([3, 4], np.float32).tobytes())
    os.symlink(blobs / "model-blob", snapshot / "m.onnx")
    os.symlink(blobs / "data-blob", snapshot / "w.bin")
    np.testing.assert_array_equal(ort_graph.load(snapshot / "m.onnx").graph.initializers["w"].numpy(), [3, 4])


@pytest.mark.parametrize("as_proto", [False, True])
def test_model_without_directory_needs_an_explicit_base_dir(layout, monkeypatch, as_proto):
    mp = _external_add("w.bin", dims=(2,))
    monkeypatch.chdir(layout)  # w.bin is in the working directory: it must still not be used
    load = (lambda **kw: ort_graph.from_proto(mp, **kw)) if as_proto else \
        (lambda **kw: ort_graph.load(mp.SerializeToString(), **kw))
    with pytest.raises(ort_graph.ExternalDataError,
                       match=r"'w'.*'w\.bin'.*working directory.*session\.model_external_initializers_file_folder_path"):
        load()
    np.testing.assert_array_equal(load(base_dir=layout).graph.initializers["w"].numpy(), [0, 1])
    os.symlink(layout.parent, layout / "up")
    with pytest.raises(ort_graph.ExternalDataError, match="outside the model directory"):
        ort_graph.from_proto(_external_add("up/secret.bin", dims=(2,)), base_dir=layout)


# -- 2. offsets and lengths ----------------------------------------------------------------------
@pytest.mark.parametrize(("offset", "length", "fragment"), [
    (0, 8, r"length 8 does not match the tensor's 16 bytes"),
    (24, 16, r"needs 16 bytes \(length 16\) at offset 24, the file has 32 bytes"),
    (32, None, r"at offset 32, the file has 32 bytes"),
    (-4, None, r"offset '-4'.*not a non-negative decimal integer"),
    ("0x10", None, r"offset '0x10'"),
    (0, "16.0", r"length '16.0'"),
    (0, " 16", r"length ' 16'"),
    (2**70, None, r"offset 1180591620717411303424"),
])
def test_offsets_and_lengths_are_checked_before_mapping(layout, offset, length, fragment):
    path = _save(layout, _external_add("w.bin", offset=offset, length=length))
    with pytest.raises(ort_graph.ExternalDataError, match=fragment) as info:
        ort_graph.load(path)
    assert "'w'" in str(info.value)


def test_string_external_data_is_refused(layout):
    with pytest.raises(ort_graph.ExternalDataError, match="fixed-size element type"):
        ort_graph.load(_save(layout, _external_add("w.bin", dtype=TensorProto.STRING)))


def test_data_file_swapped_or_truncated_after_load_is_caught_before_mapping(layout):
    m = ort_graph.load(_save(layout, _external_add("w.bin", offset=16)))
    (layout / "w.bin").write_bytes(b"\0" * 20)  # truncated in place: same inode, too short
    with pytest.raises(ort_graph.ExternalDataError, match="too short for 16 bytes at offset 16"):
        m.graph.initializers["w"].numpy()
    m = ort_graph.load(_save(layout, _external_add("w.bin")))
    (layout / "other.bin").write_bytes(SECRET)
    os.replace(layout / "other.bin", layout / "w.bin")  # another file (inode) under the same name
    with pytest.raises(ort_graph.ExternalDataError, match="replaced by another file"):
        m.graph.initializers["w"].numpy()


# -- 3. unique names ------------------------------------------------------------------------------
def _graph_model(nodes, inits=(), inputs=("x",)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2]) for i in inputs],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _w(values):
    return helper.make_tensor("w", TensorProto.FLOAT, [2], values)


@pytest.mark.parametrize(("case", "fragment"), [
    ("two initializers", r"'w' is defined twice.*an initializer and by another initializer"),
    ("initializer and node output", r"'w' is defined twice.*an initializer and by node 'relu' \(Relu\) output 0"),
    ("two producers", r"'y' is defined twice.*node 'a' \(Relu\) output 0 and by node 'b' \(Neg\) output 0"),
    ("input and node output", r"'x' is defined twice.*a graph input and by node 'a'"),
    ("two graph inputs", r"'x' is defined twice.*graph input"),
])
def test_duplicate_definitions_are_refused(case, fragment):
    add = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    mp = {
        "two initializers": lambda: _graph_model([add], [_w([1, 2]), _w([3, 4])]),
        "initializer and node output": lambda: _graph_model([helper.make_node("Relu", ["x"], ["w"], name="relu"), add],
                                                            [_w([1, 2])]),
        "two producers": lambda: _graph_model([helper.make_node("Relu", ["x"], ["y"], name="a"),
                                               helper.make_node("Neg", ["x"], ["y"], name="b")]),
        "input and node output": lambda: _graph_model([helper.make_node("Relu", ["x"], ["x"], name="a"),
                                                       helper.make_node("Neg", ["x"], ["y"], name="b")]),
        "two graph inputs": lambda: _graph_model([helper.make_node("Neg", ["x"], ["y"], name="b")], inputs=("x", "x")),
    }[case]()
    with pytest.raises(ort_graph.DuplicateNameError, match=fragment) as info:
        ort_graph.load(mp.SerializeToString())
    assert isinstance(info.value, ort_graph.ModelLoadError) and isinstance(info.value, ort_graph.GraphStructureError)


def test_initializer_listed_as_graph_input_is_its_default():
    m = ort_graph.load(_graph_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_w([1, 2])],
                                    inputs=("x", "w")).SerializeToString())
    assert "w" in m.graph.initializers and "w" in m.graph.inputs


def _if_model(then_nodes, then_inits=()):
    then_g = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
                               list(then_inits))
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="er")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["s"], name="rs", keepdims=0),
                           helper.make_node("Greater", ["s", "z"], ["c"], name="gt"),
                           helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                          [helper.make_tensor("z", TensorProto.FLOAT, [], [0.0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(("then_nodes", "then_inits", "refused"), [
    ([helper.make_node("Neg", ["x"], ["s"], name="tn"), helper.make_node("Relu", ["s"], ["t"], name="tr")], (),
     "'s' is defined twice.*node 'rs' \\(ReduceSum\\) output 0 of an enclosing graph and by node 'tn'"),
    ([helper.make_node("Neg", ["x"], ["y"], name="tn"), helper.make_node("Relu", ["y"], ["t"], name="tr")], (), None),
    ([helper.make_node("Add", ["x", "z"], ["t"], name="ta")], (helper.make_tensor("z", TensorProto.FLOAT, [], [5.0]),),
     None),
], ids=["node-output-shadows-outer", "output-named-like-later-outer", "initializer-shadows-outer"])
def test_subgraph_names_follow_the_onnx_checker(then_nodes, then_inits, refused):
    """Same verdict as onnx.checker (which ONNX Runtime applies): subgraph node outputs may not redefine
    names defined before the owning node; subgraph initializers may shadow."""
    mp = _if_model(then_nodes, then_inits)
    checker_ok = True
    try:
        onnx.checker.check_model(mp)
    except onnx.checker.ValidationError:
        checker_ok = False
    assert checker_ok == (refused is None)
    if refused is None:
        ort_graph.load(mp.SerializeToString())
    else:
        with pytest.raises(ort_graph.DuplicateNameError, match=refused):
            ort_graph.load(mp.SerializeToString())


# -- 4. text and tensor data ----------------------------------------------------------------------
def test_invalid_utf8_node_name_is_a_load_error():
    mp = _graph_model([helper.make_node("Relu", ["x"], ["y"], name="NODENAME")])
    data = mp.SerializeToString().replace(b"NODENAME", b"NODE\xff\xfeME")
    with pytest.raises(ort_graph.ModelLoadError, match=r"graph\.node\[0\]\.name.*not valid UTF-8.*NODE\\xff"):
        ort_graph.load(data)


def test_invalid_utf8_value_name_is_a_load_error():
    mp = _graph_model([helper.make_node("Relu", ["x"], ["yy"], name="r"),
                       helper.make_node("Neg", ["yy"], ["y"], name="n")])
    data = mp.SerializeToString().replace(b"yy", b"\xc3\x28")
    with pytest.raises(ort_graph.ModelLoadError, match="not valid UTF-8"):
        ort_graph.load(data)


def _with_tensor(fill):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    fill(w)
    return _graph_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [w])


@pytest.mark.parametrize(("fill", "fragment"), [
    (lambda w: setattr(w, "raw_data", b"\0" * 12), r"holds 12 bytes of raw_data, but FLOAT \[4\] needs 16"),
    (lambda w: w.float_data.extend([1.0] * 3), r"holds 3 entries in float_data, but FLOAT \[4\] needs 4"),
    (lambda w: w.float_data.extend([1.0] * 5), r"holds 5 entries in float_data"),
    (lambda w: None, r"holds 0 entries"),
    (lambda w: (w.ClearField("dims"), w.dims.extend([-4]), w.float_data.extend([1.0] * 4)), r"negative dims \[-4\]"),
    (lambda w: setattr(w, "data_type", 99), r"data type UNKNOWN\(99\)"),
])
def test_tensor_data_must_match_its_dims(fill, fragment):
    with pytest.raises(ort_graph.TensorDataError, match=fragment) as info:
        ort_graph.load(_with_tensor(fill).SerializeToString())
    assert "initializer 'w'" in str(info.value)


def test_constant_attribute_tensor_is_checked_too():
    bad = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[2], raw_data=b"\0" * 4)
    mp = _graph_model([helper.make_node("Constant", [], ["c"], name="const", value=bad),
                       helper.make_node("Add", ["x", "c"], ["y"], name="add")])
    with pytest.raises(ort_graph.TensorDataError, match=r"attribute 'value' of node 'const'.*4 bytes"):
        ort_graph.load(mp.SerializeToString())


@pytest.mark.parametrize("dtype", [t for t in TensorProto.DataType.values() if t not in (0, TensorProto.STRING)])
def test_every_well_formed_typed_tensor_passes(dtype):
    t = helper.make_tensor("w", dtype, [5], [1, 0, 1, 1, 0])
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"], name="id")], "g", [],
                          [helper.make_tensor_value_info("y", dtype, [5])], [t])
    ort_graph.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())


# -- found by fuzzing (tests/integration/test_model_fuzz.py): structure a corrupt file can carry -----------
def test_node_arity_is_checked_against_its_schema():
    mp = _graph_model([helper.make_node("Add", ["x"], ["y"], name="add")])
    with pytest.raises(ort_graph.ModelLoadError, match=r"node 'add' \(Add\).*has 1 inputs, but Add \(opset 14.*takes 2"):
        ort_graph.load(mp.SerializeToString())


def test_domain_without_opset_import_is_refused():
    mp = _graph_model([helper.make_node("Relu", ["x"], ["y"], name="r")])
    del mp.opset_import[:]
    with pytest.raises(ort_graph.ModelLoadError, match=r"node 'r' \(Relu\).*imports no opset"):
        ort_graph.load(mp.SerializeToString())


def test_undefined_attribute_type_is_refused():
    mp = _graph_model([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=-1)])
    mp.graph.node[0].attribute[0].type = 0
    with pytest.raises(ort_graph.ModelLoadError, match=r"attribute 'axis' of node 'sm'.*attribute type 0"):
        ort_graph.load(mp.SerializeToString())


def test_nested_subgraph_may_not_redefine_an_outermost_name():
    inner = helper.make_graph([helper.make_node("Neg", ["x"], ["x"], name="inner_neg")], "inner", [],
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])])
    middle = helper.make_graph([helper.make_node("If", ["c"], ["m"], name="inner_if", then_branch=inner,
                                                 else_branch=inner)], "middle", [],
                               [helper.make_tensor_value_info("m", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="outer_if", then_branch=middle, else_branch=middle)],
                          "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(mp)
    with pytest.raises(ort_graph.DuplicateNameError, match=r"'x' is defined twice in graph 'inner'.*a graph input of an "
                                                           r"enclosing graph and by node 'inner_neg'"):
        ort_graph.load(mp.SerializeToString())


@pytest.mark.parametrize("op,domain,attrs,inputs", [
    ("SimplifiedLayerNormalization", "", {"axis": "abc"}, ["x", "g"]),
    ("GroupQueryAttention", "com.microsoft", {"num_heads": "x"}, ["x", "g"]),
    ("MatMulNBits", "com.microsoft", {"N": "x", "K": 8}, ["x", "g"]),
])
def test_a_malformed_attribute_of_a_shape_handled_op_is_a_typed_error_naming_the_node(op, domain, attrs, inputs):
    """Ops whose shapes ort-graph computes itself (contrib handlers): a string where an integer belongs was a
    TypeError from inside the handler; now a MalformedNodeError naming the node, op and attribute."""
    from onnx import numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    node = helper.make_node(op, inputs, ["y"], domain=domain, name="the_node", **attrs)
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones(8, np.float32), "g")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    name = next(iter(attrs))
    with pytest.raises(ort_graph.ModelLoadError, match=rf"attribute '{name}' of node 'the_node' .* is of type STRING "
                                                       r".*\(onnxruntime's schema\) declares it INT"):
        ort_graph.from_proto(proto)  # a file's wrong attribute type is refused at load, as onnxruntime does
    for a in proto.graph.node[0].attribute:  # a graph built in code skips the load checks: the shape handler names the node
        if a.name == name:
            a.CopyFrom(helper.make_attribute(name, 1))
    model = ort_graph.from_proto(proto)
    model.graph.nodes[0].attributes[name] = ort_graph.Attr(name, AttributeProto.STRING, attrs[name])
    with pytest.raises(ort_graph.MalformedNodeError, match=r"node 'the_node' .* re-export the model") as info:
        ort_graph.resolve_shapes(model)
    assert repr(attrs[name]) in str(info.value)
