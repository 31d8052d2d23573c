"""com.microsoft QMoE with integer-quantized experts (quant_type 'int'), ONNX Runtime CPU semantics.

Expert weights are uint8 (E, N, K * bits / 8) packing 2/4/8-bit values along K (low bits first), as
quantize_matmul_{4,8}bits writes them; scales are per row (E, N) or per block of K (E, N, K / block_size);
zero points (default 2^(bits-1)) are packed along N per row (E, ceil(N * bits / 8)) or along the blocks
(E, N, ceil(K / block_size * bits / 8)). W = (q - zero_point) * scale, then the MoE of `ops_extra_moe` with
routing weights always renormalized over the k chosen experts (as ORT's CPU QMoE).

Like MatMulNBits, when the weights are constant initializers ONNX Runtime computes block-wise 8-bit experts
(and 4-bit ones at accuracy_level 4) with int8 activations: each GEMM input is quantized per block of K
(`fake_quantize_a`), which this kernel reproduces.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, constant_initializer, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register
from .ops_extra_moe import _ACTS, activate, route
from .ops_extra_quant import fake_quantize_a, unpack_bits

MS = "com.microsoft"
_T = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})
# input positions: weights, scales, bias, zero points per FC
_FC = {1: (2, 3, 4, 11), 2: (5, 6, 7, 12), 3: (8, 9, 10, 13)}


def _bits(a: dict, fc: int) -> int:
    return int(a.get(f"fc{fc}_expert_weight_bits", a.get("expert_weight_bits", 4)))


def dequantize_expert(w: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, bits: int, block: int, k: int,
                      e: int) -> np.ndarray:
    """Expert e's float32 weight (N, K)."""
    q = unpack_bits(w[e], bits, k).astype(np.float32)  # (N, K)
    n = q.shape[0]
    if block > 0:
        nb = k // block
        z = np.float32(2 ** (bits - 1)) if zp is None else np.repeat(
            unpack_bits(zp[e].reshape(n, -1), bits, nb).astype(np.float32), block, axis=1)
        return (q - z) * np.repeat(scales[e].reshape(n, nb).astype(np.float32), block, axis=1)
    z = np.float32(2 ** (bits - 1)) if zp is None else unpack_bits(zp[e].reshape(-1), bits, n).astype(
        np.float32)[:, None]
    return (q - z) * scales[e].reshape(n, 1).astype(np.float32)


@register("QMoE", domain=MS)
class QMoE(OpImpl):
    """QMoE(input, router_probs, fc1 weights/scales/bias, fc2 ..., fc3 ..., zero points) with int experts."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        if str(a.get("quant_type", "int")) != "int":
            return Decline(rejected=f"quant_type={a['quant_type']!r}", accepts="quant_type='int'",
                           remedy="run float8/float4 experts on ONNX Runtime's CUDA EP")
        if int(a.get("weights_prepacked", -1)) not in (-1, 0):
            return Decline(rejected=f"weights_prepacked={a['weights_prepacked']!r}", accepts="-1 or 0 (raw layout)",
                           remedy="export the raw quantize_matmul layout")
        for fc in (1, 2, 3):
            if _bits(a, fc) not in (2, 4, 8):
                return Decline(rejected=f"fc{fc} weight bits {_bits(a, fc)!r}", accepts="2, 4 or 8",
                               remedy="re-quantize the experts with 4 or 8 bits")
        block = int(a.get("block_size", 0))
        if block and (block < 16 or block & (block - 1)):
            return Decline(rejected=f"block_size={block!r}", accepts="0 or a power of two >= 16",
                           remedy="fix block_size")
        act = str(a.get("activation_type", "relu"))
        if act not in _ACTS:
            return Decline(rejected=f"activation_type={act!r}", accepts=", ".join(_ACTS),
                           remedy="run this activation on ONNX Runtime's CUDA EP")
        for name in ("use_sparse_mixer", "swiglu_limit_after_activation"):
            if int(a.get(name, 0)):
                return Decline(rejected=f"{name}=1", accepts=f"{name}=0", remedy="run it on ONNX Runtime's CUDA EP")
        if act == "swiglu" and int(a.get("swiglu_fusion", 0)) == 0 and not (len(inputs) > 8 and inputs[8].present):
            return Decline(rejected="swiglu with swiglu_fusion=0 and no fc3 weights",
                           accepts="swiglu_fusion 1 or 2, or fc3 weights", remedy="fix the node")
        for i in range(14, len(inputs)):
            if inputs[i].present:
                return Decline(rejected=f"input {i} present (router_weights / global or activation scales)",
                               accepts="inputs 0-13 only", remedy="run this node on ONNX Runtime")
        for i in (0, 1, 4, 7, 10):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in _T:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="float32, float16")
        for fc, (wi, _si, _bi, zi) in _FC.items():
            for i in (wi, zi):
                if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype != TensorProto.UINT8:
                    return Decline(rejected=f"fc{fc} input {i} dtype {dtype_name(inputs[i].dtype)}",
                                   accepts="uint8 packed weights / zero points")
        return None

    def _int8_activations(self, node: Node, fc: int, block: int) -> bool:
        graph = node.graph
        wname = node.inputs[_FC[fc][0]] if len(node.inputs) > _FC[fc][0] else ""
        if block <= 0 or graph is None or constant_initializer(graph, wname) is None:
            return False
        return _bits(attrs_of(node), fc) == 8 or int(node.attr("accuracy_level", 0)) == 4

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        x, router = inputs[0], inputs[1]
        f = np.float32
        xt = x.reshape(-1, x.shape[-1]).astype(f)
        hidden = xt.shape[1]
        block = int(a.get("block_size", 0))
        ids, wts = route(router.reshape(xt.shape[0], -1), int(a.get("k", 1)), True)
        w1, s1, b1, z1 = (get(i) for i in _FC[1])
        w2, s2, b2, z2 = (get(i) for i in _FC[2])
        w3, s3, b3, z3 = (get(i) for i in _FC[3])
        inter = w2.shape[2] * 8 // _bits(a, 2)
        q1, q2 = self._int8_activations(node, 1, block), self._int8_activations(node, 2, block)
        y = np.zeros_like(xt)
        for e in np.unique(ids):
            tok, slot = np.nonzero(ids == e)
            xe = xt[tok]
            xin = fake_quantize_a(xe, block) if q1 else xe
            h = xin @ dequantize_expert(w1, s1, z1, _bits(a, 1), block, hidden, e).T
            if b1 is not None:
                h = h + b1[e].astype(f)
            g3 = None
            if w3 is not None:
                g3 = xin @ dequantize_expert(w3, s3, z3, _bits(a, 3), block, hidden, e).T
                if b3 is not None:
                    g3 = g3 + b3[e].astype(f)
            h = activate(h, a, g3)
            hin = fake_quantize_a(h, block) if q2 else h
            out = hin @ dequantize_expert(w2, s2, z2, _bits(a, 2), block, inter, e).T
            if b2 is not None:
                out = out + b2[e].astype(f)
            np.add.at(y, tok, out * wts[tok, slot][:, None])
        return [y.reshape(x.shape).astype(x.dtype)]


__all__ = ["QMoE", "dequantize_expert"]
