"""RNN / GRU / LSTM (ops_extra_rnn) against onnxruntime: directions, sequence_lens, clip, activations with
alpha/beta, linear_before_reset, peepholes, input_forget, layout 1, initial states."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_OUT = {"RNN": 2, "GRU": 2, "LSTM": 3}


def _inputs(rng, op, *, seq=5, batch=3, inp=4, hidden=6, dirs=1, layout=0, lens=False, init=False, peep=False):
    g = GATES[op]
    x = rng.standard_normal((batch, seq, inp) if layout else (seq, batch, inp)).astype(np.float32)
    w = (rng.standard_normal((dirs, g * hidden, inp)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((dirs, g * hidden, hidden)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((dirs, 2 * g * hidden)) * 0.2).astype(np.float32)
    sl = np.array([seq, 2, 4][:batch], np.int32) if lens else None
    hshape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    h0 = rng.standard_normal(hshape).astype(np.float32) if init else None
    ins = [x, w, r, b, sl, h0]
    if op == "LSTM":
        ins += [rng.standard_normal(hshape).astype(np.float32) if init else None,
                (rng.standard_normal((dirs, 3 * hidden)) * 0.3).astype(np.float32) if peep else None]
    while ins and ins[-1] is None:
        ins.pop()
    return ins


CASES = [
    ("forward", {}, {}),
    ("reverse", {}, {"direction": "reverse"}),
    ("bidirectional", {"dirs": 2}, {"direction": "bidirectional"}),
    ("seq_lens", {"lens": True}, {}),
    ("seq_lens_reverse", {"lens": True}, {"direction": "reverse"}),
    ("seq_lens_bidir_init", {"lens": True, "dirs": 2, "init": True}, {"direction": "bidirectional"}),
    ("clip", {}, {"clip": 0.5}),
]


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("name,kw,attrs", CASES, ids=[c[0] for c in CASES])
def test_recurrent_matches_onnxruntime(kit, rng, op, name, kw, attrs):
    ins = _inputs(rng, op, **kw)
    attrs = {"hidden_size": 6} | attrs
    ref = kit.ort(op, ins, N_OUT[op], domain="", opset=22, **attrs)
    got = kit.ours(op, ins, N_OUT[op], domain="", opset=22, **attrs)
    for r, o in zip(ref, got):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_layout1_is_batch_major_layout0(kit, rng, op):
    """onnxruntime rejects layout=1; it must equal layout 0 on transposed inputs/outputs."""
    ins = _inputs(rng, op, dirs=2, init=True, lens=True)
    attrs = {"hidden_size": 6, "direction": "bidirectional"}
    ref = kit.ort(op, ins, N_OUT[op], domain="", opset=22, **attrs)
    t_ins = [ins[0].transpose(1, 0, 2)] + ins[1:5] + [None if a is None else a.transpose(1, 0, 2) for a in ins[5:7]]
    t_ins += ins[7:]
    got = kit.ours(op, t_ins, N_OUT[op], domain="", opset=22, layout=1, **attrs)
    np.testing.assert_allclose(got[0], ref[0].transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-5)
    for r, o in zip(ref[1:], got[1:]):
        np.testing.assert_allclose(o, r.transpose(1, 0, 2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,attrs,kw", [
    ("GRU", {"linear_before_reset": 1}, {}),
    ("LSTM", {}, {"peep": True, "init": True}),
    ("LSTM", {"input_forget": 1}, {}),
    ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.3]}, {}),
    ("RNN", {"activations": ["Affine", "ScaledTanh"], "activation_alpha": [0.7, 1.5], "activation_beta": [0.1, 0.6],
             "direction": "bidirectional"}, {"dirs": 2}),
    ("GRU", {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.4]}, {}),
    ("LSTM", {"activations": ["Sigmoid", "Elu", "ThresholdedRelu"], "activation_alpha": [0.9, 0.1]}, {}),
    ("LSTM", {"activations": ["Sigmoid", "Tanh", "Relu", "HardSigmoid", "Softplus", "Tanh"],
              "direction": "bidirectional"}, {"dirs": 2, "lens": True}),
])
def test_recurrent_variants_match_onnxruntime(kit, rng, op, attrs, kw):
    ins = _inputs(rng, op, **kw)
    attrs = {"hidden_size": 6} | attrs
    ref = kit.ort(op, ins, N_OUT[op], domain="", opset=22, **attrs)
    got = kit.ours(op, ins, N_OUT[op], domain="", opset=22, **attrs)
    for r, o in zip(ref, got):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)


def test_recurrent_declines(kit):
    F = TensorProto.FLOAT
    infos = [InputInfo(F, (5, 3, 4)), InputInfo(F, (1, 18, 4)), InputInfo(F, (1, 18, 6))]
    d = kit.decline_of("GRU", infos, 2, domain="", opset=22, hidden_size=6, direction="sideways")
    assert d is not None and "sideways" in d.rejected
    d = kit.decline_of("GRU", infos, 2, domain="", opset=22, hidden_size=6, activations=["Swish", "Tanh"])
    assert d is not None and "Swish" in d.rejected
    d = kit.decline_of("RNN", [InputInfo(TensorProto.INT32, (5, 3, 4))] + infos[1:], 2, domain="", opset=22)
    assert d is not None and "INT32" in d.rejected
