"""Generated models for tests, demos and benchmarks, with Hugging-Face-style node names.

`decoder(DecoderConfig(...))` builds a Llama-style decoder as TorchScript's exporter names it:
`/model/embed_tokens/Gather`, `/model/layers.N/self_attn/q_proj/MatMul`, `/model/layers.N/mlp/...`,
`/model/norm/...`, `/lm_head/MatMul`. It runs under onnxruntime; KV cache and external data optional.
"""

from __future__ import annotations

import os
import pathlib

import attrs
import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from ._io import from_proto, save
from ._ir import Model

OPSET = 17


@attrs.frozen
class DecoderConfig:
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 256
    intermediate: int | None = None  # default 3 x hidden, rounded
    kv_cache: bool = True
    bias: bool = False  # projections as MatMul + Add (the MatMul+Add fusion's input)
    norm: str = "rms"  # "rms" (decomposed RMSNorm) or "layernorm" (decomposed LayerNormalization)
    max_positions: int = 4096
    batch: int | str = "batch"  # an int makes the dimension static
    sequence: int | str = "sequence"
    past_sequence: int | str = "past_sequence"
    layer_annotations: bool = False  # write `layer_ann` metadata (annotation mode)
    seed: int = 0
    eps: float = 1e-5

    def __attrs_post_init__(self) -> None:
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(
                f"hidden={self.hidden} must divide by heads={self.heads}, and heads by kv_heads={self.kv_heads}"
            )
        if self.norm not in ("rms", "layernorm"):
            raise ValueError(f"norm={self.norm!r}; use 'rms' or 'layernorm'")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def ffn(self) -> int:
        return self.intermediate or (3 * self.hidden)


class _Builder:
    def __init__(self, cfg: DecoderConfig) -> None:
        self.cfg = cfg
        self.nodes: list = []
        self.inits: list[TensorProto] = []
        self.rng = np.random.default_rng(cfg.seed)
        self.ann: str | None = None

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape, scale: float = 0.05) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, name: str, inputs: list[str], n_out: int = 1, out: str | None = None,
           **attrs_) -> str | list[str]:
        outs = [out] if out is not None else [f"{name}_output_{i}" for i in range(n_out)]
        node = helper.make_node(op_type, inputs, outs, name=name, **attrs_)
        if self.ann is not None:
            entry = node.metadata_props.add()
            entry.key, entry.value = "layer_ann", self.ann
        self.nodes.append(node)
        return outs[0] if n_out == 1 else outs

    def linear(self, scope: str, x: str, k: int, n: int, wname: str) -> str:
        y = self.op("MatMul", f"{scope}/MatMul", [x, self.weight(f"{wname}.weight", (k, n))])
        if self.cfg.bias:
            y = self.op("Add", f"{scope}/Add", [y, self.weight(f"{wname}.bias", (n,), 0.01)])
        return y

    def norm(self, scope: str, x: str, wname: str) -> str:
        c, h = self.cfg, self.cfg.hidden
        w = self.const(f"{wname}.weight", np.ones(h, np.float32) + self.rng.standard_normal(h).astype(np.float32) * 0.01)
        eps = self.const(f"{wname}.eps", np.array(c.eps, np.float32))
        two = self.const(f"{wname}.two", np.array(2.0, np.float32))
        if c.norm == "layernorm":
            mean = self.op("ReduceMean", f"{scope}/ReduceMean", [x], axes=[-1])
            x = self.op("Sub", f"{scope}/Sub", [x, mean])
        sq = self.op("Pow", f"{scope}/Pow", [x, two])
        var = self.op("ReduceMean", f"{scope}/ReduceMean_1", [sq], axes=[-1])
        std = self.op("Sqrt", f"{scope}/Sqrt", [self.op("Add", f"{scope}/Add", [var, eps])])
        y = self.op("Mul", f"{scope}/Mul_1", [self.op("Div", f"{scope}/Div", [x, std]), w])
        if c.norm == "layernorm":
            y = self.op("Add", f"{scope}/Add_1", [y, self.const(f"{wname}.bias", np.zeros(h, np.float32))])
        return y


