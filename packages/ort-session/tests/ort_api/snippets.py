"""Everyday onnxruntime snippets, written once against a module `ort` (onnxruntime or ort_session).

Each snippet takes (ort, models, tmp) and returns a plain result (arrays, lists, strings, bools) that
`test_ort_snippets.py` compares between the two runtimes. A snippet uses only onnxruntime's
documented API, exactly as an onnxruntime user writes it.
"""

from __future__ import annotations

import importlib
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal((3,)).astype(np.float32)
X = RNG.standard_normal((2, 4)).astype(np.float32)


def mlp_model(ir_version: int = 8, w_as_input: bool = False) -> onnx.ModelProto:
    """Y = Relu(X @ W + B), Z = Y * 2; X [batch, 4] float."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 3])
    z = helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["batch", 3])
    inits = [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("MatMul", ["X", "W"], ["mm"], name="fc/MatMul"),
             helper.make_node("Add", ["mm", "B"], ["pre"], name="fc/Add"),
             helper.make_node("Relu", ["pre"], ["Y"], name="fc/Relu"),
             helper.make_node("Mul", ["Y", "two"], ["Z"], name="scale/Mul")]
    inputs = [x] + ([helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3])] if w_as_input else [])
    graph = helper.make_graph(nodes, "mlp_graph", inputs, [y, z], inits, doc_string="graph doc")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir_version,
                              producer_name="snippets", producer_version="1.0", domain="ai.example",
                              model_version=3, doc_string="an MLP")
    helper.set_model_props(model, {"author": "tests", "license": "MIT"})
    return model


def capi(ort):
    return importlib.import_module(ort.__name__ + ".capi.onnxruntime_pybind11_state")


def _sess(ort, models, **kw):
    return ort.InferenceSession(models["path"], providers=["CPUExecutionProvider"], **kw)


def _raises(fn, kind) -> str:
    try:
        fn()
    except kind:
        return "caught"
    return "no error"


# -- sessions ------------------------------------------------------------------------------------
def session_from_path(ort, models, tmp):
    return _sess(ort, models).run(None, {"X": X})[0]


def session_from_bytes(ort, models, tmp):
    return ort.InferenceSession(models["bytes"], providers=["CPUExecutionProvider"]).run(None, {"X": X})[1]


def session_without_providers(ort, models, tmp):
    return ort.InferenceSession(models["path"]).run(["Y"], {"X": X})[0]


def session_options_positional(ort, models, tmp):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(models["path"], so, providers=["CPUExecutionProvider"]).run(None, {"X": X})[0]


def session_options_keyword(ort, models, tmp):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(models["path"], sess_options=so, providers=["CPUExecutionProvider"]).run(None, {"X": X})[0]


def optimizations_disabled(ort, models, tmp):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(models["path"], so, providers=["CPUExecutionProvider"]).run(None, {"X": X})[1]


# -- inputs, outputs, metadata --------------------------------------------------------------------
def input_names(ort, models, tmp):
    return [i.name for i in _sess(ort, models).get_inputs()]


def input_shapes(ort, models, tmp):
    return [i.shape for i in _sess(ort, models).get_inputs()]


def input_types(ort, models, tmp):
    return [i.type for i in _sess(ort, models).get_inputs()]


def outputs_described(ort, models, tmp):
    return [(o.name, o.shape, o.type) for o in _sess(ort, models).get_outputs()]


def model_metadata(ort, models, tmp):
    meta = _sess(ort, models).get_modelmeta()
    return [meta.producer_name, meta.graph_name, meta.domain, meta.description, meta.version,
            sorted(meta.custom_metadata_map.items())]


def overridable_initializers(ort, models, tmp):
    sess = ort.InferenceSession(models["w_input_bytes"], providers=["CPUExecutionProvider"])
    return [(i.name, i.shape, i.type) for i in sess.get_overridable_initializers()]


def free_dimension_override(ort, models, tmp):
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 2)
    sess = ort.InferenceSession(models["path"], so, providers=["CPUExecutionProvider"])
    return [sess.get_inputs()[0].shape, sess.run(None, {"X": X})[0]]


# -- run -----------------------------------------------------------------------------------------
def run_named_output(ort, models, tmp):
    return _sess(ort, models).run(["Z"], {"X": X})


def run_outputs_reordered(ort, models, tmp):
    return _sess(ort, models).run(["Z", "Y"], {"X": X})


def run_with_input_names_from_session(ort, models, tmp):
    sess = _sess(ort, models)
    return sess.run([o.name for o in sess.get_outputs()], {sess.get_inputs()[0].name: X})


def run_options(ort, models, tmp):
    ro = ort.RunOptions()
    ro.log_severity_level = 3
    ro.logid = "snippet"
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return [_sess(ort, models).run(None, {"X": X}, ro)[0], ro.get_run_config_entry("memory.enable_memory_arena_shrinkage")]


def run_terminated(ort, models, tmp):
    ro = ort.RunOptions()
    ro.terminate = True
    return _raises(lambda: _sess(ort, models).run(None, {"X": X}, ro), capi(ort).Fail)


def run_with_ort_values(ort, models, tmp):
    sess = _sess(ort, models)
    outs = sess.run_with_ort_values(["Y"], {"X": ort.OrtValue.ortvalue_from_numpy(X)})
    return [outs[0].numpy(), outs[0].shape(), outs[0].data_type()]


def run_output_dtype(ort, models, tmp):
    out = _sess(ort, models).run(None, {"X": X})
    return [type(out).__name__, str(out[0].dtype), list(out[0].shape)]


# -- OrtValue --------------------------------------------------------------------------------------
def ortvalue_from_numpy(ort, models, tmp):
    v = ort.OrtValue.ortvalue_from_numpy(X)
    return [v.shape(), v.data_type(), v.device_name(), v.is_tensor(), v.numpy(), v.element_type()]


def ortvalue_from_shape_and_type(ort, models, tmp):
    v = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.int64)
    return [v.shape(), v.data_type(), v.device_name()]


def ortvalue_update_inplace(ort, models, tmp):
    v = ort.OrtValue.ortvalue_from_numpy(np.zeros((2, 4), np.float32))
    v.update_inplace(X)
    return _sess(ort, models).run_with_ort_values(None, {"X": v})[1].numpy()


# -- IOBinding -------------------------------------------------------------------------------------
def iobinding_cpu_round_trip(ort, models, tmp):
    sess = _sess(ort, models)
    io = sess.io_binding()
    io.bind_cpu_input("X", X)
    io.bind_output("Y")
    sess.run_with_iobinding(io)
    return io.copy_outputs_to_cpu()[0]


def iobinding_ortvalues(ort, models, tmp):
    sess = _sess(ort, models)
    out = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    io = sess.io_binding()
    io.bind_ortvalue_input("X", ort.OrtValue.ortvalue_from_numpy(X))
    io.bind_ortvalue_output("Z", out)
    sess.run_with_iobinding(io)
    return [out.numpy(), io.get_outputs()[0].numpy()]


def iobinding_pointers(ort, models, tmp):
    sess = _sess(ort, models)
    x = np.ascontiguousarray(X)
    y = np.zeros((2, 3), np.float32)
    io = sess.io_binding()
    io.bind_input("X", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    io.bind_output("Y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)
    sess.run_with_iobinding(io)
    return y


def iobinding_rebind(ort, models, tmp):
    sess = _sess(ort, models)
    io = sess.io_binding()
    io.bind_cpu_input("X", np.zeros((2, 4), np.float32))
    io.bind_output("Y")
    io.clear_binding_inputs()
    io.bind_cpu_input("X", X)
    sess.run_with_iobinding(io)
    first = io.get_outputs()[0].numpy().copy()
    io.clear_binding_outputs()
    io.bind_output("Z")
    sess.run_with_iobinding(io)
    return [first, io.copy_outputs_to_cpu()[0]]


# -- providers -------------------------------------------------------------------------------------
def providers_tuple_form(ort, models, tmp):
    return ort.InferenceSession(models["path"], providers=[("CPUExecutionProvider", {})]).run(None, {"X": X})[0]


def provider_options_list(ort, models, tmp):
    sess = ort.InferenceSession(models["path"], providers=["CPUExecutionProvider"], provider_options=[{}])
    return sess.get_providers()


def get_providers(ort, models, tmp):
    return _sess(ort, models).get_providers()


def available_providers(ort, models, tmp):
    return "CPUExecutionProvider" in ort.get_available_providers() and "CPUExecutionProvider" in ort.get_all_providers()


def provider_options_reported(ort, models, tmp):
    return _sess(ort, models).get_provider_options()


def fallback_switches(ort, models, tmp):
    sess = _sess(ort, models)
    sess.disable_fallback()
    sess.enable_fallback()
    return sess.run(["Y"], {"X": X})[0]


def set_providers(ort, models, tmp):
    sess = _sess(ort, models)
    sess.set_providers(["CPUExecutionProvider"])
    return [sess.get_providers(), sess.run(None, {"X": X})[1]]


# -- SessionOptions --------------------------------------------------------------------------------
def session_options_attributes(ort, models, tmp):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_mem_pattern = False
    so.enable_cpu_mem_arena = False
    so.log_severity_level = 3
    so.log_verbosity_level = 0
    sess = ort.InferenceSession(models["path"], so, providers=["CPUExecutionProvider"])
    got = sess.get_session_options()
    return [got.intra_op_num_threads, got.inter_op_num_threads, int(got.execution_mode), got.enable_mem_pattern,
            got.enable_cpu_mem_arena, got.log_severity_level, sess.run(None, {"X": X})[0]]


def session_config_entries(ort, models, tmp):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ort.InferenceSession(models["path"], so, providers=["CPUExecutionProvider"])
    return so.get_session_config_entry("session.intra_op.allow_spinning")


def enum_values(ort, models, tmp):
    return [int(ort.GraphOptimizationLevel.ORT_DISABLE_ALL), int(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
            int(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED), int(ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
            int(ort.ExecutionMode.ORT_SEQUENTIAL), int(ort.ExecutionMode.ORT_PARALLEL)]


def optimized_model_written(ort, models, tmp):
    so = ort.SessionOptions()
    so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
    ort.InferenceSession(models["path"], so, providers=["CPUExecutionProvider"])
    saved = onnx.load(so.optimized_model_filepath)
    return [o.name for o in saved.graph.output]


def add_initializer(ort, models, tmp):
    so = ort.SessionOptions()
    w = ort.OrtValue.ortvalue_from_numpy(np.full((4, 3), 0.5, np.float32))
    so.add_initializer("W", w)
    return ort.InferenceSession(models["path"], so, providers=["CPUExecutionProvider"]).run(["Y"], {"X": X})[0]


# -- errors ---------------------------------------------------------------------------------------
def wrong_dtype_is_invalid_argument(ort, models, tmp):
    return _raises(lambda: _sess(ort, models).run(None, {"X": X.astype(np.float64)}), capi(ort).InvalidArgument)


def wrong_dimension_is_invalid_argument(ort, models, tmp):
    return _raises(lambda: _sess(ort, models).run(None, {"X": np.ones((2, 5), np.float32)}), capi(ort).InvalidArgument)


def unknown_output_is_invalid_argument(ort, models, tmp):
    return _raises(lambda: _sess(ort, models).run(["Q"], {"X": X}), capi(ort).InvalidArgument)


def missing_input_is_value_error(ort, models, tmp):
    return _raises(lambda: _sess(ort, models).run(None, {}), ValueError)


def missing_file_is_no_such_file(ort, models, tmp):
    return _raises(lambda: ort.InferenceSession(os.path.join(tmp, "absent.onnx"), providers=["CPUExecutionProvider"]),
                   capi(ort).NoSuchFile)


def garbage_bytes_is_invalid_protobuf(ort, models, tmp):
    return _raises(lambda: ort.InferenceSession(b"\x08\x07garbage", providers=["CPUExecutionProvider"]),
                   capi(ort).InvalidProtobuf)


# -- profiling ------------------------------------------------------------------------------------
def profiling_file(ort, models, tmp):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the nodes as the model has them
    so.profile_file_prefix = os.path.join(tmp, "prof")
    sess = ort.InferenceSession(models["path"], so, providers=["CPUExecutionProvider"])
    sess.run(None, {"X": X})
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    nodes = sorted({e["args"]["op_name"] for e in events if e.get("cat") == "Node"})
    return [os.path.basename(path).startswith("prof"), path.endswith(".json"), nodes,
            any(e.get("name") == "model_run" for e in events), sess.get_profiling_start_time_ns() > 0]


def profiling_off(ort, models, tmp):
    return _sess(ort, models).end_profiling()


SNIPPETS = [v for k, v in list(globals().items()) if callable(v) and getattr(v, "__module__", "") == __name__
            and k not in ("mlp_model", "capi") and not k.startswith("_")]
