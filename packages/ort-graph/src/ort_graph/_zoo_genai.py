"""A Llama decoder laid out as onnxruntime-genai's model builder exports it for CPU (fp32), at any width.

Same node op types in the same order, the same node, tensor, input and output names as
`python -m onnxruntime_genai.models.builder -p fp32 -e cpu`:

- the attention-mask subgraph (`/model/attn_mask_reformat/attn_mask_subgraph/*`): seqlens_k = sum(mask) - 1
  and total_sequence_length = mask.shape[1], both int32;
- per layer: (Skip)SimplifiedLayerNormalization (the residual crosses layers through output 3), one packed
  qkv MatMul, com.microsoft GroupQueryAttention (do_rotary=1 with the shared `cos_cache`/`sin_cache`),
  o_proj, SkipSimplifiedLayerNormalization, gate/up MatMul, Sigmoid * Mul (SiLU), Mul, down_proj;
- the final `/model/layers.L/final_norm_layernorm/SkipLayerNorm` and `/lm_head/MatMul`;
- inputs `input_ids`, `attention_mask`, `past_key_values.N.key` (all keys, then all values) as
  (batch, kv_heads, past, head_dim); outputs `logits`, `present.N.key`, `present.N.value`.

Opsets ai.onnx 22 and com.microsoft 1, as the builder writes. Quantize its MatMuls to MatMulNBits with
onnxruntime's quantizer (the builder's int4 export names them `.../MatMul_Q4`).
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper

from ._zoo import DecoderConfig, _Builder

GENAI_OPSET = 22
_MASK = "/model/attn_mask_reformat/attn_mask_subgraph"


def _check(cfg: DecoderConfig) -> None:
    if not cfg.kv_cache or cfg.bias or cfg.norm != "rms" or cfg.head_dim % 2:
        raise ValueError(f"genai_decoder_proto builds the genai layout: kv_cache=True, bias=False, norm='rms' and an "
                         f"even head_dim; got kv_cache={cfg.kv_cache!r}, bias={cfg.bias!r}, norm={cfg.norm!r}, "
                         f"head_dim={cfg.head_dim!r}; change the DecoderConfig")


def _rope_caches(cfg: DecoderConfig) -> tuple[np.ndarray, np.ndarray]:
    d = cfg.head_dim
    inv = 1.0 / (10000 ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = np.outer(np.arange(cfg.max_positions, dtype=np.float64), inv)  # (max_positions, head_dim / 2)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


_DEFAULT = DecoderConfig()


def genai_decoder_proto(cfg: DecoderConfig = _DEFAULT) -> ModelProto:
    """The genai-builder fp32 CPU layout of a decoder with `cfg`'s sizes (weights embedded, random)."""
    _check(cfg)
    b = _Builder(cfg)
    H, KV, D, hid, L = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.hidden, cfg.layers
    F, I64 = TensorProto.FLOAT, TensorProto.INT64
    total = "total_sequence_length"
    inputs = [helper.make_tensor_value_info("input_ids", I64, [cfg.batch, cfg.sequence]),
              helper.make_tensor_value_info("attention_mask", I64, [cfg.batch, total])]
    outputs = [helper.make_tensor_value_info("logits", F, [cfg.batch, cfg.sequence, cfg.vocab])]
    for kind in ("key", "value"):
        for i in range(L):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", F, [cfg.batch, KV, cfg.past_sequence, D]))
    for kind in ("key", "value"):
        for i in range(L):
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", F, [cfg.batch, KV, total, D]))

    def node(op: str, name: str, ins: list[str], outs: list[str], domain: str = "", **attrs_) -> list[str]:
        b.nodes.append(helper.make_node(op, ins, outs, name=name, domain=domain, **attrs_))
        return outs

    def plain(op: str, name: str, ins: list[str], **attrs_) -> str:
        return node(op, name, ins, [f"{name}/output_0"], **attrs_)[0]

    one_1d, one = "/model/constants/INT64/[1]", "/model/constants/INT64/1"
    node("Constant", "/model/constant_nodes/INT64/[1]", [], [one_1d], value=helper.make_tensor("", I64, [1], [1]))
    red = plain("ReduceSum", f"{_MASK}/ReduceSum", ["attention_mask", one_1d], keepdims=0)
    seqlens_k = plain("Cast", f"{_MASK}/Sub/Cast", [plain("Sub", f"{_MASK}/Sub", [red, one_1d])], to=TensorProto.INT32)
    shape = plain("Shape", f"{_MASK}/Shape", ["attention_mask"])
    node("Constant", "/model/constant_nodes/INT64/1", [], [one], value=helper.make_tensor("", I64, [], [1]))
    total_len = plain("Cast", f"{_MASK}/Gather/Cast", [plain("Gather", f"{_MASK}/Gather", [shape, one], axis=0)],
                      to=TensorProto.INT32)
    x = plain("Gather", "/model/embed_tokens/Gather", [b.weight("model.embed_tokens.weight", (cfg.vocab, hid), 0.5), "input_ids"])

    def norm_weight(name: str) -> str:
        return b.const(name, np.ones(hid, np.float32) + b.rng.standard_normal(hid).astype(np.float32) * 0.01)

    def skip_norm(scope: str, name: str, inp: str, skip: str, weight: str, with_sum: bool = True) -> tuple[str, str]:
        outs = [f"{scope}/output_0", "", "", f"{scope}/output_3"] if with_sum else [f"{scope}/output_0"]
        node("SkipSimplifiedLayerNormalization", f"{scope}/{name}", [inp, skip, norm_weight(weight)], outs,
             domain="com.microsoft", epsilon=cfg.eps)
        return outs[0], outs[-1]

    def matmul(scope: str, inp: str, k: int, n: int, wname: str) -> str:
        return plain("MatMul", f"{scope}/MatMul", [inp, b.weight(f"{wname}.MatMul.weight", (k, n))])

    residual, down = x, ""
    cos, sin = _rope_caches(cfg)
    for i in range(L):
        p, w = f"/model/layers.{i}", f"model.layers.{i}"
        if i == 0:
            h = node("SimplifiedLayerNormalization", f"{p}/input_layernorm/LayerNorm",
                     [x, norm_weight(f"{w}.input_layernorm.weight")], [f"{p}/input_layernorm/output_0"],
                     epsilon=cfg.eps, axis=-1, stash_type=1)[0]
        else:
            h, residual = skip_norm(f"{p}/input_layernorm", "SkipLayerNorm", residual, down, f"{w}.input_layernorm.weight")
        qkv = matmul(f"{p}/attn/qkv_proj", h, hid, (H + 2 * KV) * D, f"{w}.attn.qkv_proj")
        if i == 0:
            b.const("cos_cache", cos)
            b.const("sin_cache", sin)
        attn = node("GroupQueryAttention", f"{p}/attn/GroupQueryAttention",
                    [qkv, "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens_k, total_len,
                     "cos_cache", "sin_cache", "", "", ""],
                    [f"{p}/attn/GroupQueryAttention/output_0", f"present.{i}.key", f"present.{i}.value"],
                    domain="com.microsoft", num_heads=H, kv_num_heads=KV, scale=float(1.0 / np.sqrt(D)),
                    local_window_size=-1, softcap=0.0, do_rotary=1, rotary_interleaved=0)[0]
        o = matmul(f"{p}/attn/o_proj", attn, H * D, hid, f"{w}.attn.o_proj")
        h, residual = skip_norm(f"{p}/post_attention_layernorm", "SkipLayerNorm", residual, o,
                                f"{w}.post_attention_layernorm.weight")
        m = f"{p}/mlp"
        gate = matmul(f"{m}/gate_proj", h, hid, cfg.ffn, f"{w}.mlp.gate_proj")
        up = matmul(f"{m}/up_proj", h, hid, cfg.ffn, f"{w}.mlp.up_proj")
        act = plain("Mul", f"{m}/act_fn/Mul", [gate, plain("Sigmoid", f"{m}/act_fn/Sigmoid", [gate])])
        down = matmul(f"{m}/down_proj", plain("Mul", f"{m}/Mul", [act, up]), cfg.ffn, hid, f"{w}.mlp.down_proj")
    final, _ = skip_norm(f"/model/layers.{L}/final_norm_layernorm", "SkipLayerNorm", residual, down,
                         f"model.layers.{L}.final_norm_layernorm.weight", with_sum=False)
    node("MatMul", "/lm_head/MatMul", [final, b.weight("lm_head.MatMul.weight", (hid, cfg.vocab))], ["logits"])
    graph = helper.make_graph(b.nodes, "main_graph", inputs, outputs, b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", GENAI_OPSET), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10, producer_name="ort-graph.zoo (onnxruntime-genai layout)")


def genai_decoder_inputs(cfg: DecoderConfig, batch: int = 1, sequence: int = 8, past: int = 0,
                         seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for `genai_decoder_proto(cfg)`: token ids, an all-ones attention mask of past + sequence
    columns, random past keys/values."""
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, cfg.vocab, (batch, sequence), dtype=np.int64),
             "attention_mask": np.ones((batch, past + sequence), np.int64)}
    for kind in ("key", "value"):
        for i in range(cfg.layers):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal((batch, cfg.kv_heads, past, cfg.head_dim)).astype(np.float32)
    return feeds