def _rope_tables(cfg: DecoderConfig) -> tuple[np.ndarray, np.ndarray]:
    d = cfg.head_dim
    inv = 1.0 / (10000 ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = np.outer(np.arange(cfg.max_positions, dtype=np.float64), inv)
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def decoder_proto(cfg: DecoderConfig = DecoderConfig()) -> ModelProto:
    """A Llama-style decoder as an onnx ModelProto (weights embedded)."""
    b = _Builder(cfg)
    H, KV, D, hid = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.hidden
    F = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [cfg.batch, cfg.sequence])]
    outputs = [helper.make_tensor_value_info("logits", F, [cfg.batch, cfg.sequence, cfg.vocab])]
    total = "total_sequence"
    if isinstance(cfg.sequence, int) and isinstance(cfg.past_sequence, int):
        total = cfg.sequence + cfg.past_sequence if cfg.kv_cache else cfg.sequence
    if cfg.kv_cache:
        for i in range(cfg.layers):
            for kind in ("key", "value"):
                inputs.append(helper.make_tensor_value_info(
                    f"past_key_values.{i}.{kind}", F, [cfg.batch, KV, cfg.past_sequence, D]))
                outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", F, [cfg.batch, KV, total, D]))
    cos, sin = _rope_tables(cfg)
    b.const("model.rotary_emb.cos_cached", cos)
    b.const("model.rotary_emb.sin_cached", sin)
    zero, one = b.const("const.zero", np.array(0, np.int64)), b.const("const.one", np.array(1, np.int64))
    idx1, idx2 = b.const("const.idx1", np.array(1, np.int64)), b.const("const.idx2", np.array(2, np.int64))

    # positions and causal mask, shared by every layer
    ids_shape = b.op("Shape", "/model/Shape", ["input_ids"])
    seq = b.op("Gather", "/model/Gather", [ids_shape, idx1], axis=0)
    if cfg.kv_cache:
        past_shape = b.op("Shape", "/model/Shape_1", ["past_key_values.0.key"])
        past = b.op("Gather", "/model/Gather_1", [past_shape, idx2], axis=0)
    else:
        past = zero
    tot = b.op("Add", "/model/Add", [past, seq])
    pos = b.op("Range", "/model/rotary_emb/Range", [past, tot, one])
    cos_t = b.op("Gather", "/model/rotary_emb/Gather", ["model.rotary_emb.cos_cached", pos], axis=0)
    sin_t = b.op("Gather", "/model/rotary_emb/Gather_1", ["model.rotary_emb.sin_cached", pos], axis=0)
    kpos = b.op("Range", "/model/attn_mask/Range", [zero, tot, one])
    cond = b.op("Greater", "/model/attn_mask/Greater", [
        b.op("Unsqueeze", "/model/attn_mask/Unsqueeze", [kpos, b.const("const.axes0", np.array([0], np.int64))]),
        b.op("Unsqueeze", "/model/attn_mask/Unsqueeze_1", [pos, b.const("const.axes1", np.array([1], np.int64))])])
    mask = b.op("Where", "/model/attn_mask/Where", [cond, b.const("const.neg", np.array(-1e9, np.float32)),
                                                    b.const("const.fzero", np.array(0.0, np.float32))])

    x = b.op("Gather", "/model/embed_tokens/Gather", [b.weight("model.embed_tokens.weight", (cfg.vocab, hid), 0.5), "input_ids"], axis=0)
    heads_shape = b.const("const.shape_q", np.array([0, 0, H, D], np.int64))
    kv_shape = b.const("const.shape_kv", np.array([0, 0, KV, D], np.int64))
    merge_shape = b.const("const.shape_merge", np.array([0, 0, hid], np.int64))
    rep_shape = b.const("const.shape_rep", np.array([1, 1, H // KV, 1, 1], np.int64))
    gqa_shape = b.const("const.shape_gqa", np.array([0, H, -1, D], np.int64))
    half = D // 2
    s_lo, s_mid, s_hi = (b.const(f"const.rope_{n}", np.array([v], np.int64)) for n, v in (("lo", 0), ("mid", half), ("hi", D)))
    axis3 = b.const("const.axis3", np.array([3], np.int64))
    scale = b.const("const.scale", np.array(1.0 / np.sqrt(D), np.float32))

    def rope(scope: str, t: str) -> str:
        lo = b.op("Slice", f"{scope}/Slice", [t, s_lo, s_mid, axis3])
        hi = b.op("Slice", f"{scope}/Slice_1", [t, s_mid, s_hi, axis3])
        rot = b.op("Concat", f"{scope}/Concat", [b.op("Neg", f"{scope}/Neg", [hi]), lo], axis=-1)
        return b.op("Add", f"{scope}/Add", [b.op("Mul", f"{scope}/Mul", [t, cos_t]), b.op("Mul", f"{scope}/Mul_1", [rot, sin_t])])

    for i in range(cfg.layers):
        p, w = f"/model/layers.{i}", f"model.layers.{i}"
        b.ann = f"layers.{i}" if cfg.layer_annotations else None
        h = b.norm(f"{p}/input_layernorm", x, f"{w}.input_layernorm")
        a = f"{p}/self_attn"
        q = b.linear(f"{a}/q_proj", h, hid, H * D, f"{w}.self_attn.q_proj")
        k = b.linear(f"{a}/k_proj", h, hid, KV * D, f"{w}.self_attn.k_proj")
        v = b.linear(f"{a}/v_proj", h, hid, KV * D, f"{w}.self_attn.v_proj")
        q = b.op("Transpose", f"{a}/Transpose", [b.op("Reshape", f"{a}/Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])
        k = b.op("Transpose", f"{a}/Transpose_1", [b.op("Reshape", f"{a}/Reshape_1", [k, kv_shape])], perm=[0, 2, 1, 3])
        v = b.op("Transpose", f"{a}/Transpose_2", [b.op("Reshape", f"{a}/Reshape_2", [v, kv_shape])], perm=[0, 2, 1, 3])
        q, k = rope(f"{a}/rotary_q", q), rope(f"{a}/rotary_k", k)
        if cfg.kv_cache:
            k = b.op("Concat", f"{a}/Concat_k", [f"past_key_values.{i}.key", k], axis=2)
            v = b.op("Concat", f"{a}/Concat_v", [f"past_key_values.{i}.value", v], axis=2)
            b.op("Identity", f"{a}/present_key", [k], out=f"present.{i}.key")
            b.op("Identity", f"{a}/present_value", [v], out=f"present.{i}.value")
        if KV != H:
            k, v = (b.op("Reshape", f"{a}/repeat_kv/Reshape{s}", [
                b.op("Expand", f"{a}/repeat_kv/Expand{s}", [
                    b.op("Unsqueeze", f"{a}/repeat_kv/Unsqueeze{s}", [t, idx2]), rep_shape])
                , gqa_shape]) for s, t in (("", k), ("_1", v)))
        kt = b.op("Transpose", f"{a}/Transpose_3", [k], perm=[0, 1, 3, 2])
        scores = b.op("Mul", f"{a}/Mul", [b.op("MatMul", f"{a}/MatMul", [q, kt]), scale])
        probs = b.op("Softmax", f"{a}/Softmax", [b.op("Add", f"{a}/Add", [scores, mask])], axis=-1)
        ctx = b.op("MatMul", f"{a}/MatMul_1", [probs, v])
        ctx = b.op("Reshape", f"{a}/Reshape_3", [b.op("Transpose", f"{a}/Transpose_4", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        x = b.op("Add", f"{p}/Add", [x, b.linear(f"{a}/o_proj", ctx, H * D, hid, f"{w}.self_attn.o_proj")])
        h = b.norm(f"{p}/post_attention_layernorm", x, f"{w}.post_attention_layernorm")
        m = f"{p}/mlp"
        gate = b.linear(f"{m}/gate_proj", h, hid, cfg.ffn, f"{w}.mlp.gate_proj")
        act = b.op("Mul", f"{m}/act_fn/Mul", [gate, b.op("Sigmoid", f"{m}/act_fn/Sigmoid", [gate])])
        up = b.linear(f"{m}/up_proj", h, hid, cfg.ffn, f"{w}.mlp.up_proj")
        down = b.linear(f"{m}/down_proj", b.op("Mul", f"{m}/Mul", [act, up]), cfg.ffn, hid, f"{w}.mlp.down_proj")
        x = b.op("Add", f"{p}/Add_1", [x, down])
    b.ann = None
    x = b.norm("/model/norm", x, "model.norm")
    b.nodes.append(helper.make_node("MatMul", [x, b.weight("lm_head.weight", (hid, cfg.vocab))], ["logits"], name="/lm_head/MatMul"))
    graph = helper.make_graph(b.nodes, "decoder", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                              producer_name="ort-graph.zoo")
    return model


def decoder(cfg: DecoderConfig = DecoderConfig()) -> Model:
    """The decoder as an ort-graph Model."""
    return from_proto(decoder_proto(cfg))


def write_decoder(path: str | os.PathLike, cfg: DecoderConfig = DecoderConfig(), *, external_data: bool = True) -> pathlib.Path:
    """Write the decoder to `path` (weights in `<path>.data` when external_data)."""
    return save(decoder(cfg), path, external_data=external_data)


DEMO_CONFIG = DecoderConfig(layers=8, hidden=256, heads=8, kv_heads=4, vocab=1024, intermediate=688)


def demo_decoder() -> Model:
    """The built-in demo model: an 8-layer, 256-wide decoder (~29 MB of fp32 weights)."""
    return decoder(DEMO_CONFIG)


def decoder_inputs(cfg: DecoderConfig, batch: int = 1, sequence: int = 8, past: int = 0, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for a decoder built from `cfg`."""
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, cfg.vocab, (batch, sequence), dtype=np.int64)}
    if cfg.kv_cache:
        for i in range(cfg.layers):
            for kind in ("key", "value"):
                feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal((batch, cfg.kv_heads, past, cfg.head_dim)).astype(np.float32)
    return feeds
