"""Output types of the attention and embedding fusions of ONNX Runtime's transformers optimizer (and Olive):
com.microsoft Attention, MultiHeadAttention, EmbedLayerNormalization, PackedAttention,
PackedMultiHeadAttention and SparseAttention. Same handler contract as `_contrib_shapes`."""

from __future__ import annotations

from onnx import TensorProto

from ._contrib_shapes import UNKNOWN, Type, _handles
from ._ir import Dim, Node


def _at(ins: list[Type], i: int) -> Type:
    return ins[i] if i < len(ins) else UNKNOWN


def _div(a: Dim, b: Dim) -> Dim:
    return a // b if isinstance(a, int) and isinstance(b, int) and b else None


def _mul(a: Dim, b: Dim) -> Dim:
    return a * b if isinstance(a, int) and isinstance(b, int) else None


def _add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return b if a == 0 else a if b == 0 else None


def _given(node: Node, i: int) -> bool:
    return len(node.inputs) > i and bool(node.inputs[i])


@_handles(("com.microsoft", "Attention"))
def _attention(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """input (B, S, D), weights (D, q + k + v hidden): output (B, S, v), present (2, B, N, P + S, head)."""
    (dt, x), (_, w), (_, past) = _at(ins, 0), _at(ins, 1), _at(ins, 4)
    heads = int(node.attr("num_heads", 0))
    sizes = node.attr("qkv_hidden_sizes")
    v_hidden: Dim = int(sizes[2]) if sizes else (_div(w[1], 3) if w is not None and len(w) == 2 else None)
    if x is None or len(x) != 3:
        return [(dt, None)] * len(node.outputs)
    head = _div(v_hidden, heads)
    if node.attr("past_present_share_buffer", 0) and past is not None:
        present = past
    else:
        p: Dim = past[3] if past is not None and len(past) == 5 else (0 if not _given(node, 4) else None)
        present = (2, x[0], heads or None, _add(p, x[1]), head)
    return [(dt, (x[0], x[1], v_hidden)), (dt, present)][: len(node.outputs)]


@_handles(("com.microsoft", "MultiHeadAttention"))
def _mha(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """query (B, S, D) | packed (B, S, N, 3, H); key (B, L, D) | (B, N, L, H) | packed kv (B, L, N, 2, H);
    value (B, L, Dv) | (B, N, L, Hv): output (B, S, Dv), present_key (B, N, P + L, H), present_value likewise."""
    (dt, q), (_, k), (_, v), (_, past) = _at(ins, 0), _at(ins, 1), _at(ins, 2), _at(ins, 6)
    n = int(node.attr("num_heads", 0)) or None
    unknown = [(dt, None)] * len(node.outputs)
    if q is None or len(q) not in (3, 5):
        return unknown
    batch, s = q[0], q[1]
    if len(q) == 5:  # packed QKV
        head = head_v = q[4]
        length: Dim = s
        bnsh = False
    elif k is not None and len(k) == 5:  # packed KV
        head = head_v = k[4]
        length, bnsh = k[1], False
    elif k is not None and v is not None and len(k) in (3, 4) and len(v) == len(k):
        bnsh = len(k) == 4
        head = k[3] if bnsh else _div(k[2], n)
        head_v = v[3] if bnsh else _div(v[2], n)
        length = k[2] if bnsh else k[1]
    else:
        return unknown
    out = (dt, (batch, s, _mul(n, head_v)))
    p: Dim = past[2] if past is not None and len(past) == 4 else (0 if not _given(node, 6) else None)
    total = length if bnsh else _add(p, length)
    pk, pv = (dt, (batch, n, total, head)), (dt, (batch, n, total, head_v))
    qk = (dt, (batch, n, s, total))
    return [out, pk, pv, qk][: len(node.outputs)]


@_handles(("com.microsoft", "EmbedLayerNormalization"))
def _embed_layer_norm(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """input_ids (B, S), word_embedding (V, D): output and embedding_sum (B, S, D), mask_index (B,) int32."""
    (_, ids), (dt, emb) = _at(ins, 0), _at(ins, 2)
    if ids is None or len(ids) != 2:
        return [(dt, None), (TensorProto.INT32, None), (dt, None)][: len(node.outputs)]
    d: Dim = emb[1] if emb is not None and len(emb) == 2 else None
    out = (dt, (ids[0], ids[1], d))
    return [out, (TensorProto.INT32, (ids[0],)), out][: len(node.outputs)]


@_handles(("com.microsoft", "PackedAttention"))
def _packed_attention(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """input (T, D) of the batch's T tokens, weights (D, q + k + v hidden): output (T, v)."""
    (dt, x), (_, w) = _at(ins, 0), _at(ins, 1)
    sizes = node.attr("qkv_hidden_sizes")
    v: Dim = int(sizes[2]) if sizes else (_div(w[1], 3) if w is not None and len(w) == 2 else None)
    return [(dt, None if x is None or len(x) != 2 else (x[0], v))]


@_handles(("com.microsoft", "PackedMultiHeadAttention"))
def _packed_mha(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """query (T, D) with value (T, Dv), or packed QKV (T, N, 3, H): output (T, Dv | N * H)."""
    (dt, q), (_, v) = _at(ins, 0), _at(ins, 2)
    n = int(node.attr("num_heads", 0)) or None
    if q is not None and len(q) == 4:
        return [(dt, (q[0], _mul(n, q[3])))]
    if q is not None and len(q) == 2 and v is not None and len(v) == 2:
        return [(dt, (q[0], v[1]))]
    return [(dt, None)]


@_handles(("com.microsoft", "SparseAttention"))
def _sparse_attention(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """query (B, S, N * H) or packed (B, S, (N + 2 KV) * H); past_key (B, KV, max_cache, H) shares its buffer
    with present_key: output (B, S, N * H), presents shaped like the pasts."""
    (dt, q), (_, pk), (_, pv) = _at(ins, 0), _at(ins, 3), _at(ins, 4)
    n = int(node.attr("num_heads", 0)) or None
    head: Dim = pk[3] if pk is not None and len(pk) == 4 else None
    out = (dt, None if q is None or len(q) != 3 else (q[0], q[1], _mul(n, head)))
    return [out, (dt, pk), (dt, pv)][: len(node.outputs)]


__all__: list[str] = []
