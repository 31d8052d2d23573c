"""The C float32 RNN / GRU / LSTM (csrc/rnn_kernel.c, rnn_math.c) against the numpy kernel and onnxruntime, one
node at a time through the CPU provider: directions, sequence_lens, initial_h / initial_c, peepholes, clip,
linear_before_reset, input_forget, layout 0 and 1 (onnxruntime refuses layout 1: numpy only there), batch and seq 1
and > 1 (a batch above 4: two passes over R), omitted optional inputs and outputs; the workspace it declares,
which nodes it takes, its errors, and a pre-allocated session running it with no allocation."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import c_kernel_workspace, one_node_model, run_one_node

F = TensorProto.FLOAT
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OUTS = {"RNN": ["y", "yh"], "GRU": ["y", "yh"], "LSTM": ["y", "yh", "yc"]}


def _model(op, *, seq=5, batch=3, inp=4, hidden=6, layout=0, bias=True, lens=None, init=False, peep=False,
           outs=None, const_w=True, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    g = GATES[op]
    w = (rng.standard_normal((dirs, g * hidden, inp)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((dirs, g * hidden, hidden)) * 0.5).astype(np.float32)
    arrays = {"w": w, "r": r}
    if bias:
        arrays["b"] = (rng.standard_normal((dirs, 2 * g * hidden)) * 0.3).astype(np.float32)
    hshape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    feeds = {"x": rng.standard_normal((batch, seq, inp) if layout else (seq, batch, inp)).astype(np.float32)}
    if lens is not None:
        feeds["sl"] = np.asarray(lens, np.int32)
    if init:
        feeds["h0"] = rng.standard_normal(hshape).astype(np.float32)
        if op == "LSTM":
            feeds["c0"] = rng.standard_normal(hshape).astype(np.float32)
    if peep:
        arrays["p"] = (rng.standard_normal((dirs, 3 * hidden)) * 0.5).astype(np.float32)
    names = ["x", "w", "r", "b" if bias else "", "sl" if lens is not None else "", "h0" if init else ""]
    if op == "LSTM":
        names += ["c0" if init else "", "p" if peep else ""]
    while not names[-1]:
        names.pop()
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()] if const_w else []
    if not const_w:
        feeds.update(arrays)
    vis = [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sl" else F, list(a.shape))
           for n, a in feeds.items()]
    outs = OUTS[op] if outs is None else outs
    node = helper.make_node(op, names, outs, hidden_size=hidden, layout=layout, **attrs)
    model = one_node_model(node, vis, [helper.make_tensor_value_info(o, F, None) for o in outs if o], inits)
    return model, feeds


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _check(model, feeds, *, with_ort=True):
    got = run_one_node(model, feeds, "C")
    refs = [run_one_node(model, feeds, "numpy")] + ([_ort(model, feeds)] if with_ort else [])
    for want in refs:
        assert got.keys() == want.keys()
        for name, ref in want.items():
            assert got[name].shape == ref.shape and got[name].dtype == np.float32, name
            np.testing.assert_allclose(got[name], ref, rtol=0, atol=2e-5, err_msg=name)
    return got


ATTRS = [
    ("forward", {}),
    ("reverse", {"direction": "reverse"}),
    ("bidirectional", {"direction": "bidirectional"}),
    ("clip", {"clip": 0.7}),
    ("lens", {"lens": [5, 2, 4]}),
    ("lens_reverse_init", {"lens": [3, 5, 1], "init": True, "direction": "reverse"}),
    ("lens_bidir_init", {"lens": [5, 1, 3], "init": True, "direction": "bidirectional", "clip": 2.0}),
    ("no_bias", {"bias": False, "init": True}),
    ("batch1_seq1", {"batch": 1, "seq": 1, "init": True}),
    ("batch1", {"batch": 1, "seq": 7, "direction": "bidirectional"}),
    ("seq1_batch4", {"batch": 4, "seq": 1}),
    ("packed_batch", {"batch": 9, "seq": 4, "hidden": 20, "inp": 33, "init": True}),  # batch > SG_SKINNY_ROWS
    ("wide", {"batch": 2, "seq": 3, "hidden": 70, "inp": 130}),  # a tail past 8-float vectors and sgemm tiles
]


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("name,kw", ATTRS, ids=[a[0] for a in ATTRS])
def test_c_recurrent_matches_numpy_and_onnxruntime(op, name, kw):
    _check(*_model(op, **kw))


@pytest.mark.parametrize("kw", [{}, {"direction": "bidirectional", "lens": [4, 2, 5], "init": True}],
                         ids=["forward", "bidir_lens_init"])
def test_c_gru_linear_before_reset(kw):
    _check(*_model("GRU", linear_before_reset=1, **kw))


@pytest.mark.parametrize("kw", [{"peep": True}, {"input_forget": 1}, {"peep": True, "input_forget": 1, "init": True,
                                 "direction": "bidirectional", "lens": [2, 5, 3], "clip": 1.5}],
                         ids=["peepholes", "input_forget", "all"])
def test_c_lstm_peepholes_and_input_forget(kw):
    _check(*_model("LSTM", **kw))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("kw", [{}, {"direction": "bidirectional", "lens": [4, 1, 5], "init": True, "peep": True}],
                         ids=["forward", "bidir_lens_init"])
def test_c_recurrent_layout1_matches_numpy(op, kw):
    if op != "LSTM":
        kw = {k: v for k, v in kw.items() if k != "peep"}
    _check(*_model(op, layout=1, **kw), with_ort=False)


@pytest.mark.parametrize("outs", [["y"], ["y", "yh"]], ids=["y_only", "y_yh"])
def test_c_lstm_fewer_outputs(outs):
    _check(*_model("LSTM", outs=outs, init=True))


@pytest.mark.parametrize("outs", [["", "yh", "yc"], ["y", "", "yc"]], ids=["no_y", "no_yh"])
def test_c_lstm_an_omitted_output_before_a_named_one_stays_with_numpy(outs):
    assert _entry_language(_model("LSTM", outs=outs)[0]) == "numpy"


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_c_recurrent_zero_length_sequence_ends_in_zero_states(op, direction):
    got = _check(*_model(op, lens=[0, 5, 2], init=True, direction=direction))
    assert not got["yh"][:, 0].any()  # as onnxruntime, whatever initial_h says


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_c_recurrent_random_shapes(op, seed):
    rng = np.random.default_rng(100 + seed)
    seq, batch, inp, hidden = (int(v) for v in rng.integers(1, [9, 8, 40, 40]))
    lens = list(rng.integers(0, seq + 1, batch)) if rng.random() < 0.5 else None
    direction = str(rng.choice(["forward", "reverse", "bidirectional"]))
    extra = {"linear_before_reset": int(rng.integers(0, 2))} if op == "GRU" else {}
    if op == "LSTM":
        extra = {"peep": bool(rng.random() < 0.5), "input_forget": int(rng.integers(0, 2))}
    _check(*_model(op, seq=seq, batch=batch, inp=inp, hidden=hidden, lens=lens, init=bool(rng.random() < 0.5),
                   direction=direction, seed=seed, **extra))


def _entry_language(model):
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    return c_kernels.kernel_language(ep.entry(node))


def test_c_recurrent_listed_activations_stay_with_numpy():
    model, _ = _model("LSTM", activations=["Sigmoid", "Tanh", "Tanh"])
    assert _entry_language(model) == "numpy"
    model, _ = _model("GRU", activations=["HardSigmoid", "Relu"], activation_alpha=[0.3], activation_beta=[0.4])
    assert _entry_language(model) == "numpy"
    assert _entry_language(_model("GRU")[0]) == "C"


def test_c_recurrent_declares_its_workspace():
    model, feeds = _model("LSTM", seq=5, batch=3, inp=4, hidden=6, direction="bidirectional")
    estimate, slots = c_kernel_workspace(model, [(5, 3, 4), (2, 24, 4), (2, 24, 6)])
    assert len(slots) == 1 and slots[0].slot_id == 0
    # per thread block: one direction's projections (5 x 3 x 24), gates (3 x 24), h and c (3 x 6 each), aligned
    assert slots[0].size_bytes >= 4 * (5 * 3 * 24 + 3 * 24 + 2 * 3 * 6)
    assert estimate == slots[0].size_bytes


def test_c_recurrent_bad_sequence_lens_is_a_typed_error():
    model, feeds = _model("GRU", lens=[5, 6, 1])
    with pytest.raises(Exception, match=r"sequence_lens\[1\] = 6 is outside \[0, 5\]"):
        run_one_node(model, feeds, "C")


def test_c_recurrent_wrong_initial_h_shape_names_the_input():
    model, feeds = _model("RNN", init=True)
    feeds["h0"] = np.zeros((1, 2, 6), np.float32)
    with pytest.raises(Exception, match=r"input initial_h must have shape \[1, 3, 6\].*got rank 3 \[1, 2, 6\]"):
        run_one_node(model, feeds, "C")


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_c_recurrent_bidirectional_on_threads(op, threads):
    """2+ intra-op threads run the two directions at once, each in its own workspace block: the same numbers."""
    model, feeds = _model(op, direction="bidirectional", lens=[5, 2, 4], init=True, hidden=20, inp=9)
    want = run_one_node(model, feeds, "numpy")
    got = run_one_node(model, feeds, "C", threads=threads)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=2e-5, err_msg=name)
    assert got["y"].tobytes() == run_one_node(model, feeds, "C", threads=1)["y"].tobytes()
