"""The genai-layout decoder with tied, block-quantized embeddings, as onnxruntime-genai's builder writes them
for small models whose `tie_word_embeddings` is set (SmolLM2, Qwen2.5-0.5B, Llama-3.2-1B, Gemma):

- `/lm_head/MatMul_Q{bits}`: com.microsoft MatMulNBits over the quantized table
  `lm_head.MatMul.weight_Q{bits}G{block}` (N = vocab, K = hidden; asymmetric, packed uint8 zero points);
- `/model/embed_tokens/GatherBlockQuantized`: com.microsoft GatherBlockQuantized (gather_axis 0,
  quantize_axis last) reading the same table through `/model/embed_tokens/Reshape` (vocab, hidden * bits / 8),
  and the same scales and zero points (reshaped to one row per token).

Everything else is `genai_decoder_proto`'s fp32 layout.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from ._zoo import DecoderConfig
from ._zoo_genai import _DEFAULT, genai_decoder_proto


def quantize_blocks(w: np.ndarray, bits: int, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric blockwise quantization of the rows of `w` (N, K): packed values (N, K_blocks, block*bits/8),
    scales (N, K_blocks) and packed zero points (N, ceil(K_blocks*bits/8)), MatMulNBits' layout."""
    n, k = w.shape
    if k % block:
        raise ValueError(f"quantize_blocks needs K={k} to be a multiple of block={block}")
    nb, top = k // block, 2 ** bits - 1
    blocks = w.reshape(n, nb, block).astype(np.float64)
    lo, hi = np.minimum(blocks.min(-1), 0), np.maximum(blocks.max(-1), 0)
    scale = np.where(hi > lo, (hi - lo) / top, 1.0)
    zp = np.clip(np.round(-lo / scale), 0, top).astype(np.uint8)
    q = np.clip(np.round(blocks / scale[..., None]) + zp[..., None], 0, top).astype(np.uint8)
    return _pack(q, bits), scale.astype(np.float32), _pack(zp, bits)


def _pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Pack the last axis `8 // bits` values a byte, low bits first (padded with zeros)."""
    per = 8 // bits
    pad = (-q.shape[-1]) % per
    q = np.concatenate([q, np.zeros(q.shape[:-1] + (pad,), np.uint8)], -1) if pad else q
    q = q.reshape(q.shape[:-1] + (q.shape[-1] // per, per)).astype(np.uint16)
    return np.bitwise_or.reduce(q << (np.arange(per, dtype=np.uint16) * bits), axis=-1).astype(np.uint8)


def genai_tied_decoder_proto(cfg: DecoderConfig = _DEFAULT, *, bits: int = 4, block_size: int = 32) -> ModelProto:
    """`genai_decoder_proto(cfg)` with the embedding tied to the lm_head and both quantized to `bits`
    (4 or 8) in blocks of `block_size` along hidden."""
    if bits not in (4, 8) or block_size < 16 or block_size & (block_size - 1) or cfg.hidden % block_size:
        raise ValueError(f"bits={bits!r} must be 4 or 8 and block_size={block_size!r} a power of two >= 16 "
                         f"dividing hidden={cfg.hidden}")
    model = genai_decoder_proto(cfg)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    table = numpy_helper.to_array(inits["model.embed_tokens.weight"])  # (vocab, hidden): the tied weight
    for name in ("model.embed_tokens.weight", "lm_head.MatMul.weight"):
        g.initializer.remove(inits[name])
    V, K = table.shape
    q, scales, zp = quantize_blocks(table, bits, block_size)
    w, s, z = f"lm_head.MatMul.weight_Q{bits}G{block_size}", "lm_head.MatMul.weight_scale", "lm_head.MatMul.weight_zp"
    shape, sshape, zshape = "/model/constants/INT64/embed_shape", "/model/constants/INT64/scale_shape", "/model/constants/INT64/zp_shape"
    g.initializer.extend([numpy_helper.from_array(q, w), numpy_helper.from_array(scales.reshape(-1), s),
                          numpy_helper.from_array(zp.reshape(-1), z),
                          numpy_helper.from_array(np.array([V, K * bits // 8], np.int64), shape),
                          numpy_helper.from_array(np.array(scales.shape, np.int64), sshape),
                          numpy_helper.from_array(np.array(zp.shape, np.int64), zshape)])
    base = "/model/embed_tokens"
    emb = helper.make_node("GatherBlockQuantized", [f"{base}/Reshape/output_0", "input_ids", f"{base}/Reshape_1/output_0",
                                                    f"{base}/Reshape_2/output_0"],
                           [f"{base}/GatherBlockQuantized/output_0"], name=f"{base}/GatherBlockQuantized", domain="com.microsoft",
                           bits=bits, block_size=block_size, gather_axis=0, quantize_axis=1)
    head = helper.make_node("MatMulNBits", [next(n for n in g.node if n.name == "/lm_head/MatMul").input[0], w, s, z],
                            ["logits"], name=f"/lm_head/MatMul_Q{bits}", domain="com.microsoft", K=K, N=V, bits=bits,
                            block_size=block_size, accuracy_level=0)
    nodes = []
    for n in g.node:
        if n.name == "/model/embed_tokens/Gather":
            nodes += [helper.make_node("Reshape", [w, shape], [f"{base}/Reshape/output_0"], name=f"{base}/Reshape"),
                      helper.make_node("Reshape", [s, sshape], [f"{base}/Reshape_1/output_0"], name=f"{base}/Reshape_1"),
                      helper.make_node("Reshape", [z, zshape], [f"{base}/Reshape_2/output_0"], name=f"{base}/Reshape_2"),
                      emb]
        else:
            for i, name in enumerate(n.input):
                if name == f"{base}/Gather/output_0":
                    n.input[i] = f"{base}/GatherBlockQuantized/output_0"
            nodes.append(head if n.name == "/lm_head/MatMul" else n)
    del g.node[:]
    g.node.extend(nodes)
    g.value_info.append(helper.make_tensor_value_info(f"{base}/Reshape/output_0", TensorProto.UINT8,
                                                      ["vocab_size", "hidden_size"]))
    return model
